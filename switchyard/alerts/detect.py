"""Which runs are an alert's event, and which tell of a recovery (pure: rows in, events out).

From a job's fired records (one per fire and sharding item, `SqlJobAdmin.runs`' rows):
- `failure`: the run's result is failed (after its retries: the executor retries first);
- `timeout`: the run's result is timed_out (the executor's watchdog gave up on it);
- `missed`: the occurrence did not start on time. A user means by it "it should have run
  at T and by T + grace nothing had started it", so it is any of: the record is
  misfired (the scheduler was down past the misfire threshold: skipped, or run once
  late); the executor took it more than `grace` after T; it is still not taken `grace`
  after T (no executor, a stuck bus). And from the job's triggers: a running trigger
  whose next fire time is more than `grace` past and still not admitted (the scheduler
  is down or behind: no record exists to look at). A missed event is per occurrence
  (trigger, T), whichever way it was seen, so one occurrence is counted once.

A recovery: a later run that succeeded resolves failure and timeout; a later run taken
within `grace` of its time resolves missed. A run killed by an operator, or skipped by a
stop, is neither."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.model import FiredState, Trigger, TriggerState
from scheduler_core.times import to_ms
from switchyard.alerts.store import Event

NOT_TAKEN = (FiredState.PENDING.value, FiredState.PUBLISHED.value)
FINAL = {s.value for s in FiredState if s.is_final}


@dataclass
class Scan:
    events: list[Event] = field(default_factory=list)
    # kind -> the latest scheduled time (ms) of a run that shows the kind recovered
    recovered: dict[str, int] = field(default_factory=dict)
    # where the next scan may start: before every record that may still change
    next_from: int | None = None


def _ok(scan: Scan, kind: str, at: int) -> None:
    scan.recovered[kind] = max(scan.recovered.get(kind, at), at)


def _miss_key(trigger_id: int, scheduled_ms: int) -> str:
    return f"miss:{trigger_id}:{scheduled_ms}"


def scan_runs(rows: Iterable[Mapping[str, Any]], now_ms: int, grace_ms: int) -> Scan:
    """Events and recoveries in a job's fired records."""
    scan = Scan()
    open_from: int | None = None
    newest: int | None = None
    for r in rows:
        at = int(r["scheduled_at"])
        state = str(r["state"])
        cid = str(r["command_id"])
        msg = str(r["message"] or "")
        newest = at if newest is None else max(newest, at)
        if state not in FINAL:
            open_from = at if open_from is None else min(open_from, at)
        if state == FiredState.FAILED.value:
            scan.events.append(Event(cid, "failure", at, cid, msg or "failed"))
        elif state == FiredState.TIMED_OUT.value:
            scan.events.append(Event(cid, "timeout", at, cid, msg or "timed out"))
        elif state == FiredState.SUCCEEDED.value:
            _ok(scan, "failure", at)
            _ok(scan, "timeout", at)
        began = r["started_at"] if r["started_at"] is not None else r["received_at"]
        miss_key = _miss_key(int(r["trigger_id"]), at)
        if r["misfired"]:
            what = "skipped" if state == FiredState.SKIPPED.value else "run once late"
            scan.events.append(Event(miss_key, "missed", at, cid, f"misfired ({what}): the scheduler was down past T"))
        elif began is not None and int(began) - at > grace_ms:
            late = (int(began) - at) / 1000
            scan.events.append(Event(miss_key, "missed", at, cid, f"started {late:.1f} s after its time"))
        elif began is None and state in NOT_TAKEN and now_ms - at > grace_ms:
            late = (now_ms - at) / 1000
            scan.events.append(
                Event(miss_key, "missed", at, cid, f"not taken by an executor {late:.1f} s after its time")
            )
        elif began is not None:
            _ok(scan, "missed", at)
    scan.next_from = open_from if open_from is not None else (None if newest is None else newest + 1)
    return scan


def scan_triggers(triggers: Iterable[Trigger], now_ms: int, grace_ms: int) -> list[Event]:
    """A running trigger whose next fire is more than `grace` past: not admitted."""
    out = []
    for t in triggers:
        if t.state is not TriggerState.WAITING or t.id is None:
            continue
        at = to_ms(t.next_fire_at)
        if now_ms - at > grace_ms:
            late = (now_ms - at) / 1000
            out.append(
                Event(
                    _miss_key(t.id, at), "missed", at, None, f"not fired: the scheduler is {late:.1f} s behind its time"
                )
            )
    return out


__all__ = ["Scan", "scan_runs", "scan_triggers"]
