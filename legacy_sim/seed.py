"""Deterministic, realistic legacy data: xxl-job and batch-center databases for tests,
the demo and benchmarks (beside the simulators that run on it: the readers only read).

Everything comes from one seeded `random.Random`, so a seed gives the same rows every
time (registry heartbeats are the exception: they are stamped relative to the database's
clock, so the reader sees those executors alive). Rows go in with executemany in chunks,
generated lazily, so 10 rows and 1M rows use the same code and flat memory.

Each generated database holds every schedule type, sharding (broadcast groups with live
and dead registry rows; batch-center `shard_total` and `shard_params`), paused, stopped
and finished jobs, plus a few deliberately bad rows. The `SeedSummary` says exactly
which keys are bad and which field their one Problem names, so a test can assert the
exact quarantine. Malformed cron expressions are listed separately: the reader does not
validate cron syntax (the migrator does, with the real cron), so they read as ok here.

The tables must exist (`readers.legacy_ddl.create_legacy_schema`); ids are explicit, so
seed into an empty database.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection, Engine, Table

from dbkit.capabilities import capabilities
from dbkit.connections import begin, connect
from readers.legacy_ddl.tables import XxlJobLineage, batch_center_metadata, xxljob_metadata
from readers.records import SourceSystem
from readers.timezones import DEFAULT_ZONE, LegacyTimeZone, to_epoch_ms
from readers.xxljob.reader import db_utc_now

BASE_TIME = datetime(2026, 12, 2, tzinfo=timezone.utc)
BUSINESS_NAMES = ("sop-audience", "reminder", "coupon", "report", "settlement", "push", "crm-sync", "risk-scan")
GOOD_CRONS = (
    "0 0/5 * * * ?", "0 0 2 * * ?", "0 30 9 ? * MON-FRI", "0 0 0 L * ?", "0 0 12 15W * ?",
    "0 0 10 ? * 6#3", "0 15 10 * * ? 2027", "*/30 * * * * ?", "0 0 8,20 * * ?",
)  # fmt: skip
MALFORMED_CRONS = ("0 61 * * * ?", "not a cron", "0 0 0 * * *", "0 0 25 * * ?")
ROUTES = ("FIRST", "ROUND", "RANDOM", "CONSISTENT_HASH", "LEAST_RECENTLY_USED", "FAILOVER")
CHUNK = 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedSummary:
    """What a seed wrote. `good` counts definitions the reader takes without Problems
    (the malformed-cron rows among them); `bad_keys` maps each bad row's source key to
    the field its one Problem names."""

    system: SourceSystem
    lineage: str | None
    biz_codes: tuple[str, ...]
    good: int
    bad: int
    bad_keys: Mapping[str, str] = field(default_factory=dict)
    malformed_cron_keys: tuple[str, ...] = ()
    executions: int = 0
    executions_by_business: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.good + self.bad


def _insert(bind: Engine | Connection, table: Table, rows: Iterable[dict[str, Any]], chunk: int) -> int:
    """executemany in chunks, one transaction per chunk; returns the row count."""
    count = 0
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        if isinstance(bind, Engine):
            with begin(bind) as conn:
                conn.execute(table.insert(), batch)
        else:
            bind.execute(table.insert(), batch)

    for row in rows:
        batch.append(row)
        if len(batch) >= chunk:
            flush()
            count += len(batch)
            batch = []
    if batch:
        flush()
        count += len(batch)
    return count


def _db_now(bind: Engine | Connection) -> datetime:
    if isinstance(bind, Engine):
        with connect(bind) as conn:
            return db_utc_now(conn)
    return db_utc_now(bind)


def _bad_positions(rng: random.Random, total: int, bad: int, malformed: int) -> tuple[list[int], list[int]]:
    picks = rng.sample(range(1, total + 1), min(total, bad + malformed))
    return sorted(picks[:bad]), sorted(picks[bad:])


@dataclass(frozen=True)
class _Spoiled:
    """The rows a seed spoils: row id -> bad kind, the ids given a malformed cron, and the
    field each kind's one Problem names."""

    bad: dict[int, str]
    malformed: frozenset[int]
    field_of: dict[str, str]

    def summary(
        self,
        system: SourceSystem,
        lineage: str | None,
        biz_codes: tuple[str, ...],
        total: int,
        executions: int,
        by_business: Counter[str],
    ) -> SeedSummary:
        return SeedSummary(
            system=system,
            lineage=lineage,
            biz_codes=biz_codes,
            good=total - len(self.bad),
            bad=len(self.bad),
            bad_keys={str(i): self.field_of[k] for i, k in self.bad.items()},
            malformed_cron_keys=tuple(str(i) for i in sorted(self.malformed)),
            executions=executions,
            executions_by_business=dict(by_business),
        )


def _spoiled(
    kinds: tuple[tuple[str, str], ...], *, total: int, bad_rows: int | None, malformed_crons: int, rng_seed: int
) -> _Spoiled:
    """`bad_rows` defaults to one of every kind, cycling through the kinds when larger."""
    n_bad = len(kinds) if bad_rows is None else bad_rows
    bad_ids, malformed_ids = _bad_positions(_rng(rng_seed, "plan"), total, n_bad, malformed_crons)
    return _Spoiled(
        bad={i: kinds[n % len(kinds)][0] for n, i in enumerate(bad_ids)} if kinds else {},
        malformed=frozenset(malformed_ids),
        field_of=dict(kinds),
    )


def _rng(seed: int, stream: str) -> random.Random:
    """One generator per stream, so a stream can be replayed without the others."""
    return random.Random(f"{seed}:{stream}")


def _stores_any_text(bind: Engine | Connection) -> bool:
    return not capabilities(bind).enforces_text_columns


# -- xxl-job -----------------------------------------------------------------------------

# bad-row kinds: (name, the field its Problem names; {lineage: field} where it differs)
_XXL_BAD = (
    ("empty_cron", "schedule_conf"),
    ("unknown_schedule_type", "schedule_type"),
    ("unknown_misfire", "misfire_strategy"),
    ("unknown_route", "executor_route_strategy"),
    ("null_route", "executor_route_strategy"),
    ("non_positive_rate", "schedule_conf"),
    ("out_of_range_next", "trigger_next_time"),
    ("null_handler", "executor_handler"),
    ("unknown_glue", "glue_type"),
    ("oversize_param", "executor_param"),
    ("orphan_group", "job_group"),
    ("invalid_utf8", "executor_param"),
)
_NEEDS_TYPES = frozenset({"unknown_schedule_type", "unknown_misfire", "non_positive_rate"})


def xxl_bad_kinds(lineage: XxlJobLineage | str, *, sqlite: bool) -> tuple[tuple[str, str], ...]:
    """The bad-row kinds a lineage can hold: 2.2 has no schedule types. Only SQLite can
    hold a param over 64 KiB (MySQL's TEXT stops at 65,535 bytes) or bytes that are not
    UTF-8 (a strict MySQL/MariaDB refuses them in a utf8mb4 column)."""
    lin = XxlJobLineage(lineage)
    out = []
    for kind, fld in _XXL_BAD:
        if lin is XxlJobLineage.V2_2 and kind in _NEEDS_TYPES:
            continue
        if kind in ("oversize_param", "invalid_utf8") and not sqlite:
            continue
        out.append((kind, "job_cron" if lin is XxlJobLineage.V2_2 and fld == "schedule_conf" else fld))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Group:
    id: int
    app_name: str
    live: tuple[str, ...]  # live executor addresses, sorted


def _xxl_groups(rng: random.Random, count: int, executors: int) -> list[_Group]:
    out = []
    for i in range(count):
        name = BUSINESS_NAMES[i] if i < len(BUSINESS_NAMES) else f"biz-{i}"
        n = max(1, executors + rng.randint(-1, 1))
        live = tuple(sorted(f"http://10.{i}.{rng.randint(0, 255)}.{k + 10}:9999/" for k in range(n)))
        out.append(_Group(i + 1, f"{name}-executor", live))
    return out


def _xxl_group_rows(
    groups: list[_Group], lin: XxlJobLineage, wall_now: datetime, rng: random.Random
) -> Iterator[dict[str, Any]]:
    title = "name" if lin is XxlJobLineage.MASTER else "title"
    for g in groups:
        manual = g.id == len(groups) and len(groups) > 1  # the last group lists its executors by hand
        row: dict[str, Any] = {
            "id": g.id,
            "app_name": g.app_name,
            title: g.app_name.removesuffix("-executor")[:12],
            "address_type": 1 if manual else 0,
            "address_list": ",".join(g.live),
        }
        if lin is not XxlJobLineage.V2_2:
            row["update_time"] = wall_now
        if lin is XxlJobLineage.MASTER:
            row["access_token"] = f"tok-{rng.getrandbits(64):016x}"
        yield row


def _registry_rows(groups: list[_Group], wall_now: datetime, rng: random.Random) -> Iterator[dict[str, Any]]:
    rid = 0
    for g in groups:
        for address in g.live:
            rid += 1
            yield {"id": rid, "registry_group": "EXECUTOR", "registry_key": g.app_name, "registry_value": address,
                   "update_time": wall_now - timedelta(seconds=rng.randint(0, 25))}  # fmt: skip
        rid += 1  # a dead executor: its last heartbeat is older than DEAD_TIMEOUT
        dead = f"http://10.{g.id}.254.254:9999/"
        yield {"id": rid, "registry_group": "EXECUTOR", "registry_key": g.app_name, "registry_value": dead,
               "update_time": wall_now - timedelta(minutes=10)}  # fmt: skip
    rid += 1
    yield {"id": rid, "registry_group": "ADMIN", "registry_key": "xxl-job-admin",
           "registry_value": "http://10.255.0.1:8080/xxl-job-admin/", "update_time": wall_now}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class _XxlPlan:
    lineage: XxlJobLineage
    groups: list[_Group]
    jobs_per_group: int
    bad: dict[int, str]  # job id -> bad kind
    malformed: frozenset[int]
    base_ms: int
    wall_base: datetime


def _good_job(rng: random.Random, plan: _XxlPlan, job_id: int, group: _Group) -> dict[str, Any]:
    lin = plan.lineage
    typed = lin is not XxlJobLineage.V2_2
    kind = rng.choices(
        ("cron", "fix_rate", "none", "broadcast", "glue", "stopped", "fire_once"),
        weights=(6, 2 if typed else 0, 1 if typed else 0, 1, 1, 1, 1 if typed else 0),
    )[0]
    running = kind not in ("none", "stopped")
    cron = MALFORMED_CRONS[job_id % len(MALFORMED_CRONS)] if job_id in plan.malformed else rng.choice(GOOD_CRONS)
    schedule: tuple[str, str | None]
    if kind == "fix_rate" and job_id not in plan.malformed:
        schedule = ("FIX_RATE", str(rng.choice((30, 60, 300, 3600))))
    elif kind == "none" and job_id not in plan.malformed:
        schedule = ("NONE", None)
    else:
        schedule = ("CRON", cron)
    glue = kind == "glue"
    row: dict[str, Any] = {
        "id": job_id,
        "job_group": group.id,
        "name" if lin is XxlJobLineage.MASTER else "job_desc": f"{group.app_name} job {job_id}",
        "add_time": plan.wall_base - timedelta(days=rng.randint(1, 400)),
        "update_time": plan.wall_base - timedelta(hours=rng.randint(1, 48)),
        "author": rng.choice(("zhang.wei", "li.na", "wang.fang", "ops")),
        "alarm_email": "",
        "executor_route_strategy": "SHARDING_BROADCAST" if kind == "broadcast" else rng.choice(ROUTES),
        "executor_handler": "" if glue else f"{group.app_name.split('-')[0]}Handler{job_id % 7}",
        "executor_param": json.dumps({"batch": rng.randint(1, 500)}) if rng.random() < 0.6 else "",
        "executor_block_strategy": rng.choice(("SERIAL_EXECUTION", "DISCARD_LATER", "COVER_EARLY")),
        "executor_timeout": rng.choice((0, 0, 30, 120, 600)),
        "executor_fail_retry_count": rng.choice((0, 0, 1, 3)),
        "glue_type": rng.choice(("GLUE_SHELL", "GLUE_PYTHON", "GLUE_GROOVY")) if glue else "BEAN",
        "glue_source": '#!/bin/bash\necho "xxl-job: $1 $2 $3"\nexit 0\n' if glue else "",
        "glue_remark": "GLUE init" if glue else "",
        "glue_updatetime": plan.wall_base - timedelta(days=rng.randint(1, 30)),
        "child_jobid": "",
        "trigger_status": 1 if running else 0,
        "trigger_last_time": plan.base_ms - 60_000 if running else 0,
        "trigger_next_time": plan.base_ms + rng.randint(1, 3600) * 1000 if running else 0,
    }
    if typed:
        row["schedule_type"], row["schedule_conf"] = schedule
        row["misfire_strategy"] = "FIRE_ONCE_NOW" if kind == "fire_once" else "DO_NOTHING"
    else:
        row["job_cron"] = cron
    return row


def _spoil_job(row: dict[str, Any], kind: str, lin: XxlJobLineage) -> dict[str, Any]:
    """Make a good CRON BEAN row bad in exactly one way."""
    typed = lin is not XxlJobLineage.V2_2
    row.update(glue_type="BEAN", executor_handler=row["executor_handler"] or "fixHandler", glue_source="")
    if row["executor_route_strategy"] == "SHARDING_BROADCAST":
        row["executor_route_strategy"] = "FIRST"
    if typed:
        row.update(schedule_type="CRON", schedule_conf="0 0 3 * * ?", misfire_strategy="DO_NOTHING")
    else:
        row["job_cron"] = "0 0 3 * * ?"
    conf = "schedule_conf" if typed else "job_cron"
    spoil: dict[str, dict[str, Any]] = {
        "empty_cron": {conf: ""},
        "unknown_schedule_type": {"schedule_type": "FIX_DELAY"},
        "unknown_misfire": {"misfire_strategy": "RUN_TWICE"},
        "unknown_route": {"executor_route_strategy": "WEIGHTED_ROUND"},
        "null_route": {"executor_route_strategy": None},
        "non_positive_rate": {"schedule_type": "FIX_RATE", "schedule_conf": "0"},
        "out_of_range_next": {"trigger_status": 1, "trigger_next_time": 9_999_999_999_999},  # year 2286
        "null_handler": {"executor_handler": None},
        "unknown_glue": {"glue_type": "GLUE_RUBY"},
        "oversize_param": {"executor_param": "x" * (70 * 1024)},
        "orphan_group": {"job_group": 99_999},
        "invalid_utf8": {"executor_param": b'{"k": "\xff\xfe"}'},
    }
    row.update(spoil[kind])
    return row


def _xxl_jobs(rng: random.Random, plan: _XxlPlan) -> Iterator[dict[str, Any]]:
    job_id = 0
    for group in plan.groups:
        for _ in range(plan.jobs_per_group):
            job_id += 1
            row = _good_job(rng, plan, job_id, group)
            if job_id in plan.bad:
                row = _spoil_job(row, plan.bad[job_id], plan.lineage)
            yield row


def seed_xxljob(
    bind: Engine | Connection,
    lineage: XxlJobLineage | str = XxlJobLineage.V3_4,
    *,
    groups: int = 3,
    jobs_per_group: int = 10,
    bad_rows: int | None = None,
    malformed_crons: int = 1,
    executors_per_group: int = 3,
    log_window: tuple[datetime, datetime] | None = None,
    fires_per_job: int = 0,
    rng_seed: int = 0,
    base_time: datetime = BASE_TIME,
    admin_tz: str = DEFAULT_ZONE,
    chunk_size: int = CHUNK,
) -> SeedSummary:
    """Fill an empty xxl-job database of `lineage`. `bad_rows` defaults to one of every
    kind the lineage can hold (`xxl_bad_kinds`), cycling when larger. With `log_window`
    and `fires_per_job`, running CRON/FIX_RATE jobs get `xxl_job_log` rows in the window:
    broadcast shards, failures with retries, timeouts, trigger failures, manual runs."""
    lin = XxlJobLineage(lineage)
    zone = LegacyTimeZone(admin_tz)
    total = groups * jobs_per_group
    spoiled = _spoiled(
        xxl_bad_kinds(lin, sqlite=_stores_any_text(bind)),
        total=total,
        bad_rows=bad_rows,
        malformed_crons=malformed_crons,
        rng_seed=rng_seed,
    )
    plan = _XxlPlan(
        lineage=lin,
        groups=_xxl_groups(_rng(rng_seed, "groups"), groups, executors_per_group),
        jobs_per_group=jobs_per_group,
        bad=spoiled.bad,
        malformed=spoiled.malformed,
        base_ms=to_epoch_ms(base_time),
        wall_base=zone.to_wall(base_time),
    )
    md = xxljob_metadata(lin)
    wall_now = zone.to_wall(_db_now(bind)).replace(microsecond=0)
    _insert(
        bind,
        md.tables["xxl_job_group"],
        _xxl_group_rows(plan.groups, lin, wall_now, _rng(rng_seed, "tokens")),
        chunk_size,
    )
    _insert(
        bind,
        md.tables["xxl_job_registry"],
        _registry_rows(plan.groups, wall_now, _rng(rng_seed, "registry")),
        chunk_size,
    )
    _insert(bind, md.tables["xxl_job_info"], _xxl_jobs(_rng(rng_seed, "jobs"), plan), chunk_size)
    by_business: Counter[str] = Counter()
    executions = 0
    if log_window is not None and fires_per_job > 0:
        # the same job stream again (same seed): the log needs no job list in memory
        jobs = (j for j in _xxl_jobs(_rng(rng_seed, "jobs"), plan) if j["id"] not in plan.bad)
        logs = _XxlLogs(_rng(rng_seed, "logs"), {g.id: g for g in plan.groups}, zone, by_business)
        executions = _insert(bind, md.tables["xxl_job_log"], logs.rows(jobs, log_window, fires_per_job), chunk_size)
    businesses = tuple(g.app_name for g in plan.groups)
    return spoiled.summary(SourceSystem.XXL_JOB, lin.value, businesses, total, executions, by_business)


_ZH_TITLES = {"CRON": "Cron触发", "MANUAL": "手动触发", "RETRY": "失败重试触发"}
_RETRY_BANNER = '<br><br><span style="color:#F39C12;" > >>>>>>>>>>>失败重试触发<<<<<<<<<<< </span><br>'


class _XxlLogs:
    """xxl_job_log rows as the admin writes them (notes §2.11): one row per attempt and
    shard; a failed attempt with retries left is re-triggered ~10 s later with the same
    shard and one retry fewer, and gets the retry banner appended to its trigger_msg."""

    def __init__(
        self, rng: random.Random, groups: Mapping[int, _Group], zone: LegacyTimeZone, counts: Counter[str]
    ) -> None:
        self.rng, self.groups, self.zone, self.counts = rng, groups, zone, counts
        self.next_id = 0

    def rows(
        self, jobs: Iterable[dict[str, Any]], window: tuple[datetime, datetime], fires: int
    ) -> Iterator[dict[str, Any]]:
        start, end = self.zone.to_wall(window[0]), self.zone.to_wall(window[1])
        step = (end - start) / fires
        for job in jobs:
            if job["trigger_status"] != 1 or job["job_group"] not in self.groups:
                continue
            for k in range(fires):
                at = (start + step * k + timedelta(seconds=self.rng.randint(0, 2))).replace(microsecond=0)
                if at >= end:
                    continue
                yield from self._fire(job, at, last=k == fires - 1)

    def _fire(self, job: dict[str, Any], at: datetime, *, last: bool) -> Iterator[dict[str, Any]]:
        group = self.groups[job["job_group"]]
        broadcast = job["executor_route_strategy"] == "SHARDING_BROADCAST"
        shards = list(enumerate(group.live)) if broadcast else [(0, self.rng.choice(group.live))]
        kind = "MANUAL" if self.rng.random() < 0.02 else "CRON"
        for index, address in shards:
            sharding = f"{index}/{len(shards)}" if broadcast else None
            remaining, when = job["executor_fail_retry_count"], at
            while True:
                row, failed = self._attempt(job, group, address, sharding, remaining, when, kind, last=last)
                if failed and remaining > 0:
                    row["trigger_msg"] += _RETRY_BANNER
                    yield row
                    remaining, when, kind = remaining - 1, when + timedelta(seconds=10), "RETRY"
                    continue
                yield row
                break

    def _attempt(
        self,
        job: dict[str, Any],
        group: _Group,
        address: str,
        sharding: str | None,
        remaining: int,
        at: datetime,
        kind: str,
        *,
        last: bool,
    ) -> tuple[dict[str, Any], bool]:
        r = self.rng.random()
        trigger_code, handle_code, handle_msg = 200, 200, None
        if r < 0.07:
            handle_code, handle_msg = 500, "java.lang.RuntimeException: downstream 503"
        elif r < 0.10:
            handle_code, handle_msg = 502, "job execute timeout "
        elif r < 0.12:
            trigger_code, handle_code = 500, 0
        elif r < 0.15 and last:
            handle_code = 0  # still running at the end of the window
        self.next_id += 1
        self.counts[group.app_name] += 1
        finished = handle_code != 0
        row = {
            "id": self.next_id, "job_group": group.id, "job_id": job["id"],
            "executor_address": address if trigger_code == 200 else None,
            "executor_handler": job["executor_handler"], "executor_param": job["executor_param"],
            "executor_sharding_param": sharding, "executor_fail_retry_count": remaining,
            "trigger_time": at, "trigger_code": trigger_code,
            "trigger_msg": f"任务触发类型：{_ZH_TITLES[kind]}<br>调度机器：10.255.0.1<br>执行器-注册方式：自动注册"
                           f"<br>执行器-地址列表：{list(group.live)}<br>路由策略：{job['executor_route_strategy']}",
            "handle_time": at + timedelta(seconds=self.rng.randint(1, 30)) if finished else None,
            "handle_code": handle_code, "handle_msg": handle_msg,
            "alarm_status": 2 if handle_code not in (0, 200) or trigger_code != 200 else 0,
        }  # fmt: skip
        return row, trigger_code != 200 or handle_code not in (0, 200)


# -- batch center ------------------------------------------------------------------------

_BC_BAD = (
    ("invalid_json_payload", "payload"),
    ("payload_not_object", "payload"),
    ("null_cron", "cron_expr"),
    ("zero_interval", "interval_sec"),
    ("unknown_task_type", "task_type"),
    ("bad_priority", "priority"),
    ("bad_misfire", "misfire_policy"),
    ("unknown_status", "status"),
    ("shard_params_not_array", "shard_params"),
    ("relative_url_no_base", "callback_url"),
    ("out_of_range_fire_time", "fire_time"),
    ("orphan_business", "biz_code"),
    ("bad_method", "http_method"),
    ("invalid_utf8", "payload"),
)


def bc_bad_kinds(*, sqlite: bool, businesses: int) -> tuple[tuple[str, str], ...]:
    """The bad-row kinds a batch-center seed holds (invalid UTF-8 only on SQLite; a
    relative URL without a base needs the base-less second business)."""
    return tuple(
        (k, f) for k, f in _BC_BAD
        if (sqlite or k != "invalid_utf8") and (businesses >= 2 or k != "relative_url_no_base")
    )  # fmt: skip


def _bc_biz_rows(rng: random.Random, count: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        code = BUSINESS_NAMES[i] if i < len(BUSINESS_NAMES) else f"biz-{i}"
        rows.append({
            "biz_code": code, "biz_name": code.replace("-", " ").title(),
            # the second business only uses absolute callback URLs: it has no base
            "callback_base_url": None if i == 1 else f"http://{code}.svc.local:8080/bc",
            "access_token": f"bc-{rng.getrandbits(96):024x}" if i != 2 else None,
            "enabled": 0 if count > 2 and i == count - 1 else 1,
        })  # fmt: skip
    return rows


@dataclass(frozen=True, slots=True, kw_only=True)
class _BcPlan:
    bizs: list[dict[str, Any]]
    tasks_per_business: int
    bad: dict[int, str]
    malformed: frozenset[int]
    wall_base: datetime


def _good_task(rng: random.Random, plan: _BcPlan, task_id: int, biz: dict[str, Any]) -> dict[str, Any]:
    kind = rng.choices(
        ("delay", "delay_done", "cron", "fixed", "paused", "running", "sharded", "shard_params"),
        weights=(3, 2, 4, 2, 1, 1, 1, 1),
    )[0]
    if task_id in plan.malformed:
        kind = "cron"
    task_type = {"delay": 1, "delay_done": 1, "fixed": 3}.get(kind, 2)
    status = {"delay_done": rng.choice((2, 3, 4)), "paused": 5, "running": 1}.get(kind, 0)
    due = plan.wall_base + timedelta(seconds=rng.randint(-3600, 86_400))
    base = biz["callback_base_url"]
    url = (
        f"/callbacks/{kind}/{task_id}"
        if base and rng.random() < 0.7
        else f"http://{biz['biz_code']}.svc.local:8080/bc/cb/{task_id}"
    )
    cron = MALFORMED_CRONS[task_id % len(MALFORMED_CRONS)] if task_id in plan.malformed else rng.choice(GOOD_CRONS)
    shards = rng.randint(2, 6)
    return {
        "id": task_id, "biz_code": biz["biz_code"], "task_key": f"{kind}-{task_id}",
        "task_name": f"{biz['biz_code']} {kind} {task_id}", "task_type": task_type,
        "cron_expr": cron if task_type == 2 else None,
        "interval_sec": rng.choice((60, 300, 900)) if task_type == 3 else None,
        "fire_time": due.replace(microsecond=0),
        "end_time": (due + timedelta(days=90)).replace(microsecond=0) if task_type > 1 and rng.random() < 0.3 else None,
        "callback_url": url, "http_method": "GET" if rng.random() < 0.15 else "POST",
        "callback_timeout_ms": rng.choice((3000, 10000, 30000, 60000)),
        "payload": json.dumps({"audience": rng.randint(1, 9999), "page": 300}) if rng.random() < 0.8 else None,
        "shard_total": shards if kind == "sharded" else 1,
        "shard_params": json.dumps([{"page": p} for p in range(shards)]) if kind == "shard_params" else None,
        "priority": rng.randint(1, 9), "max_retry": rng.choice((0, 0, 1, 3)), "misfire_policy": rng.choice((1, 2)),
        "status": status, "migrated": 0, "version": rng.randint(0, 40),
        "create_time": plan.wall_base - timedelta(days=rng.randint(1, 300)),
        "update_time": plan.wall_base - timedelta(minutes=rng.randint(1, 600)),
    }  # fmt: skip


def _spoil_task(row: dict[str, Any], kind: str, bizs: list[dict[str, Any]]) -> dict[str, Any]:
    """Make a good WAITING CRON row bad in exactly one way."""
    absolute = f"http://svc.local/bc/cb/{row['id']}"
    row.update(task_type=2, cron_expr="0 0 3 * * ?", interval_sec=None, status=0, payload="{}", shard_params=None,
               shard_total=1, priority=5, misfire_policy=1, http_method="POST", callback_url=absolute)  # fmt: skip
    spoil: dict[str, dict[str, Any]] = {
        "invalid_json_payload": {"payload": '{"audience": '},
        "payload_not_object": {"payload": "[1, 2, 3]"},
        "null_cron": {"cron_expr": None},
        "zero_interval": {"task_type": 3, "cron_expr": None, "interval_sec": 0},
        "unknown_task_type": {"task_type": 7},
        "bad_priority": {"priority": 12},
        "bad_misfire": {"misfire_policy": 3},
        "unknown_status": {"status": 9},
        "shard_params_not_array": {"shard_params": '{"page": 1}'},
        "relative_url_no_base": {"biz_code": bizs[1]["biz_code"], "callback_url": "/callbacks/relative"},
        "out_of_range_fire_time": {"fire_time": datetime(2150, 1, 1)},
        "orphan_business": {"biz_code": "ghost-biz"},
        "bad_method": {"http_method": "PUT"},
        "invalid_utf8": {"payload": b'{"name": "\xff\xfe"}'},
    }
    row.update(spoil[kind])
    return row


def _bc_tasks(rng: random.Random, plan: _BcPlan) -> Iterator[dict[str, Any]]:
    task_id = 0
    for biz in plan.bizs:
        for _ in range(plan.tasks_per_business):
            task_id += 1
            row = _good_task(rng, plan, task_id, biz)
            yield _spoil_task(row, plan.bad[task_id], plan.bizs) if task_id in plan.bad else row


def _bc_log_rows(
    rng: random.Random,
    tasks: Iterable[dict[str, Any]],
    zone: LegacyTimeZone,
    window: tuple[datetime, datetime],
    fires: int,
    counts: Counter[str],
) -> Iterator[dict[str, Any]]:
    """bc_task_exec_log rows: one per callback attempt and shard; lag = start - scheduled."""
    start, end = zone.to_wall(window[0]), zone.to_wall(window[1])
    step = (end - start) / fires
    log_id = 0
    for task in tasks:
        shards = len(json.loads(task["shard_params"])) if task["shard_params"] else task["shard_total"]
        for k in range(fires):
            scheduled = (start + step * k).replace(microsecond=0)
            for shard in range(shards):
                for attempt in range(task["max_retry"] + 1):
                    log_id += 1
                    counts[task["biz_code"]] += 1
                    row, failed = _bc_attempt(rng, task, log_id, shard, attempt, scheduled, last=k == fires - 1)
                    yield row
                    if not failed:
                        break


def _bc_attempt(
    rng: random.Random, task: dict[str, Any], log_id: int, shard: int, attempt: int, scheduled: datetime, *, last: bool
) -> tuple[dict[str, Any], bool]:
    ms = timedelta(milliseconds=1)
    started: datetime | None = scheduled + ms * rng.randint(3, 800) + timedelta(seconds=5 * attempt)
    r = rng.random()
    status: int = 1
    http: int | None = 200
    error: str | None = None
    if r < 0.07:
        status, http, error = 2, 500, "callback returned 500: upstream unavailable"
    elif r < 0.10:
        status, http, error = 3, None, f"callback timed out after {task['callback_timeout_ms']} ms"
    elif r < 0.12:
        started, status, http, error = None, 0, None, "worker pool exhausted: not dispatched"
    elif r < 0.15 and last:
        status, http = 0, None  # still running at the end of the window
    ended = started + ms * rng.randint(20, 5000) if started is not None and status != 0 else None
    row = {
        "id": log_id, "task_id": task["id"], "biz_code": task["biz_code"], "shard_index": shard,
        "attempt": attempt, "scheduled_time": scheduled, "start_time": started, "end_time": ended,
        "status": status, "http_status": http, "worker_host": f"bc-worker-{rng.randint(1, 8)}", "error_msg": error,
    }  # fmt: skip
    return row, status in (2, 3)


def seed_batchcenter(
    bind: Engine | Connection,
    *,
    businesses: int = 3,
    tasks_per_business: int = 10,
    bad_rows: int | None = None,
    malformed_crons: int = 1,
    log_window: tuple[datetime, datetime] | None = None,
    fires_per_task: int = 0,
    rng_seed: int = 0,
    base_time: datetime = BASE_TIME,
    tz: str = DEFAULT_ZONE,
    chunk_size: int = CHUNK,
) -> SeedSummary:
    """Fill an empty batch-center database. Businesses: the second has no callback base
    URL, the third no access token, the last (of 3+) is disabled. `bad_rows` defaults to
    one of every kind (`bc_bad_kinds`). With `log_window` and `fires_per_task`, good
    WAITING/RUNNING recurring tasks get exec-log rows: shards, retries, failures,
    timeouts, never-dispatched attempts."""
    zone = LegacyTimeZone(tz)
    total = businesses * tasks_per_business
    spoiled = _spoiled(
        bc_bad_kinds(sqlite=_stores_any_text(bind), businesses=businesses),
        total=total,
        bad_rows=bad_rows,
        malformed_crons=malformed_crons,
        rng_seed=rng_seed,
    )
    bizs = _bc_biz_rows(_rng(rng_seed, "businesses"), businesses)
    plan = _BcPlan(
        bizs=bizs,
        tasks_per_business=tasks_per_business,
        bad=spoiled.bad,
        malformed=spoiled.malformed,
        wall_base=zone.to_wall(base_time),
    )
    md = batch_center_metadata()
    _insert(bind, md.tables["bc_biz"], bizs, chunk_size)
    _insert(bind, md.tables["bc_task"], _bc_tasks(_rng(rng_seed, "tasks"), plan), chunk_size)
    by_business: Counter[str] = Counter()
    executions = 0
    if log_window is not None and fires_per_task > 0:
        # the same task stream again (same seed): the log needs no task list in memory
        recurring = (
            t for t in _bc_tasks(_rng(rng_seed, "tasks"), plan)
            if t["id"] not in plan.bad and t["task_type"] in (2, 3) and t["status"] in (0, 1)
        )  # fmt: skip
        rows = _bc_log_rows(_rng(rng_seed, "logs"), recurring, zone, log_window, fires_per_task, by_business)
        executions = _insert(bind, md.tables["bc_task_exec_log"], rows, chunk_size)
    biz_codes = tuple(b["biz_code"] for b in bizs)
    return spoiled.summary(SourceSystem.BATCH_CENTER, None, biz_codes, total, executions, by_business)
