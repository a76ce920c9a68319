"""On success, fire these triggers (scheduler_core.followups): a succeeded parent run
fires each follow-up once, a redelivered result fires nothing again, a failed parent
fires nothing, a publication that fails is retried with the same command ids."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scheduler_core.clock import ManualClock
from scheduler_core.codec import CALLBACK_TOPIC, encode_results
from scheduler_core.errors import PublishError
from scheduler_core.model import (
    CommandId,
    FiredRecord,
    FiredState,
    Trigger,
    TriggerKind,
    TriggerState,
    parse_command_id,
)
from scheduler_core.ports import BusMessage, FiredUpdate
from tests.harness import Harness, make_harness, stored_id

T0 = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = make_harness(tmp_path, ManualClock(T0))
    harness.listen("biz-a")  # an executor of each business subscribes before anything is published
    harness.listen("biz-b")
    return harness


def _cron(h: Harness, code: str, biz: str = "biz-a") -> Trigger:
    job = h.job(code, biz)
    (t,) = h.store.add_triggers(
        [
            Trigger(
                job_code=job.job_code,
                biz_code=biz,
                kind=TriggerKind.CRON,
                cron="0 0 3 * * ?",
                next_fire_at=T0 + timedelta(hours=21),
                state=TriggerState.PAUSED,
            )
        ]
    )
    return t


def _parent_run(h: Harness) -> tuple[Trigger, CommandId]:
    parent = h.once(h.job("parent"), 1)
    core = h.core()
    h.clock.advance(1)
    core.tick_all()
    (cmd,) = [c for c in h.delivered("biz-a") if c.trigger_id == parent.id]
    return parent, cmd.command_id


def _result(h: Harness, cid: CommandId, state: FiredState) -> None:
    h.bus.publish([BusMessage(CALLBACK_TOPIC, encode_results([FiredUpdate(cid, state, h.clock.now())]))])


def test_a_successful_parent_fires_each_child_once_and_a_redelivery_fires_nothing(h: Harness) -> None:
    child, other = _cron(h, "child"), _cron(h, "other", "biz-b")
    consumer = h.results(h.core())
    parent, cid = _parent_run(h)
    h.store.set_followups({stored_id(parent): [stored_id(child), stored_id(other)]}, 0)
    _result(h, cid, FiredState.SUCCEEDED)
    consumer.poll()
    (fired,) = h.delivered("biz-a")
    (fired_b,) = h.delivered("biz-b")
    tid, at_ms, idx = parse_command_id(fired.command_id)
    parent_ms = parse_command_id(cid)[1]
    assert (tid, idx) == (child.id, 0) and 1 <= at_ms - parent_ms <= 999
    assert fired.job_code == "child" and fired_b.trigger_id == other.id
    record = h.store.get_fired([fired.command_id])[fired.command_id]
    assert record.state is FiredState.PUBLISHED and record.message == f"follow-up of {cid}"
    # the child's own schedule is not moved
    got = h.store.get_trigger(child.id)  # type: ignore[arg-type]
    assert got is not None and (got.state, got.next_fire_at) == (TriggerState.PAUSED, T0 + timedelta(hours=21))

    _result(h, cid, FiredState.SUCCEEDED)  # redelivered
    consumer.poll()
    assert h.delivered("biz-a") == [] and h.delivered("biz-b") == []
    assert consumer.followups.fired == 2


def test_a_failed_or_timed_out_parent_fires_no_child(h: Harness) -> None:
    child = _cron(h, "child")
    consumer = h.results(h.core())
    parent, cid = _parent_run(h)
    h.store.set_followups({stored_id(parent): [stored_id(child)]}, 0)
    for state in (FiredState.RECEIVED, FiredState.FAILED, FiredState.TIMED_OUT):
        _result(h, cid, state)
        consumer.poll()
    assert h.delivered("biz-a") == []


def test_a_trigger_is_never_its_own_follow_up(h: Harness) -> None:
    consumer = h.results(h.core())
    parent, cid = _parent_run(h)
    h.store.set_followups({stored_id(parent): [stored_id(parent)]}, 0)
    _result(h, cid, FiredState.SUCCEEDED)
    consumer.poll()
    assert h.delivered("biz-a") == []


def test_a_taken_command_id_moves_to_the_next_offset(h: Harness) -> None:
    child = _cron(h, "child")
    consumer = h.results(h.core())
    parent, cid = _parent_run(h)
    h.store.set_followups({stored_id(parent): [stored_id(child)]}, 0)
    parent_ms = parse_command_id(cid)[1]
    first = parent_ms + 1 + zlib.crc32(f"{cid}>{child.id}".encode()) % 999
    taken = CommandId(f"{child.id}-{first}-0")
    h.store.put_fired(
        [
            FiredRecord(
                command_id=taken,
                trigger_id=stored_id(child),
                job_code=child.job_code,
                biz_code="biz-a",
                scheduled_at=T0,
                state=FiredState.SUCCEEDED,
            )
        ]
    )
    _result(h, cid, FiredState.SUCCEEDED)
    consumer.poll()
    (fired,) = h.delivered("biz-a")
    assert fired.command_id != taken and parse_command_id(fired.command_id)[1] == first + 1 - (
        999 if first - parent_ms == 999 else 0
    )


class _FailOnce:
    """Wraps the bus: the first publication to a command topic fails."""

    def __init__(self, h: Harness) -> None:
        self.h, self.failed = h, False
        self.real = h.bus.publish

    def __call__(self, messages: Sequence[BusMessage]) -> None:
        if not self.failed and any(m.topic != CALLBACK_TOPIC for m in messages):
            self.failed = True
            raise PublishError("broker down", failed=len(messages))
        self.real(messages)


def test_a_failed_publication_is_retried_with_the_same_command_id(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    child = _cron(h, "child")
    consumer = h.results(h.core())
    parent, cid = _parent_run(h)
    h.store.set_followups({stored_id(parent): [stored_id(child)]}, 0)
    claims_before = h.store.followup_claims([(cid, child.id)])  # type: ignore[list-item]
    assert claims_before == {}
    monkeypatch.setattr(h.bus, "publish", _FailOnce(h))
    _result(h, cid, FiredState.SUCCEEDED)
    with pytest.raises(PublishError):
        consumer.poll()
    (claimed,) = h.store.followup_claims([(cid, child.id)]).values()  # type: ignore[list-item]
    assert h.store.get_fired([claimed])[claimed].state is FiredState.PENDING
    h.clock.advance(60)  # the nacked result comes back
    for _ in range(3):
        consumer.poll(timeout=timedelta(0))
    (fired,) = h.delivered("biz-a")
    assert fired.command_id == claimed
    assert h.store.get_fired([claimed])[claimed].state is FiredState.PUBLISHED


def test_each_succeeded_item_of_a_sharded_parent_fires_a_whole_child_run(h: Harness) -> None:
    # xxl-job triggers the children once per successful log row, i.e. per broadcast shard
    child_job = h.job("child", shard_total=2)
    (child,) = h.store.add_triggers(
        [
            Trigger(
                job_code=child_job.job_code,
                biz_code="biz-a",
                kind=TriggerKind.CRON,
                cron="0 0 3 * * ?",
                next_fire_at=T0 + timedelta(hours=21),
            )
        ]
    )
    parent = h.once(h.job("parent", shard_total=3), 1)
    core = h.core()
    consumer = h.results(core)
    h.clock.advance(1)
    core.tick_all()
    items = sorted((c for c in h.delivered("biz-a") if c.trigger_id == parent.id), key=lambda c: c.item_index)
    assert len(items) == 3
    h.store.set_followups({stored_id(parent): [stored_id(child)]}, 0)
    for cmd, state in zip(items, (FiredState.SUCCEEDED, FiredState.FAILED, FiredState.SUCCEEDED), strict=True):
        _result(h, cmd.command_id, state)
    consumer.poll()
    runs: dict[int, list[int]] = {}
    for c in h.delivered("biz-a"):
        assert c.trigger_id == child.id and c.item_total == 2
        runs.setdefault(parse_command_id(c.command_id)[1], []).append(c.item_index)
    assert sorted(sorted(v) for v in runs.values()) == [[0, 1], [0, 1]]  # two child runs (items 0 and 2 succeeded)
