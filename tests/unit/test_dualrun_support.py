"""Scenario builder for the dual-run and report tests (plus tests of the builder itself).

A scenario is a business with legacy definitions, the legacy log they left (the truth is
known: we write it), the new side's fired records in an SQLite store, and the ledger
rows that link legacy keys to new job codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from dualrun.collect import CompareRequest, compare_business
from dualrun.model import Comparison, Window
from dualrun.settings import CompareSettings
from dualrun.testing import BatchRecordReader, LogWriter, RecordReader, cron_definition, fired, occurrences
from migrator.tables import migrator_tables
from readers.records import LegacyDefinition, SourceSystem
from scheduler_core.clock import ManualClock
from scheduler_core.model import FiredRecord
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from switchyard.wiring import dualrun_store

UTC = timezone.utc
NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
PREFIX = {SourceSystem.XXL_JOB: "xxl", SourceSystem.BATCH_CENTER: "bc"}


def open_test_store(path: Path, clock: ManualClock) -> SqlTriggerStore:
    engine = make_engine(f"sqlite:///{path}")
    init_schema(engine, 4)
    return SqlTriggerStore(engine, clock)


@dataclass
class Scenario:
    """Both sides of one business. The compared window is the hour before `now`; the A/A
    baseline window is the hour before that."""

    store: SqlTriggerStore
    biz_code: str = "reminder"
    source: SourceSystem = SourceSystem.XXL_JOB
    now: datetime = NOW
    window: timedelta = timedelta(hours=1)
    defs: list[LegacyDefinition] = field(default_factory=list)
    records: list[FiredRecord] = field(default_factory=list)
    log: LogWriter = field(init=False)
    _trigger_ids: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.log = LogWriter(self.source)

    @classmethod
    def create(cls, tmp_path: Path, **kw: object) -> Scenario:
        now = kw.get("now", NOW)
        assert isinstance(now, datetime)
        return cls(store=open_test_store(tmp_path / "store.db", ManualClock(now)), **kw)  # type: ignore[arg-type]

    @property
    def current(self) -> Window:
        return Window(start=self.now - self.window, end=self.now)

    @property
    def earlier(self) -> Window:
        return self.current.shifted(self.window)

    def code(self, d: LegacyDefinition) -> str:
        return f"{PREFIX[self.source]}:{self.biz_code}:{d.source_key}"

    def job(self, key: str, cron: str, **kw: Any) -> LegacyDefinition:
        d = cron_definition(key, self.biz_code, cron, source=self.source, **kw)
        self.defs.append(d)
        self._trigger_ids[key] = len(self._trigger_ids) + 1
        t = migrator_tables().ledger
        with self.store.engine.begin() as conn:
            conn.execute(
                insert(t).values(
                    source_system=self.source.value,
                    source_key=key,
                    business=self.biz_code,
                    status="migrated",
                    content_hash="h",
                    target_job_code=self.code(d),
                    updated_at=0,
                )
            )
        return d

    def business_row(self, state: str = "dual_run", shadow: bool = False) -> None:
        with self.store.engine.begin() as conn:
            conn.execute(
                insert(migrator_tables().business).values(
                    biz_code=self.biz_code,
                    source_system=self.source.value,
                    state=state,
                    shadow=int(shadow),
                    version=0,
                    updated_at=0,
                )
            )

    def switched(self, at: datetime, from_state: str, to_state: str) -> None:
        """An audited state change of the business at `at` (what the dual-run span reads)."""
        with self.store.engine.begin() as conn:
            conn.execute(
                insert(migrator_tables().audit).values(
                    biz_code=self.biz_code,
                    from_state=from_state,
                    to_state=to_state,
                    at=round(at.timestamp() * 1000),
                    actor="ops",
                    reason="test",
                    forced=0,
                    detail="{}",
                )
            )

    def times(self, d: LegacyDefinition, window: Window | None = None) -> list[datetime]:
        w = window or self.current
        return occurrences(d, w.start, w.end)

    def all_times(self, d: LegacyDefinition) -> list[datetime]:
        return occurrences(d, self.earlier.start, self.current.end)

    def legacy(self, d: LegacyDefinition, times: list[datetime] | None = None, **kw: object) -> None:
        self.log.fires(d, self.all_times(d) if times is None else times, **kw)

    def new(self, d: LegacyDefinition, times: list[datetime] | None = None, **kw: object) -> None:
        tid = self._trigger_ids[d.source_key]
        for at in self.times(d) if times is None else times:
            self.records.append(fired(self.code(d), self.biz_code, tid, at, **kw))  # type: ignore[arg-type]

    def reader(self) -> RecordReader:
        cls = RecordReader if self.source is SourceSystem.XXL_JOB else BatchRecordReader
        return cls(self.defs, self.log.rows)

    def flush(self) -> None:
        if self.records:
            self.store.put_fired(self.records)
            self.records = []

    def compare(self, settings: CompareSettings | None = None, **kw: Any) -> Comparison:
        self.flush()
        request = CompareRequest(
            biz_code=self.biz_code, window=self.current, source=kw.pop("source", self.source), **kw
        )  # type: ignore[arg-type]
        return compare_business(
            self.store,
            dualrun_store(self.store),
            self.reader(),
            request,
            settings=settings or CompareSettings(),
            now=self.now,
        )


def identical(tmp_path: Path, **kw: object) -> tuple[Scenario, LegacyDefinition]:
    """One job every 10 s, fired alike on both sides."""
    s = Scenario.create(tmp_path, **kw)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d)
    return s, d


def test_scenario_writes_both_windows_of_legacy_and_the_current_window_of_new(tmp_path: Path) -> None:
    s, _d = identical(tmp_path)
    assert len(s.log.rows) == 720
    assert len(s.records) == 360
    assert all(r.scheduled_at >= s.current.start for r in s.records)


def test_reader_windows_xxl_rows_by_trigger_time(tmp_path: Path) -> None:
    s, _ = identical(tmp_path)
    rows = list(s.reader().executions("reminder", s.current.start, s.current.end))
    assert len(rows) == 360
    assert all(r.scheduled_at is None for r in rows)
