"""The column layout of the comparator's frames, and their construction from records.

Everything heavy happens on three pandas frames with integer columns only (times are UTC
epoch milliseconds, -1 for "none"; jobs are small integers from a `JobIndex`):

- legacy attempts: job, shard, total, attempt, kind, status, trig, sched, fin
- new items:       job, item, total, status, sched, recv, misfired, attempt
- expected:        job, sched
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd

from readers.records import ExecStatus, LegacyDefinition, LegacyExecution, MisfireRule, ScheduleKind
from scheduler_core.model import FiredState
from scheduler_core.times import to_ms

NONE = -1  # "no time" in an epoch-ms column

# status codes, ordered by severity: a fire's status is the worst of its items
SUCCESS, UNFINISHED, TIMEOUT, FAIL, SKIPPED = 0, 1, 2, 3, 4
# a new-side record a rollback fence skipped (scheduler_core.fence): never invoked, the
# legacy side's to fire, so never missing, extra or failed on the new side
FENCED = 5
# a new-side run an operator killed (`run kill`, scheduler_core.kills): it fired (never
# missing) and did not run to its own end, so it is neither a success nor a failure of the
# handler; counted in its own column and left out of the success rate
KILLED = 6
# a new-side record an operator's stop skipped (pause, cancel, freeze: scheduler_core.stops):
# deliberate, never invoked; legacy may fire it (a stop on the new side only), which is no
# mismatch against the new side, and it is told apart from a rollback's fence in the report
STOPPED = 7

# legacy row kinds (from the trigger type xxl-job writes into trigger_msg)
SCHEDULE, RETRY, MANUAL, MISFIRE = 0, 1, 2, 3

LEGACY_COLUMNS = ("job", "shard", "total", "attempt", "kind", "status", "trig", "sched", "fin")
NEW_COLUMNS = ("job", "item", "total", "status", "sched", "recv", "misfired", "attempt")
EXPECTED_COLUMNS = ("job", "sched")

_EXEC_STATUS = {
    ExecStatus.SUCCESS: SUCCESS,
    ExecStatus.RUNNING: UNFINISHED,
    ExecStatus.TIMEOUT: TIMEOUT,
    ExecStatus.FAIL: FAIL,
    ExecStatus.NOT_DISPATCHED: FAIL,
}
FIRED_STATUS = {
    FiredState.SUCCEEDED.value: SUCCESS,
    FiredState.FAILED.value: FAIL,
    FiredState.TIMED_OUT.value: TIMEOUT,
    FiredState.SKIPPED.value: SKIPPED,
    FiredState.KILLED.value: KILLED,
    # not run (yet): a schedule fire's record stays pending until its executor reports,
    # published or not (FiredState; read as published once its trigger recorded it)
    FiredState.PENDING.value: UNFINISHED,
    FiredState.PUBLISHED.value: UNFINISHED,
    FiredState.RECEIVED.value: UNFINISHED,
}

# The xxl-job reader leads a record's message with the trigger type ("[RETRY] ...",
# readers/xxljob/logs.py); a raw trigger_msg has it as "任务触发类型：<type>" (en: "Job
# trigger type：<type>"). The original row of a retried fire also gets a retry banner
# appended, so only the type line (or the prefix) says what a row is.
_PREFIX = re.compile(r"^\[(CRON|MANUAL|RETRY|PARENT|API|MISFIRE|UNKNOWN)\]")
_PREFIX_KIND = {"RETRY": RETRY, "MISFIRE": MISFIRE, "MANUAL": MANUAL, "PARENT": MANUAL, "API": MANUAL}
_TRIGGER_TYPE = re.compile(r"(?:触发类型|觸發類型|trigger\s*type)\s*[:：]\s*([^<\r\n]{1,40})", re.IGNORECASE)
_KIND_WORDS = (
    (RETRY, ("失败重试", "失敗重試", "retry")),
    (MISFIRE, ("调度过期补偿", "調度過期補償", "misfire")),
    (MANUAL, ("手动", "手動", "manual", "api", "父任务", "父任務", "parent")),
)


def row_kind(message: str, attempt: int) -> int:
    if attempt > 0:
        return RETRY
    if not message:
        return SCHEDULE
    prefix = _PREFIX.match(message)
    if prefix is not None:
        return _PREFIX_KIND.get(prefix.group(1), SCHEDULE)
    m = _TRIGGER_TYPE.search(message)
    if m is None:
        return SCHEDULE
    kind_text = m.group(1).lower()
    for kind, words in _KIND_WORDS:
        if any(w in kind_text for w in words):
            return kind
    return SCHEDULE


def frame_ms(at: datetime | None) -> int:
    """A time as a frame column carries it: epoch ms, NONE for no time."""
    return NONE if at is None else to_ms(at)


@dataclass
class JobIndex:
    """Job codes <-> the small integers the frames carry."""

    codes: list[str] = field(default_factory=list)
    _ids: dict[str, int] = field(default_factory=dict)

    def id(self, code: str) -> int:
        found = self._ids.get(code)
        if found is None:
            found = self._ids[code] = len(self.codes)
            self.codes.append(code)
        return found

    def code(self, job_id: int) -> str:
        return self.codes[job_id]

    def __len__(self) -> int:
        return len(self.codes)


def empty(columns: Iterable[str]) -> pd.DataFrame:
    return pd.DataFrame(copy=False, data={c: np.zeros(0, dtype=np.int64) for c in columns})


def legacy_frame(rows: Iterable[LegacyExecution], job_of: Callable[[str], str], jobs: JobIndex) -> pd.DataFrame:
    """Legacy attempts as a frame; `job_of` maps a legacy source key to the new job code."""
    cols: dict[str, list[int]] = {c: [] for c in LEGACY_COLUMNS}
    codes: dict[str, int] = {}
    for r in rows:
        jid = codes.get(r.source_key)
        if jid is None:
            jid = codes[r.source_key] = jobs.id(job_of(r.source_key))
        cols["job"].append(jid)
        cols["shard"].append(r.shard_index)
        cols["total"].append(r.shard_total)
        cols["attempt"].append(r.attempt)
        cols["kind"].append(row_kind(r.message, r.attempt))
        cols["status"].append(_EXEC_STATUS.get(r.status, FAIL))
        cols["trig"].append(frame_ms(r.triggered_at))
        cols["sched"].append(frame_ms(r.scheduled_at))
        cols["fin"].append(frame_ms(r.finished_at))
    return _typed(cols, LEGACY_COLUMNS)


def _typed(cols: Mapping[str, list[int]], names: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(copy=False, data={c: np.asarray(cols[c], dtype=np.int64) for c in names})


@dataclass(frozen=True, slots=True, kw_only=True)
class JobInfo:
    """What the labels need to know about one job's legacy definition."""

    job_code: str
    source_key: str
    cron: str | None = None
    time_zone: str = "Asia/Shanghai"
    broadcast: bool = False
    misfire_skip: bool = True
    # enabled with a repeating schedule (cron, fixed rate): a job the verdict needs a number
    # of occurrences of; a one-shot or stopped job cannot show them
    recurring: bool = False
    timeout_s: int = 0  # the job's run timeout on the executor (xxl-job executor_timeout); 0: none

    @property
    def dom_field(self) -> str:
        parts = (self.cron or "").split()
        return parts[3].upper() if len(parts) >= 4 else ""


def is_recurring(defn: LegacyDefinition) -> bool:
    """Enabled with a schedule that repeats (what `dualrun.expected` expands more than once)."""
    return defn.enabled and (
        (defn.schedule is ScheduleKind.CRON and bool(defn.cron))
        or (defn.schedule is ScheduleKind.FIXED_RATE and bool(defn.interval_seconds))
    )


def job_info(defn: LegacyDefinition, job_code: str) -> JobInfo:
    return JobInfo(
        job_code=job_code,
        source_key=defn.source_key,
        cron=defn.cron,
        time_zone=defn.time_zone,
        broadcast=defn.broadcast,
        misfire_skip=defn.misfire == MisfireRule.SKIP,
        recurring=is_recurring(defn),
        timeout_s=max(0, int(defn.timeout_seconds or 0)),
    )
