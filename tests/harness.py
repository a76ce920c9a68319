"""A driven-clock scheduler on the embedded default: SQLite, in-process bus, inline pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import ManualClock
from scheduler_core.codec import command_topic, decode_commands
from scheduler_core.model import Epoch, ExecutionCommand, Job, JobCode, Trigger, TriggerId, TriggerKind, TriggerState
from scheduler_core.ports import Subscription
from scheduler_core.scheduler import SchedulerCore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema


@dataclass
class Harness:
    clock: ManualClock
    store: SqlTriggerStore
    bus: InProcessBus
    settings: SchedulerSettings
    subs: dict[str, Subscription] = field(default_factory=dict)

    def core(self, epoch: int = 1, **overrides: Any) -> SchedulerCore:
        settings = self.settings if not overrides else SchedulerSettings(**{**_fields(self.settings), **overrides})
        assert self.store.claim_epoch(Epoch(epoch)) or self.store.current_epoch() >= epoch
        return SchedulerCore(self.store, self.bus, self.clock, Epoch(epoch), settings, inline=True)

    def listen(self, biz_code: str) -> Subscription:
        if biz_code not in self.subs:
            self.subs[biz_code] = self.bus.subscribe(command_topic(biz_code), "test-executor")
        return self.subs[biz_code]

    def delivered(self, biz_code: str) -> list[ExecutionCommand]:
        """Commands of the business deliverable now (acked)."""
        sub = self.listen(biz_code)
        out: list[ExecutionCommand] = []
        while True:
            got = sub.receive(1000, timedelta(0))
            if not got:
                return out
            for r in got:
                out += decode_commands(r.message.payload)
                sub.ack(r)

    def job(self, code: str, biz: str = "biz-a", **kw: Any) -> Job:
        return self.store.put_job(Job(job_code=JobCode(code), biz_code=biz, handler="h", **kw))  # type: ignore[arg-type]

    def once(self, job: Job, at_s: float, **kw: Any) -> Trigger:
        (t,) = self.store.add_triggers(
            [trigger_of(job, TriggerKind.ONCE, self.clock.now() + timedelta(seconds=at_s), **kw)]
        )
        return t

    def results(self, core: SchedulerCore) -> ResultConsumer:
        return ResultConsumer(self.bus, self.store, core.metrics, clock=self.clock, settings=core.settings)


def trigger_of(job: Job, kind: TriggerKind, next_fire_at: datetime, **kw: Any) -> Trigger:
    """A trigger of `job` in its business, not yet stored (`kw`: the kind's schedule fields)."""
    return Trigger(job_code=job.job_code, biz_code=job.biz_code, kind=kind, next_fire_at=next_fire_at, **kw)


def stored_id(t: Trigger) -> TriggerId:
    """A stored trigger's id (the store sets it: a Trigger not yet stored has none)."""
    assert t.id is not None, f"trigger {t.job_code} was never stored"
    return t.id


def state_of(store: SqlTriggerStore, t: Trigger) -> TriggerState:
    """A stored trigger's state as the store has it now."""
    got = store.get_trigger(stored_id(t))
    assert got is not None, f"trigger {t.id} is gone from the store"
    return got.state


def _fields(s: SchedulerSettings) -> dict[str, Any]:
    return {f: getattr(s, f) for f in s.__dataclass_fields__}


def make_harness(tmp_path: Path, clock: ManualClock, partitions: int = 4, **settings: Any) -> Harness:
    engine = make_engine(f"sqlite:///{tmp_path / 'sched.db'}")
    init_schema(engine, partitions)
    return harness_on(SqlTriggerStore(engine, clock), clock, **settings)


def harness_on(store: SqlTriggerStore, clock: ManualClock, **settings: Any) -> Harness:
    """A harness over a store the test already has, on a fresh in-process bus; `settings`
    over the defaults (1 s idle wait, no jitter, no busy wait)."""
    base = dict(idle_wait=timedelta(seconds=1), jitter=timedelta(0), busy_wait=timedelta(0))
    base.update(settings)  # type: ignore[arg-type]
    return Harness(clock, store, InProcessBus(clock), SchedulerSettings(**base))  # type: ignore[arg-type]
