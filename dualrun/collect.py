"""Fetch both sides of a business for a window: the only I/O of a comparison.

- legacy: `LegacyReader.executions` (with margins, so retries and late dispatches of the
  window's fires are seen) and `definitions` (to rebuild the expected occurrences);
- new: fired records straight from `dus_fired_record` into a frame (no model objects);
- the link between them: `dus_migration_ledger` (legacy key -> target job code), and the
  business's state and shadow flag from `dus_business`;
- consumer lag: the executor subscription's due backlog, from a `BacklogProbe`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from dualrun.compare import Inputs, compare_frames
from dualrun.errors import NoSourceSystem
from dualrun.expected import build_expected
from dualrun.followup_runs import followup_runs, without_followup_runs
from dualrun.frames import (
    FENCED,
    FIRED_STATUS,
    NEW_COLUMNS,
    NONE,
    STOPPED,
    UNFINISHED,
    JobIndex,
    JobInfo,
    job_info,
    legacy_frame,
)
from dualrun.model import Comparison, ConsumerLag, Mode, QuarantinedJob, Window
from dualrun.ports import BacklogProbe
from dualrun.settings import CompareSettings
from dualrun.span import Switch, baseline_span, clip, fetch_switches
from dualrun.store import DualRunStore
from readers.ports import LegacyReader
from readers.records import LegacyDefinition, SourceSystem
from scheduler_core.codec import command_topic
from scheduler_core.errors import BusError
from scheduler_core.executor.sdk import SUBSCRIPTION
from scheduler_core.ports import RunRecordReads
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)
SOURCE_PREFIX = {SourceSystem.XXL_JOB: "xxl", SourceSystem.BATCH_CENTER: "bc"}  # as migrator.mapping.job_code_of


@dataclass(frozen=True, slots=True, kw_only=True)
class BusinessInfo:
    biz_code: str
    source_system: str
    state: str
    shadow: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareRequest:
    biz_code: str
    window: Window
    source: SourceSystem | None = None  # None: from dus_business
    legacy_biz_code: str | None = None  # the legacy side's name when it differs
    shadow: bool | None = None  # None: from dus_business


def _info(row: tuple[str, str, str, bool]) -> BusinessInfo:
    code, source, state, shadow = row
    return BusinessInfo(biz_code=code, source_system=source, state=state, shadow=bool(shadow))


def fetch_business(own: DualRunStore, biz_code: str) -> BusinessInfo | None:
    row = own.migration.business(biz_code)
    return None if row is None else _info(row)


def fetch_businesses(own: DualRunStore) -> list[BusinessInfo]:
    return [_info(r) for r in own.migration.businesses()]


def fetch_job_codes(own: DualRunStore, source: SourceSystem, biz_code: str) -> dict[str, str]:
    """Legacy source key -> target job code, from the migration ledger."""
    return own.migration.job_codes(source.value, biz_code)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineEntry:
    source_key: str
    field: str | None
    reason: str | None


def fetch_quarantined(own: DualRunStore, source: SourceSystem, biz_code: str) -> list[QuarantineEntry]:
    """Legacy rows of a business the migrator quarantined (never handed to the new side), from
    the migration ledger. Rows migrated and later deleted at the source (status `deleted`) or
    cancelled on the new side are not among them: their missing fires still count."""
    return [
        QuarantineEntry(source_key=k, field=f, reason=r)
        for k, f, r in own.migration.quarantined(source.value, biz_code)
    ]


_FIRED = ("job_code", "item_index", "item_total", "state", "scheduled_at", "received_at", "misfired", "attempt")
# a record a rollback fence skipped, as `read_state` names it (not a stored state)
FENCED_STATE = "fenced"
# a record an operator's stop skipped, as `read_state` names it
STOPPED_STATE = "stopped"
_READ_STATUS = {**FIRED_STATUS, FENCED_STATE: FENCED, STOPPED_STATE: STOPPED}


def fetch_new(store: RunRecordReads, biz_code: str, window: Window, jobs: JobIndex) -> pd.DataFrame:
    """Fired records of a business with scheduled_at in the window, as a new-side frame."""
    # a fence's skip read as FENCED_STATE; time order: the matcher's sorts are then cheap
    rows = store.fired_rows_of(
        biz_code,
        to_ms(window.start),
        to_ms(window.end),
        _FIRED,
        fenced_as=FENCED_STATE,
        stopped_as=STOPPED_STATE,
        by_time=True,
    )
    raw = pd.DataFrame(rows, columns=list(_FIRED))
    # child-job runs after a parent's success: no schedule explains them (as legacy's PARENT runs)
    return new_frame_from(without_followup_runs(raw, followup_runs(store, biz_code, window)), jobs)


def new_frame_from(raw: pd.DataFrame, jobs: JobIndex) -> pd.DataFrame:
    """Vectorised: store columns -> the new-side frame (codes mapped once per distinct value)."""
    if not len(raw):
        return pd.DataFrame(copy=False, data={c: np.zeros(0, dtype=np.int64) for c in NEW_COLUMNS})
    codes, uniques = pd.factorize(raw["job_code"].astype(str))
    ids = np.asarray([jobs.id(u) for u in uniques], dtype=np.int64)
    return pd.DataFrame(
        copy=False,
        data={
            "job": ids[codes],
            "item": raw["item_index"].to_numpy(dtype=np.int64),
            "total": raw["item_total"].to_numpy(dtype=np.int64),
            "status": raw["state"].map(_READ_STATUS).fillna(UNFINISHED).to_numpy(dtype=np.int64),
            "sched": raw["scheduled_at"].to_numpy(dtype=np.int64),
            "recv": raw["received_at"].fillna(NONE).to_numpy(dtype=np.int64),
            "misfired": raw["misfired"].fillna(0).to_numpy(dtype=np.int64),
            "attempt": raw["attempt"].fillna(0).to_numpy(dtype=np.int64),
        },
    )


def consumer_lag(probe: BacklogProbe | None, biz_code: str) -> tuple[ConsumerLag | None, str | None]:
    if probe is None:
        return None, None
    topic = command_topic(biz_code)
    try:
        due, delayed = probe.backlog(topic, SUBSCRIPTION)
    except BusError as exc:
        return None, f"consumer lag not measured: {exc}"
    return ConsumerLag(topic=topic, subscription=SUBSCRIPTION, due=due, delayed=delayed), None


@dataclass
class _Legacy:
    frame: pd.DataFrame
    expected: pd.DataFrame
    notes: list[str]


class Collector:
    """Fetches the inputs of comparisons of one business (definitions read once)."""

    def __init__(
        self,
        store: RunRecordReads,
        own: DualRunStore,
        reader: LegacyReader,
        *,
        source: SourceSystem,
        biz_code: str,
        legacy_biz_code: str | None,
        settings: CompareSettings,
    ) -> None:
        self.store, self.reader, self.source, self.biz_code = store, reader, source, biz_code
        self.legacy_biz_code = legacy_biz_code or biz_code
        self.settings = settings
        self.jobs = JobIndex()
        self.job_of = fetch_job_codes(own, source, biz_code)
        self.defs = [d for d in reader.definitions([self.legacy_biz_code]) if d.biz_code == self.legacy_biz_code]
        self.info: dict[int, JobInfo] = {}
        for d in self.defs:
            code = self.code_of(d)
            self.info[self.jobs.id(code)] = job_info(d, code)
        self.quarantined: dict[int, QuarantinedJob] = {}
        for q in fetch_quarantined(own, source, biz_code):
            code = self.code_for_key(q.source_key)
            self.quarantined[self.jobs.id(code)] = QuarantinedJob(
                source_key=q.source_key, job_code=code, field=q.field, reason=q.reason
            )

    def code_of(self, d: LegacyDefinition) -> str:
        return self.code_for_key(d.source_key)

    def code_for_key(self, key: str) -> str:
        return self.job_of.get(key) or f"{SOURCE_PREFIX[self.source]}:{self.legacy_biz_code}:{key}"[:191]

    def legacy(self, window: Window, *, all_schedules: bool = False) -> _Legacy:
        """The legacy rows of a window (with margins) and the expected occurrences.
        `all_schedules`: switched-off definitions expect their schedule's occurrences too
        (a cutover switches the legacy job off; its schedule still says what is due)."""
        m = self.settings.match
        since = window.start - m.nominal_tolerance - m.early
        until = window.end + m.retry_window
        rows = self.reader.executions(self.legacy_biz_code, since, until)
        frame = legacy_frame(rows, self.code_for_key, self.jobs)
        defs = [replace(d, enabled=True) for d in self.defs] if all_schedules else self.defs
        # occurrences of the whole fetched range: a row just outside the window must find
        # its own occurrence, not the window's last one
        exp = build_expected(
            ((self.code_of(d), d) for d in defs),
            Window(start=since, end=until),
            self.jobs,
            cap=m.max_occurrences_per_job,
        )
        return _Legacy(frame, exp.frame, exp.notes)

    def inputs(
        self, window: Window, *, mode: Mode, probe: BacklogProbe | None, switches: Sequence[Switch] = ()
    ) -> Inputs:
        """The inputs of `window` clipped at the business's `switches` (dualrun.span)."""
        span = clip(self.biz_code, window, switches)
        window = span.window
        base_window, base_clipped = baseline_span(window, self.settings.baseline_offset, switches)
        if base_clipped:
            span = replace(span, clipped=span.clipped + base_clipped)
        cur, base = self.legacy(window), self.legacy(base_window)
        lag, lag_note = consumer_lag(probe, self.biz_code)
        notes = [*cur.notes]
        if lag_note:
            notes.append(lag_note)
        if not self.defs:
            notes.append(
                f"no legacy definitions found for {self.legacy_biz_code!r}: fires are matched by time "
                "only, without expected occurrences"
            )
        return Inputs(
            biz_code=self.biz_code,
            legacy_biz_code=self.legacy_biz_code,
            source=self.source.value,
            mode=mode,
            window=window,
            baseline_window=base_window,
            legacy=cur.frame,
            baseline_legacy=base.frame,
            new=fetch_new(self.store, self.biz_code, window, self.jobs),
            expected=cur.expected,
            baseline_expected=base.expected,
            jobs=self.jobs,
            info=self.info,
            consumer_lag=lag,
            notes=tuple(notes),
            quarantined=self.quarantined,
            span=span,
        )


def resolve(own: DualRunStore, request: CompareRequest) -> tuple[SourceSystem, Mode]:
    """The source system and mode of a request, from the request or the business's record."""
    info = fetch_business(own, request.biz_code)
    source = request.source
    if source is None:
        if info is None:
            raise NoSourceSystem(request.biz_code)
        source = SourceSystem(info.source_system)
    shadow = request.shadow if request.shadow is not None else bool(info and info.shadow)
    return source, Mode.SHADOW if shadow else Mode.BOTH


def compare_business(
    store: RunRecordReads,
    own: DualRunStore,
    reader: LegacyReader,
    request: CompareRequest,
    *,
    settings: CompareSettings,
    now: datetime,
    probe: BacklogProbe | None = None,
) -> Comparison:
    """Collect both sides of one business for the request's window and compare them."""
    source, mode = resolve(own, request)
    collector = Collector(
        store,
        own,
        reader,
        source=source,
        biz_code=request.biz_code,
        legacy_biz_code=request.legacy_biz_code,
        settings=settings,
    )
    inputs = collector.inputs(request.window, mode=mode, probe=probe, switches=fetch_switches(own, request.biz_code))
    log.debug("comparing", extra={"action": "compare_business", "business": request.biz_code})
    return compare_frames(inputs, settings, now)


def default_window(now: datetime, length: timedelta, since: datetime | None, until: datetime | None) -> Window:
    end = until or now
    return Window(start=since or end - length, end=end)
