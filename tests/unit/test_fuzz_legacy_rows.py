"""Property-based fuzzing of legacy rows for BOTH legacy systems, through the real readers
and the migrator, on SQLite.

Each example generates a batch of `xxl_job_info` rows (xxl-job 3.4 lineage) and a batch
of `bc_task` rows (batch center), inserts them with the readers' own Core tables
(`readers.legacy_ddl.tables`), and runs `Migrator.run` over each database. The generator
decides by itself, for every row, whether it built the row valid ("good") or spoiled it
in exactly one way ("bad", with the fields that may be named for it). The properties:

- nothing crashes (the reader and the migrator run to the end);
- every bad row is quarantined: a ledger row with status `quarantined`, a non-empty
  field (one of those the generator expects for its defect) and a non-empty reason, and
  no job in the target;
- every good row migrates: a ledger row with status `migrated` and its job in the
  target, whose params carry the legacy param/payload unchanged.

The defects: malformed / empty / oversize cron, unknown enum values, NULLs where a value
is required, invalid JSON, oversize params, bytes that are not UTF-8, non-integers in
integer columns, times before 1970 and after 2100, orphan references, out-of-range
numbers. Duplicate keys appear as data that must survive: JSON payloads with repeated
keys, two executor groups with the same app_name, the same task_key in two businesses.

At least 10,000 rows per run in total (asserted), 2 x ROWS_PER_SYSTEM per example.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from migrator.tables import migrator_tables
from readers.legacy_ddl.tables import batch_center_metadata, xxljob_metadata
from scheduler_core.executor.xxl_routes import STRATEGIES
from scheduler_core.model import JobCode
from tests.migration_env import MigrationEnv, make_env

ROWS_PER_SYSTEM = 200
EXAMPLES = 26  # 26 x 2 x 200 = 10,400 rows
MIN_TOTAL_ROWS = 10_000
UTC = timezone.utc

# -- the generator's own notion of validity ------------------------------------------------

GOOD_CRONS = (
    "0 0/5 * * * ?", "0 0 2 * * ?", "0 30 9 ? * MON-FRI", "0 0 0 L * ?", "0 0 12 15W * ?",
    "0 0 10 ? * 6#3", "*/30 * * * * ?", "0 0 8,20 * * ?", "0 15 10 ? * * 2030", "0 0 0 1 1 ? 2020",
)  # fmt: skip
MALFORMED_CRONS = (
    "0 61 * * * ?",
    "not a cron",
    "0 0 0 * * *",
    "0 0 25 * * ?",
    "* * * * *",
    "0 0 0 ? * MON#6",
    "0 0 0 32 * ?",
    "60 * * * * ?",
    "0 0/60 * * * ?",
    "0 0 0 ? JAN-FOO MON",
    "0 0 12 ? * FOO",
    "0 0 0 ? * * 2030-2020",
    "'; DROP TABLE dus_job; --",
)  # fmt: skip  (each rejected by Quartz itself: "0 0/0" and year 1969 parse there, see docs/cron.md)
ROUTES = STRATEGIES  # every xxl-job route strategy the bridge knows
HOSTILE = (
    "'",
    '"',
    "';--",
    "/* x */",
    "; DROP TABLE dus_job; --",
    "\\",
    "%s %(x)s",
    "\u202egnp.exe",
    "日本語",
    "😀",
    "\t\r\n",
    "<script>alert(1)</script>",
    "${jndi:ldap://x}",
    "",
)
LIMIT = 64 * 1024  # the documented param/payload limit


def _good_wall(rng: random.Random) -> datetime:
    """A wall-clock time well inside 1970..2100 (the legacy zone is Asia/Shanghai), with
    room for an end time up to 999 days later."""
    return datetime(2000, 1, 1) + timedelta(seconds=rng.randint(0, 95 * 365 * 86400))


def _good_ms(rng: random.Random) -> int:
    return int(
        (datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 99 * 365 * 86400))).timestamp() * 1000
    )


def _early_wall(rng: random.Random) -> datetime:
    # year 1 at midnight is below datetime's range once shifted to UTC (+08:05 LMT)
    return rng.choice(
        (
            datetime(1969, 12, 31, 23, 0),
            datetime(1900, 1, 1),
            datetime(1, 1, 1),
            datetime(1969, 1, 1) - timedelta(days=rng.randint(0, 20000)),
        )
    )


def _late_wall(rng: random.Random) -> datetime:
    return rng.choice(
        (
            datetime(2100, 6, 1),
            datetime(2150, 1, 1),
            datetime(9999, 12, 31, 23, 59, 59),
            datetime(2101, 1, 2) + timedelta(days=rng.randint(0, 100000)),
        )
    )


def _text(rng: random.Random, pool: list[str], n: int = 3) -> str:
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, n)))


def _bad_utf8(rng: random.Random, prefix: str = "") -> bytes:
    return prefix.encode() + rng.choice(
        (b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"ok\x80")
    )


@dataclass
class Row:
    key: str
    kind: str
    values: dict[str, Any]
    good: bool
    fields: frozenset[str] = frozenset()  # for a bad row: the field(s) its quarantine may name
    param: str | None = None  # for a good row: the legacy param/payload the job must carry


# -- xxl-job --------------------------------------------------------------------------------

XXL_GROUPS = (
    {
        "id": 1,
        "app_name": "app-a-executor",
        "title": "app a",
        "address_type": 0,
        "address_list": "http://10.0.0.1:9999/,http://10.0.0.2:9999/",
    },
    {"id": 2, "app_name": "app-b-executor", "title": "app b", "address_type": 1, "address_list": ""},
    # a duplicate app_name (allowed before the master lineage): its jobs belong to app-a
    {"id": 3, "app_name": "app-a-executor", "title": "app a dup", "address_type": 0, "address_list": None},
)
XXL_APP = {1: "app-a-executor", 2: "app-b-executor", 3: "app-a-executor"}


def _xxl_base(rng: random.Random, job_id: int, pool: list[str]) -> dict[str, Any]:
    running = rng.random() < 0.7
    return {
        "id": job_id, "job_group": rng.choice((1, 2)), "job_desc": f"job {job_id} {_text(rng, pool)}",
        "add_time": _good_wall(rng), "update_time": _good_wall(rng), "author": "ops", "alarm_email": "",
        "schedule_type": "CRON", "schedule_conf": rng.choice(GOOD_CRONS),
        "misfire_strategy": rng.choice(("DO_NOTHING", "FIRE_ONCE_NOW")),
        "executor_route_strategy": rng.choice(ROUTES), "executor_handler": f"handler{job_id % 7}",
        "executor_param": rng.choice(("", json.dumps({"batch": rng.randint(1, 500)}), _text(rng, pool, 6))),
        "executor_block_strategy": rng.choice(("SERIAL_EXECUTION", "DISCARD_LATER", "COVER_EARLY")),
        "executor_timeout": rng.choice((0, 30, 600)), "executor_fail_retry_count": rng.randint(0, 5),
        "glue_type": "BEAN", "glue_source": "", "glue_remark": "", "glue_updatetime": _good_wall(rng),
        "child_jobid": "", "trigger_status": 1 if running else 0, "trigger_last_time": 0,
        "trigger_next_time": _good_ms(rng) if running and rng.random() < 0.8 else 0,
    }  # fmt: skip


def _xxl_good(kind: str, v: dict[str, Any], rng: random.Random, pool: list[str]) -> None:
    if kind == "good_rate":
        v.update(schedule_type="FIX_RATE", schedule_conf=str(rng.randint(1, 86400)))
    elif kind == "good_text":
        v.update(
            job_desc=_text(rng, pool, 8) or "x",
            executor_param=_text(rng, pool, 12),
            executor_handler="h" + _text(rng, pool, 2),
            author=_text(rng, pool),
        )
    elif kind == "good_nulls":
        v.update(
            executor_param=None,
            author=None,
            alarm_email=None,
            glue_source=None,
            glue_remark=None,
            child_jobid=None,
            executor_block_strategy=None,
            add_time=None,
            update_time=None,
        )
    elif kind == "good_dup_json_keys":
        v.update(executor_param='{"a": 1, "a": 2, "a": "three"}')
    elif kind == "good_dup_app_name":
        v.update(job_group=3)
    elif kind == "good_big_param":
        v.update(executor_param="p" * rng.randint(4000, 8000))
    elif kind == "good_none":  # a NONE job (run only as a child job or by hand): a trigger with no schedule
        v.update(schedule_type="NONE", schedule_conf=None, trigger_status=0, trigger_next_time=0)
    elif kind == "good_unused_old_times":  # columns the migration does not use
        v.update(add_time=datetime(1950, 1, 1), update_time=datetime(2200, 1, 1), trigger_last_time=-5)


XXL_BAD: dict[str, tuple[frozenset[str], Callable[[dict[str, Any], random.Random], None]]] = {
    "bad_cron_malformed": (frozenset({"cron"}), lambda v, r: v.update(schedule_conf=r.choice(MALFORMED_CRONS))),
    "bad_cron_empty": (frozenset({"schedule_conf"}), lambda v, r: v.update(schedule_conf=r.choice(("", "   ", None)))),
    "bad_cron_oversize": (
        frozenset({"schedule_conf"}),
        lambda v, r: v.update(schedule_conf="0 0 0 ? * " + "MON," * 40 + "TUE"),
    ),
    "bad_schedule_type": (
        frozenset({"schedule_type"}),
        lambda v, r: v.update(schedule_type=r.choice(("FIX_DELAY", "cron", "", "CRON ", "ＣＲＯＮ"))),
    ),
    "bad_misfire": (
        frozenset({"misfire_strategy"}),
        lambda v, r: v.update(misfire_strategy=r.choice(("RUN_TWICE", "do_nothing", ""))),
    ),
    "bad_route": (
        frozenset({"executor_route_strategy"}),
        lambda v, r: v.update(executor_route_strategy=r.choice(("WEIGHTED_ROUND", None, "first"))),
    ),
    "bad_handler": (
        frozenset({"executor_handler"}),
        lambda v, r: v.update(executor_handler=r.choice((None, "", "  "))),
    ),
    "bad_glue_unknown": (frozenset({"glue_type"}), lambda v, r: v.update(glue_type=r.choice(("GLUE_RUBY", "bean")))),
    "bad_glue_unbridged": (
        frozenset({"glue_type"}),
        lambda v, r: v.update(glue_type="GLUE_SHELL", glue_source="echo 1", executor_handler=""),
    ),
    "bad_rate": (
        frozenset({"schedule_conf"}),
        lambda v, r: v.update(
            schedule_type="FIX_RATE", schedule_conf=r.choice(("0", "-5", "abc", "1.5", " 30", "99999999999", None))
        ),
    ),
    "bad_param_oversize": (
        frozenset({"executor_param"}),
        lambda v, r: v.update(executor_param="x" * (LIMIT + 1 + r.randint(0, 5000))),
    ),
    "bad_utf8_param": (frozenset({"executor_param"}), lambda v, r: v.update(executor_param=_bad_utf8(r, '{"k": "'))),
    "bad_utf8_desc": (frozenset({"job_desc"}), lambda v, r: v.update(job_desc=_bad_utf8(r, "name "))),
    "bad_utf8_handler": (frozenset({"executor_handler"}), lambda v, r: v.update(executor_handler=_bad_utf8(r, "h"))),
    "bad_utf8_author": (frozenset({"author"}), lambda v, r: v.update(author=_bad_utf8(r))),
    "bad_next_before_1970": (
        frozenset({"trigger_next_time"}),
        lambda v, r: v.update(trigger_status=1, trigger_next_time=-r.randint(1, 10**12)),
    ),
    "bad_next_after_2100": (
        frozenset({"trigger_next_time", "next_fire_at"}),
        lambda v, r: v.update(
            trigger_status=1,
            trigger_next_time=r.choice((4_118_000_000_000, 4_200_000_000_000, 9_999_999_999_999, 10**17)),
        ),
    ),
    "bad_orphan_group": (frozenset({"job_group"}), lambda v, r: v.update(job_group=r.choice((0, 99, 2**31 - 1)))),
    "bad_status": (frozenset({"trigger_status"}), lambda v, r: v.update(trigger_status=r.choice((2, -1, "yes")))),
    "bad_timeout": (
        frozenset({"executor_timeout"}),
        lambda v, r: v.update(executor_timeout=r.choice((-1, "abc", "1.5"))),
    ),
    "bad_retry_negative": (
        frozenset({"executor_fail_retry_count"}),
        lambda v, r: v.update(executor_fail_retry_count=-1),
    ),
    "bad_retry_huge": (
        frozenset({"max_retry"}),
        lambda v, r: v.update(executor_fail_retry_count=r.randint(101, 10**6)),
    ),
}
XXL_GOOD = (
    "good",
    "good",
    "good",
    "good_rate",
    "good_text",
    "good_nulls",
    "good_dup_json_keys",
    "good_dup_app_name",
    "good_big_param",
    "good_unused_old_times",
    "good_none",
)
XXL_KINDS = XXL_GOOD + tuple(XXL_BAD)


def xxl_rows(kinds: list[str], rng: random.Random, pool: list[str]) -> list[Row]:
    out = []
    for i, kind in enumerate(kinds, start=1):
        v = _xxl_base(rng, i, pool)
        if kind in XXL_BAD:
            # a bad row is a plain good CRON BEAN row spoiled in exactly one way
            v.update(
                schedule_type="CRON",
                schedule_conf="0 0 3 * * ?",
                glue_type="BEAN",
                executor_handler="fixHandler",
                executor_route_strategy="FIRST",
                executor_param="",
                trigger_next_time=0,
            )
            fields, spoil = XXL_BAD[kind]
            spoil(v, rng)
            out.append(Row(str(i), kind, v, False, fields))
        else:
            _xxl_good(kind, v, rng, pool)
            out.append(Row(str(i), kind, v, True, param=v["executor_param"] or ""))
    return out


# -- batch center ---------------------------------------------------------------------------

BC_BIZ = (
    {
        "biz_code": "biz-a",
        "biz_name": "A",
        "callback_base_url": "http://a.svc.local:8080/bc",
        "access_token": "tok-a",
        "enabled": 1,
    },
    {"biz_code": "biz-b", "biz_name": "B (no base URL)", "callback_base_url": None, "access_token": None, "enabled": 1},
    {
        "biz_code": "biz-c",
        "biz_name": "C",
        "callback_base_url": "https://c.svc.local/",
        "access_token": "tok-c",
        "enabled": 0,
    },
)


def _bc_base(rng: random.Random, task_id: int, pool: list[str]) -> dict[str, Any]:
    biz = rng.choice(BC_BIZ)
    fire = _good_wall(rng)
    relative = biz["callback_base_url"] is not None and rng.random() < 0.5
    return {
        "id": task_id, "biz_code": biz["biz_code"], "task_key": f"task-{task_id}", "task_name": f"task {task_id}",
        "task_type": 2, "cron_expr": rng.choice(GOOD_CRONS), "interval_sec": None, "fire_time": fire,
        "end_time": fire + timedelta(days=rng.randint(1, 999)) if rng.random() < 0.3 else None,
        "callback_url": f"/cb/{task_id}" if relative else f"http://{biz['biz_code']}.svc.local/cb/{task_id}",
        "http_method": rng.choice(("POST", "GET", "post", " get ")), "callback_timeout_ms": rng.randint(1, 120000),
        "payload": rng.choice((None, "{}", json.dumps({"audience": rng.randint(1, 9999), "page": 300}))),
        "shard_total": rng.randint(1, 8), "shard_params": None, "priority": rng.randint(1, 9),
        "max_retry": rng.randint(0, 5), "misfire_policy": rng.choice((1, 2)), "status": rng.choice((0, 0, 0, 1, 2, 3, 4, 5)),
        "migrated": rng.choice((0, 1)), "version": rng.randint(0, 1000),
        "create_time": _good_wall(rng), "update_time": _good_wall(rng),
    }  # fmt: skip


def _bc_good(kind: str, v: dict[str, Any], rng: random.Random, pool: list[str], shared: set[str]) -> None:
    if kind == "good_delay":
        v.update(task_type=1, cron_expr=rng.choice((None, "garbage is ignored for a delay task")))
    elif kind == "good_rate":
        v.update(task_type=3, cron_expr=None, interval_sec=rng.randint(1, 86400))
    elif kind == "good_shard_params":
        v.update(
            shard_params=json.dumps(
                [{"page": p, "s": _text(rng, pool)} for p in range(rng.randint(1, 20))], ensure_ascii=False
            )
        )
    elif kind == "good_text":
        v.update(
            task_name=_text(rng, pool, 8),
            payload=json.dumps({"q": _text(rng, pool, 10)}, ensure_ascii=False),
            task_key=f"k{v['id']}{_text(rng, pool, 3)}"[:128],
        )
    elif kind == "good_dup_json_keys":
        v.update(payload='{"a": 1, "a": 2, "b": {"c": 1, "c": 2}}')
    elif kind == "good_dup_task_key":
        # the same task_key in another business is allowed (the key is per business)
        free = [b for b in BC_BIZ if b["biz_code"] not in shared]
        if free:
            biz = free[0]
            shared.add(str(biz["biz_code"]))
            v.update(
                biz_code=biz["biz_code"],
                task_key="shared-key",
                callback_url=f"http://{biz['biz_code']}.svc.local/cb/{v['id']}",
            )
    elif kind == "good_nulls":
        v.update(payload=None, end_time=None, shard_params=None, interval_sec=None)
    elif kind == "good_big_payload":
        v.update(payload=json.dumps({"blob": "p" * rng.randint(4000, 8000)}))


def _bc_set_biz(v: dict[str, Any], code: str) -> None:
    v.update(biz_code=code, callback_url=f"http://{code}.svc.local/cb/{v['id']}")


BC_BAD: dict[str, tuple[frozenset[str], Callable[[dict[str, Any], random.Random], None]]] = {
    "bad_cron_malformed": (frozenset({"cron"}), lambda v, r: v.update(cron_expr=r.choice(MALFORMED_CRONS))),
    "bad_cron_empty": (frozenset({"cron_expr"}), lambda v, r: v.update(cron_expr=r.choice((None, "", "  ")))),
    "bad_cron_oversize": (
        frozenset({"cron_expr"}),
        lambda v, r: v.update(cron_expr="0 0 0 ? * " + "MON," * 40 + "TUE"),
    ),
    "bad_task_type": (frozenset({"task_type"}), lambda v, r: v.update(task_type=r.choice((0, 4, 99, -1, "cron")))),
    "bad_status": (frozenset({"status"}), lambda v, r: v.update(status=r.choice((6, 99, -3, "done")))),
    "bad_misfire": (frozenset({"misfire_policy"}), lambda v, r: v.update(misfire_policy=r.choice((0, 3, 42)))),
    "bad_method": (frozenset({"http_method"}), lambda v, r: v.update(http_method=r.choice(("PUT", "", "DELETE")))),
    "bad_interval": (
        frozenset({"interval_sec"}),
        lambda v, r: v.update(task_type=3, cron_expr=None, interval_sec=r.choice((None, 0, -5, "x"))),
    ),
    "bad_payload_json": (
        frozenset({"payload"}),
        lambda v, r: v.update(payload=r.choice(('{"audience": ', "{'a': 1}", "nul", "{,}", "\x00"))),
    ),
    "bad_payload_not_object": (
        frozenset({"payload"}),
        lambda v, r: v.update(payload=r.choice(("[1, 2]", '"s"', "3", "null"))),
    ),
    "bad_payload_oversize": (
        frozenset({"payload"}),
        lambda v, r: v.update(payload=json.dumps({"x": "a" * (LIMIT + r.randint(1, 5000))})),
    ),
    "bad_shard_params": (
        frozenset({"shard_params"}),
        lambda v, r: v.update(shard_params=r.choice(("[1, 2", '{"page": 1}', "[]", '"x"'))),
    ),
    "bad_utf8_payload": (frozenset({"payload"}), lambda v, r: v.update(payload=_bad_utf8(r, '{"name": "'))),
    "bad_utf8_name": (frozenset({"task_name"}), lambda v, r: v.update(task_name=_bad_utf8(r, "n"))),
    "bad_utf8_url": (frozenset({"callback_url"}), lambda v, r: v.update(callback_url=_bad_utf8(r, "http://x/"))),
    "bad_utf8_key": (frozenset({"task_key"}), lambda v, r: v.update(task_key=_bad_utf8(r, f"k{v['id']}"))),
    "bad_orphan_biz": (frozenset({"biz_code"}), lambda v, r: _bc_set_biz(v, r.choice(("ghost-biz", "BIZ-A", "")))),
    "bad_fire_before_1970": (frozenset({"fire_time"}), lambda v, r: v.update(fire_time=_early_wall(r))),
    "bad_fire_after_2100": (frozenset({"fire_time", "next_fire_at"}), lambda v, r: v.update(fire_time=_late_wall(r))),
    "bad_end_before_1970": (frozenset({"end_time"}), lambda v, r: v.update(end_time=_early_wall(r))),
    "bad_end_after_2100": (frozenset({"end_time", "end_at"}), lambda v, r: v.update(end_time=_late_wall(r))),
    "bad_priority": (frozenset({"priority"}), lambda v, r: v.update(priority=r.choice((0, 10, -1, "high")))),
    "bad_retry": (frozenset({"max_retry"}), lambda v, r: v.update(max_retry=r.choice((-1, 101, 10**6)))),
    "bad_shard_total": (frozenset({"shard_total"}), lambda v, r: v.update(shard_total=r.choice((0, -2, 100_001)))),
    "bad_timeout_ms": (
        frozenset({"callback_timeout_ms"}),
        lambda v, r: v.update(callback_timeout_ms=r.choice((0, -1))),
    ),
    "bad_url": (
        frozenset({"callback_url"}),
        lambda v, r: v.update(callback_url=r.choice(("ftp://x/y", "javascript:alert(1)", "", "http://"))),
    ),
    "bad_relative_no_base": (
        frozenset({"callback_url"}),
        lambda v, r: v.update(biz_code="biz-b", callback_url="/relative/cb"),
    ),
    "bad_migrated_flag": (frozenset({"migrated"}), lambda v, r: v.update(migrated=2)),
}
BC_GOOD = (
    "good",
    "good",
    "good",
    "good_delay",
    "good_rate",
    "good_shard_params",
    "good_text",
    "good_dup_json_keys",
    "good_dup_task_key",
    "good_nulls",
    "good_big_payload",
)
BC_KINDS = BC_GOOD + tuple(BC_BAD)


def bc_rows(kinds: list[str], rng: random.Random, pool: list[str]) -> list[Row]:
    out = []
    shared: set[str] = set()
    for i, kind in enumerate(kinds, start=1):
        v = _bc_base(rng, i, pool)
        if kind in BC_BAD:
            # a bad row is a plain good WAITING CRON row spoiled in exactly one way
            _bc_set_biz(v, "biz-a")
            v.update(
                task_type=2,
                cron_expr="0 0 3 * * ?",
                interval_sec=None,
                payload="{}",
                shard_params=None,
                shard_total=1,
                priority=5,
                max_retry=0,
                misfire_policy=1,
                status=0,
                migrated=0,
                http_method="POST",
                end_time=None,
                callback_timeout_ms=30000,
            )
            fields, spoil = BC_BAD[kind]
            spoil(v, rng)
            out.append(Row(str(i), kind, v, False, fields))
        else:
            _bc_good(kind, v, rng, pool, shared)
            out.append(Row(str(i), kind, v, True, param=v["payload"] or ""))
    return out


# -- running one batch ----------------------------------------------------------------------


def _insert(env: MigrationEnv, table: Any, rows: list[dict[str, Any]]) -> None:
    with env.legacy.begin() as conn:
        for r in rows:  # one by one: a row the legacy database refuses must show as that row
            conn.execute(table.insert(), [r])


def _outcome(env: MigrationEnv, source: str) -> dict[str, dict[str, Any]]:
    lg = migrator_tables().ledger
    with env.store.engine.connect() as conn:
        return {
            r["source_key"]: dict(r) for r in conn.execute(select(lg).where(lg.c.source_system == source)).mappings()
        }


def _check(env: MigrationEnv, source: str, rows: list[Row], param_key: str) -> list[str]:
    ledger = _outcome(env, source)
    jobs = {
        j.job_code: j
        for j in (env.store.get_job(e["target_job_code"]) for e in ledger.values() if e["target_job_code"])
        if j is not None
    }
    problems: list[str] = []
    for row in rows:
        entry = ledger.get(row.key)
        if entry is None:
            problems.append(f"{source} row {row.key} ({row.kind}): no ledger row at all")
            continue
        if row.good:
            job = jobs.get(JobCode(entry["target_job_code"] or ""))
            if entry["status"] != "migrated" or job is None:
                problems.append(
                    f"{source} good row {row.key} ({row.kind}) not migrated: status={entry['status']} "
                    f"field={entry['field']!r} reason={entry['reason']!r}"
                )
                continue
            carried = json.loads(job.params).get(param_key)
            if carried != row.param:
                problems.append(
                    f"{source} good row {row.key} ({row.kind}): {param_key} changed in migration: "
                    f"{row.param!r:.80} -> {carried!r:.80}"
                )
        else:
            if entry["status"] != "quarantined":
                problems.append(f"{source} bad row {row.key} ({row.kind}) not quarantined: status={entry['status']}")
            elif not entry["field"] or not entry["reason"]:
                problems.append(f"{source} bad row {row.key} ({row.kind}) quarantined without field/reason: {entry}")
            elif entry["field"] not in row.fields:
                problems.append(
                    f"{source} bad row {row.key} ({row.kind}) quarantined for field {entry['field']!r} "
                    f"({entry['reason']}), expected one of {sorted(row.fields)}"
                )
            if entry["target_job_code"] and env.store.get_job(entry["target_job_code"]) is not None:
                problems.append(f"{source} bad row {row.key} ({row.kind}) has a target job")
    extra = set(ledger) - {r.key for r in rows}
    if extra:
        problems.append(f"{source}: ledger rows for keys never generated: {sorted(extra)[:5]}")
    return problems


def run_batch(tmp: Path, xxl: list[Row], bc: list[Row]) -> list[str]:
    problems: list[str] = []
    x = make_env(f"sqlite:///{tmp / 'xxl.db'}", f"sqlite:///{tmp / 'xxl-target.db'}", "xxl-job", "3.4")
    b = make_env(f"sqlite:///{tmp / 'bc.db'}", f"sqlite:///{tmp / 'bc-target.db'}", "batch-center")
    try:
        xmd, bmd = xxljob_metadata("3.4"), batch_center_metadata()
        with x.legacy.begin() as conn:
            conn.execute(xmd.tables["xxl_job_group"].insert(), list(XXL_GROUPS))
        _insert(x, xmd.tables["xxl_job_info"], [r.values for r in xxl])
        with b.legacy.begin() as conn:
            conn.execute(bmd.tables["bc_biz"].insert(), list(BC_BIZ))
        _insert(b, bmd.tables["bc_task"], [r.values for r in bc])
        # the property "no crash": any exception here fails the example with its traceback
        xs = x.migrator.run()
        bs = b.migrator.run()
        problems += _check(x, "xxl-job", xxl, "executor_param")
        problems += _check(b, "batch-center", bc, "payload")
        for summary, rows in ((xs, xxl), (bs, bc)):
            want = (sum(r.good for r in rows), sum(not r.good for r in rows))
            got = (summary.counts["create"], summary.counts["quarantine"])
            if got != want:
                problems.append(f"summary counts (create, quarantine) {got} != generated (good, bad) {want}")
    finally:
        for env in (x, b):
            env.legacy.dispose()
            env.store.engine.dispose()
    return problems


# -- the property -----------------------------------------------------------------------------

texts = st.lists(st.text(max_size=24), min_size=1, max_size=6)


def test_fuzzed_legacy_rows_of_both_systems_never_crash_and_are_sorted_exactly() -> None:
    rows_seen: list[int] = []

    # no shrink phase: a batch of 400 rows shrinks for minutes; the failure message names
    # every offending row (key, kind, field, reason) and the seed instead
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(
        xxl_kinds=st.lists(st.sampled_from(XXL_KINDS), min_size=ROWS_PER_SYSTEM, max_size=ROWS_PER_SYSTEM),
        bc_kinds=st.lists(st.sampled_from(BC_KINDS), min_size=ROWS_PER_SYSTEM, max_size=ROWS_PER_SYSTEM),
        seed=st.integers(0, 2**32 - 1),
        drawn=texts,
    )
    def prop(xxl_kinds: list[str], bc_kinds: list[str], seed: int, drawn: list[str]) -> None:
        rng = random.Random(seed)
        pool = list(HOSTILE) + drawn
        xxl, bc = xxl_rows(xxl_kinds, rng, pool), bc_rows(bc_kinds, rng, pool)
        with tempfile.TemporaryDirectory(prefix="sy-fuzz-") as tmp:
            problems = run_batch(Path(tmp), xxl, bc)
        rows_seen.append(len(xxl) + len(bc))
        assert not problems, f"{len(problems)} problem(s), seed {seed}:\n" + "\n".join(problems[:25])

    prop()
    assert sum(rows_seen) >= MIN_TOTAL_ROWS, f"only {sum(rows_seen)} rows generated"
    print(f"fuzzed {sum(rows_seen)} legacy rows in {len(rows_seen)} batches")
