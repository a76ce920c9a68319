"""One-shot runs a rollback fence covers that were never published: a chunk held for its T
(`scheduler_core.hold`) while the fence was raised. Published ahead (deliver-at = T), such
a run would have been marked skipped by the fence and skipped by every executor; held, it
is not published at all after the fence, and ends the same way in the store: its fired
records (written pending when the chunk was admitted) say "skipped by the rollback
fence" (final: no handler ran) and the one-shot is
completed, which is what a rollback reads to hand the occurrence to legacy (a completed
one-shot at or after the fence starts on legacy at its T). The completion holds only
while the chunk's epoch holds its ownership, as the fire pipeline's outcome does; the records are marked after a read
of the epoch (a record a deposed owner marks skipped in between is one the fence covers:
every executor skips its command when the new owner re-publishes it).

A fence raised after `covered` read it, while the chunk is being fired, is the remaining
window of a few ms: its run is published, and the executors skip it as they skip every
command the fence covers.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime

from scheduler_core.fence import Fence
from scheduler_core.logfields import log_fields
from scheduler_core.model import Epoch, FiredRecord, FiredState, Trigger, TriggerId, TriggerState
from scheduler_core.ports import FenceStore, FiredUpdate, Transition, TriggerStore
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)


def covered(fences: FenceStore, chunk: Sequence[Trigger]) -> tuple[list[Trigger], list[Trigger], Fence | None]:
    """The chunk split into the triggers its business's fence covers at their T, and the
    rest (a chunk is one business's); with the fence read."""
    if not chunk:
        return [], [], None
    fence = fences.business_fence(chunk[0].biz_code)
    if fence is None:
        return [], list(chunk), None
    hit = [t for t in chunk if fence.covers(to_ms(t.next_fire_at))]
    return hit, [t for t in chunk if not fence.covers(to_ms(t.next_fire_at))], fence


def skip_fenced(
    store: TriggerStore,
    fence: Fence,
    chunk: Sequence[Trigger],
    records: Sequence[FiredRecord],
    epoch: Epoch,
    ownership: str | None,
    now: datetime,
) -> list[TriggerId]:
    """The chunk's runs skipped by `fence` and its one-shots completed, publishing nothing;
    returns the triggers completed (none when the epoch no longer holds `ownership`: the
    rows stay acquired, for the newer owner to reclaim). `records`: the chunk's fired records as its
    prepare wrote them (pending), when it was admitted."""
    if store.current_epoch(ownership) != epoch:
        return []
    # pending since admission (or marked skipped only provisionally by a fence raised
    # since, undone if it is lifted): final now, for no command of theirs was published
    store.update_fired(
        [
            FiredUpdate(command_id=r.command_id, state=FiredState.SKIPPED, at=now, message=fence.message)
            for r in records
            if r.state is FiredState.PENDING
        ]
    )
    ids = [t.id for t in chunk if t.id is not None]
    # acquired by this epoch -> completed, while it holds the ownership (a one-shot's outcome, as fire.py's)
    done = Transition(ids=ids, from_state=TriggerState.ACQUIRED, to_state=TriggerState.COMPLETED, fired_at_next=True)
    won = store.cas_ids(
        dataclasses.replace(done, expected_epoch=epoch, clear_epoch=True, fence_epoch=epoch, fence=ownership)
    )
    log.info(
        "%d held run(s) of %s not published: the %s covers them (legacy takes them)",
        len(won),
        fence.biz_code,
        fence,
        extra=log_fields(biz_code=fence.biz_code, epoch=epoch),
    )
    return won


__all__ = ["covered", "skip_fenced"]
