"""One-shot runs a rollback fence covers that were never published: a chunk held for its T
(`scheduler_core.hold`) while the fence was raised. Published ahead (deliver-at = T), such
a run would have been marked skipped by the fence and skipped by every executor; held, it
is not published at all after the fence, and ends the same way in the store: its fired
records (written pending when the chunk was admitted) say "skipped by the rollback
fence" (final: no handler ran) and the one-shot is
completed, which is what a rollback reads to hand the occurrence to legacy (a completed
one-shot at or after the fence starts on legacy at its T). Every write is fenced by the
chunk's epoch, as the fire pipeline's are.

A fence raised after `covered` read it, while the chunk is being fired, is the remaining
window of a few ms: its run is published, and the executors skip it as they skip every
command the fence covers.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from scheduler_core.fence import Fence
from scheduler_core.fire import FirePipeline
from scheduler_core.logfields import log_fields
from scheduler_core.model import Epoch, FiredRecord, FiredState, Job, JobCode, Trigger, TriggerId, TriggerState
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
    pipeline: FirePipeline,
    fence: Fence,
    chunk: Sequence[Trigger],
    jobs: Mapping[JobCode, Job],
    epoch: Epoch,
    fence_name: str | None,
    now: datetime,
) -> list[TriggerId]:
    """Record the chunk's runs skipped by `fence` and complete its one-shots, publishing
    nothing; returns the triggers completed (none when the epoch is fenced: the rows stay
    acquired, for the owner that fenced it to reclaim)."""
    records: list[FiredRecord] = []
    for t in chunk:
        job = jobs.get(t.job_code)
        if job is None:
            continue  # deleted: no run to record; completed below like any other
        recs, _messages = pipeline.run_now(t, job, t.next_fire_at, epoch)
        records += [
            dataclasses.replace(r, state=FiredState.SKIPPED, result_at=now, message=fence.message) for r in recs
        ]
    if not store.put_fired_fenced(records, epoch, fence_name):
        return []
    # a held chunk's records were written pending when it was admitted (and a fence
    # raised since then marked them skipped only provisionally, undone if it is lifted):
    # final now, as the records just written are, for no command of theirs was published
    store.update_fired(
        [FiredUpdate(command_id=r.command_id, state=FiredState.SKIPPED, at=now, message=fence.message) for r in records]
    )
    ids = [t.id for t in chunk if t.id is not None]
    # acquired by this epoch -> completed, fenced by it (a one-shot's outcome, as fire.py's)
    done = Transition(ids=ids, from_state=TriggerState.ACQUIRED, to_state=TriggerState.COMPLETED, fired_at_next=True)
    won = store.cas_ids(
        dataclasses.replace(done, expected_epoch=epoch, clear_epoch=True, fence_epoch=epoch, fence=fence_name)
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
