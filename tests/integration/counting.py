"""What the fault and privilege tests fire and count: a burst of one-shot triggers with
the command ids they must deliver, and an executor on a thread of the test that counts
every command id it is handed (a re-fire shows as a count above 1)."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta

from scheduler_core.clock import SystemClock
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import CommandId, JobCode, Trigger, TriggerKind, TriggerState, command_id, parse_command_id
from scheduler_core.ports import MessageBus
from scheduler_core.store.sql import SqlTriggerStore


def one_shot_burst(
    store: SqlTriggerStore, job: str, biz: str, first: datetime, spacing: timedelta, n: int, items: int
) -> tuple[list[Trigger], set[CommandId]]:
    """`n` one-shot triggers of `job`, `spacing` apart from `first`, and the ids of the
    `items` commands each must deliver."""
    triggers = store.add_triggers(
        [
            Trigger(job_code=JobCode(job), biz_code=biz, kind=TriggerKind.ONCE, next_fire_at=first + spacing * i)
            for i in range(n)
        ]
    )
    expected = {command_id(t.id, t.next_fire_at, k) for t in triggers for k in range(items)}  # type: ignore[arg-type]
    return triggers, expected


class CountingExecutor:
    """An executor of `biz` running on a thread of the test; `got` counts each command
    id handled (read it under `lock` while the executor runs)."""

    def __init__(self, bus: MessageBus, biz: str, clock: SystemClock, concurrency: int = 16) -> None:
        self.got: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.ex = Executor(bus, biz, clock=clock, concurrency=concurrency)

        @self.ex.handler()
        def record(ctx: ExecutionContext) -> None:
            with self.lock:
                self.got[ctx.command_id] += 1

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.ex.run, args=(self._stop,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self.ex.close()


def assert_burst_done(
    store: SqlTriggerStore, triggers: list[Trigger], expected: set[CommandId], got: Counter[str], stuck_after: timedelta
) -> None:
    """Every expected command delivered, each delivered id the deterministic id of a real
    occurrence (a re-fire can only duplicate, never invent another id for the same
    occurrence), no trigger left acquired `stuck_after` past its deadline, all completed."""
    missing = expected - set(got)
    assert not missing, f"{len(missing)} occurrences never delivered, e.g. {sorted(missing)[:3]}"
    by_trigger = {t.id: t for t in triggers}
    for cid in got:
        tid, _ms, item = parse_command_id(cid)
        assert tid in by_trigger and command_id(tid, by_trigger[tid].next_fire_at, item) == cid
    now = store.clock.now()
    stuck = [
        t
        for t in store.triggers_of()
        if t.state is TriggerState.ACQUIRED
        and t.acquire_deadline is not None
        and t.acquire_deadline < now - stuck_after
    ]
    assert not stuck, f"{len(stuck)} trigger(s) left acquired past deadline + reclaim interval"
    assert {t.state for t in store.triggers_of()} == {TriggerState.COMPLETED}
