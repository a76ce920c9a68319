"""What the xxl-job bridge reads of the legacy admin's rows as they are now, per call
(cached briefly): an app's live executor addresses (`xxl_job_registry`) and a job's run
fields (`xxl_job_info`), as the admin reads them at each trigger."""

from __future__ import annotations

from collections.abc import Mapping

from dbkit.connections import connect
from dbkit.engine import make_engine
from readers.timezones import LegacyTimeZone, to_epoch_ms


class XxlRegistryAddresses:
    """The live executor addresses of an xxl-job app, from the legacy `xxl_job_registry`,
    as the admin computes them (JobRegistryHelper): EXECUTOR rows of the app heard from
    within the last 90 s, sorted. `update_time` is written in the admin's JDBC zone
    (`db_tz`), so "now" is rendered there. Read at most every `refresh_s` per app."""

    DEAD_TIMEOUT_S = 90

    def __init__(self, legacy_url: str, db_tz: str = "Asia/Shanghai", refresh_s: float = 10.0) -> None:
        import threading
        from zoneinfo import ZoneInfo

        self._engine = make_engine(legacy_url)
        self._zone = ZoneInfo(db_tz)
        self._refresh_s = refresh_s
        self._cache: dict[str, tuple[float, list[str]]] = {}
        self._lock = threading.Lock()

    def __call__(self, app: str) -> list[str]:
        import time
        from datetime import datetime, timedelta

        from sqlalchemy import text

        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(app)
            if hit is not None and now - hit[0] < self._refresh_s:
                return list(hit[1])
        cutoff = (datetime.now(self._zone) - timedelta(seconds=self.DEAD_TIMEOUT_S)).replace(tzinfo=None)
        with connect(self._engine) as conn:
            rows = conn.execute(
                text(
                    "SELECT DISTINCT registry_value FROM xxl_job_registry WHERE registry_group = 'EXECUTOR' "
                    "AND registry_key = :app AND update_time > :cutoff"
                ),
                {"app": app, "cutoff": cutoff},
            ).all()
        addresses = sorted(str(r[0]) for r in rows if r[0])
        with self._lock:
            self._cache[app] = (now, addresses)
        return list(addresses)


class XxlCurrentRunFields:
    """An xxl-job job's run fields as its `xxl_job_info` row has them now, for the bridge
    (`XxlJobBridge(current_params=...)`): what the admin reads at each trigger, so an
    edit in the admin reaches the next bridged run as it reaches legacy's, not only the
    commands published after the migration applied it. Keys as in the migrated params;
    `glue_updatetime` as epoch ms (the DATETIME read in the admin's JDBC zone `db_tz`).
    None: no such row. Read at most every `refresh_s` per job (a broadcast's items)."""

    _SQL = (
        "SELECT executor_handler, executor_param, executor_block_strategy, executor_timeout, "
        "executor_route_strategy, glue_type, glue_source, glue_updatetime FROM xxl_job_info WHERE id = :id"
    )

    def __init__(self, legacy_url: str, db_tz: str = "Asia/Shanghai", refresh_s: float = 1.0) -> None:
        import threading

        self._engine = make_engine(legacy_url)
        self._zone = LegacyTimeZone(db_tz)
        self._refresh_s = refresh_s
        self._cache: dict[int, tuple[float, dict[str, object] | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, job_id: int) -> dict[str, object] | None:
        import time

        from sqlalchemy import text

        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(job_id)
            if hit is not None and now - hit[0] < self._refresh_s:
                return None if hit[1] is None else dict(hit[1])
        with connect(self._engine) as conn:
            row = conn.execute(text(self._SQL), {"id": int(job_id)}).mappings().first()
        fields = None if row is None else self._fields(dict(row))
        with self._lock:
            self._cache[job_id] = (now, fields)
        return None if fields is None else dict(fields)

    def _fields(self, row: Mapping[str, object]) -> dict[str, object]:
        def txt(v: object) -> str | None:
            return (
                v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else (None if v is None else str(v))
            )

        glue_type = (txt(row["glue_type"]) or "BEAN").upper()
        out: dict[str, object] = {"glue_type": glue_type, "executor_param": txt(row["executor_param"]) or ""}
        for key, col in (
            ("executor_handler", "executor_handler"),
            ("block_strategy", "executor_block_strategy"),
            ("route_strategy", "executor_route_strategy"),
        ):
            if txt(row[col]):
                out[key] = txt(row[col])
        try:
            out["executor_timeout"] = max(int(row["executor_timeout"]), 0)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            pass
        if glue_type != "BEAN":
            out["glue_source"] = txt(row["glue_source"]) or ""
            if row["glue_updatetime"] is not None:
                out["glue_updatetime"] = to_epoch_ms(self._zone.to_utc(row["glue_updatetime"]))  # type: ignore[arg-type]
        return out

    def close(self) -> None:
        self._engine.dispose()


__all__ = ["XxlCurrentRunFields", "XxlRegistryAddresses"]
