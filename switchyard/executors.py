"""The executor registry as an operator reads it (`switchyard executors`, the console's
/executors): the executor processes' heartbeats from the store
(scheduler_core.store.executors) and, beside them, the executors the legacy xxl-job
admin has registered (its `xxl_job_registry`), each judged by its own rule: ours lost
after 3 missed heartbeats, xxl-job's dead 90 s after its last registration, both on
their database's clock.

Rows are plain dicts, the same for the text table, `--json` and the console's API.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.engine import Engine

from dbkit.engine import make_engine
from readers.records import RegisteredExecutor
from scheduler_core.store.executors import ExecutorEntry, SqlExecutorRegistry

NATIVE = "switchyard"
LEGACY = "xxl-job"
XXL_REGISTRY_TABLE = "xxl_job_registry"
XXL_BEAT_S = 30.0  # an xxl-job executor registers every 30 s (RegistryConfig.BEAT_TIMEOUT)
STATE_ORDER = {"live": 0, "lost": 1, "stopped": 2}


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat(timespec="milliseconds")


def native_row(e: ExecutorEntry) -> dict[str, Any]:
    return {
        "source": NATIVE,
        "legacy": False,
        "instance_id": e.instance_id,
        "name": e.name,
        "businesses": list(e.biz_codes),
        "host": e.host,
        "pid": e.pid,
        "version": e.version,
        "concurrency": e.concurrency,
        "in_flight": e.in_flight,
        "heartbeat_interval_s": e.interval.total_seconds(),
        "started_at": _iso(e.started_at),
        "last_seen_at": _iso(e.last_seen_at),
        "stopped_at": _iso(e.stopped_at),
        "age_s": round(e.age.total_seconds(), 1),
        "state": e.state.value,
    }


def legacy_row(r: RegisteredExecutor) -> dict[str, Any]:
    """An xxl-job registration: its address stands where our host is; what the admin's
    registry does not know (pid, version, concurrency, runs in flight) is None."""
    return {
        "source": LEGACY,
        "legacy": True,
        "instance_id": None,
        "name": r.address,
        "businesses": [r.app],
        "host": r.address,
        "pid": None,
        "version": None,
        "concurrency": None,
        "in_flight": None,
        "heartbeat_interval_s": XXL_BEAT_S,
        "started_at": None,
        "last_seen_at": _iso(r.updated_at),
        "stopped_at": None,
        "age_s": None if r.age is None else round(r.age.total_seconds(), 1),
        "state": "live" if r.alive else "lost",
    }


def native_executors(
    registry: SqlExecutorRegistry, *, biz_code: str | None, include_stopped: bool
) -> list[dict[str, Any]]:
    entries = registry.entries(biz_code=biz_code, include_stopped=include_stopped)
    return [native_row(e) for e in entries]


def is_xxl_admin_database(engine: Engine) -> bool:
    return XXL_REGISTRY_TABLE in set(inspect(engine).get_table_names())


def legacy_executors(url: str, *, biz_code: str | None, db_tz: str) -> list[dict[str, Any]]:
    """The registrations of the xxl-job admin database at `url` (its DATETIMEs written in
    `db_tz`, the admin's JDBC zone), of `biz_code`'s app only if given."""
    from readers.xxljob.reader import XxlJobReader

    engine = make_engine(url, pool_size=1, must_exist=True)
    try:
        found = XxlJobReader(engine, db_tz=db_tz).registered_executors()
    finally:
        engine.dispose()
    return [legacy_row(r) for r in found if biz_code is None or r.app == biz_code]


def xxl_admin_urls(urls: Sequence[str]) -> list[str]:
    """The URLs among `urls` that hold an xxl-job admin's registry (the console is given
    every legacy database, the batch center's too)."""
    out: list[str] = []
    for url in urls:
        engine = make_engine(url, pool_size=1, must_exist=True)
        try:
            if is_xxl_admin_database(engine):
                out.append(url)
        finally:
            engine.dispose()
    return out


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours first, then the legacy ones; live before lost before stopped; then by business
    and host."""
    return sorted(
        rows,
        key=lambda r: (r["legacy"], STATE_ORDER.get(r["state"], 9), r["businesses"], r["host"], r["pid"] or 0),
    )


def format_age(age_s: float | None) -> str:
    if age_s is None:
        return "-"
    if age_s < 120:
        return f"{age_s:.0f}s ago"
    if age_s < 7200:
        return f"{age_s / 60:.0f}m ago"
    if age_s < 172800:
        return f"{age_s / 3600:.0f}h ago"
    return f"{age_s / 86400:.0f}d ago"


def dash(value: object) -> str:
    return "-" if value is None else str(value)
