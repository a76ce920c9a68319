"""The run log's retention (`switchyard runs purge`): fired records scheduled before a
cutoff that are final, with what hangs on them, deleted a batch at a time.

Only final records go (state rank final: succeeded, failed, timed out, skipped, killed),
and the records of shadow runs (received, and marked by the shadow executor as taken and
not invoked: nothing answers them further; kept, they would pile up for ever). A record
still pending, published, received, or skipped only provisionally by a stop or
a rollback fence (rank `received`: the fence or a resume may still revive it) is kept, so
nothing an executor, a stop or a fence still answers to disappears. Ranks only move
forward, so a record found final stays final while its batch is deleted.

Each batch is found by keyset on (scheduled_at, command_id), oldest first (the
`idx_fired_time` index, or `idx_fired_biz_time` for one business), and deleted by
primary key, 250 records to a short transaction, their dependents with them: the
run's log lines (`dus_run_log`, by fired id), its follow-up claims (`dus_followup_fired`,
by the parent's item command ids) and kill requests naming it. After each transaction
(and each batch's read) it pauses twice as long as that took, as pt-archiver's
`--sleep-coef` does, so the scheduler's own transactions get the locks, the binlog, the
I/O and the CPU every few tens of ms however slow the server is: pausing only between
batches let a batch's 20 transactions run back to back for a second or more, and the
scheduler's fire lag p99 rose with it (1.6x in bench `admin`). The keyset makes every
batch start after the last one (the kept, not-final rows are read past once, not again
per batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Table, and_, delete, func, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from dbkit.connections import begin, connect
from scheduler_core.model import SHADOW_NOTE, FiredState, command_id
from scheduler_core.store.rows import FINAL_RANK
from scheduler_core.store.sql import SqlTriggerStore

# rows per IN list: far below every driver's parameter limit, short statements
CHUNK = 250
MAX_BATCH = 50_000
# the pause after each transaction (and each batch's read): this many times what it took
YIELD_RATIO = 2.0


@dataclass
class PurgeProgress:
    """What a purge deleted (or, dry, would delete) so far."""

    cutoff_ms: int
    dry_run: bool
    batches: int = 0
    fired: int = 0
    run_logs: int = 0
    followup_claims: int = 0
    kill_requests: int = 0
    oldest_ms: int | None = None
    newest_ms: int | None = None
    batch_ms: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "cutoff_ms": self.cutoff_ms,
            "dry_run": self.dry_run,
            "batches": self.batches,
            "fired_records": self.fired,
            "run_logs": self.run_logs,
            "followup_claims": self.followup_claims,
            "kill_requests": self.kill_requests,
            "oldest_scheduled_ms": self.oldest_ms,
            "newest_scheduled_ms": self.newest_ms,
            "slowest_batch_ms": round(max(self.batch_ms), 1) if self.batch_ms else None,
        }


class SqlPurge:
    def __init__(self, store: SqlTriggerStore) -> None:
        self.store = store
        self.t = store.t

    def run(
        self,
        cutoff_ms: int,
        *,
        batch: int = 5000,
        biz_code: str | None = None,
        dry_run: bool = False,
        pause_s: float = 0.05,
        yield_ratio: float = YIELD_RATIO,
        chunk: int = CHUNK,
        on_batch: Callable[[PurgeProgress], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> PurgeProgress:
        """Purge every final record scheduled before `cutoff_ms` (of `biz_code` if given),
        `batch` at a time, `chunk` records to a transaction; after each transaction and
        each batch's read a pause of `yield_ratio` times what it took (so the purge takes
        at most about 1 / (1 + ratio) of the server's time however loaded it is, in slices
        of one transaction), and at least `pause_s` between batches; `on_batch` after each."""
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"batch must be 1..{MAX_BATCH}, got {batch}")
        if not 1 <= chunk <= CHUNK:
            raise ValueError(f"chunk must be 1..{CHUNK}, got {chunk}")
        progress = PurgeProgress(cutoff_ms=cutoff_ms, dry_run=dry_run)
        after: tuple[int, str] | None = None

        def paced(work: Callable[[], None]) -> float:
            started = time.perf_counter()
            work()
            took = time.perf_counter() - started
            if not dry_run:
                sleep(took * yield_ratio)
            return took

        while True:  # ends: each batch starts past the last one's keyset position
            found: list[tuple[str, int, int, int, int]] = []

            def read() -> None:
                nonlocal found, after
                with connect(self.store.engine) as conn:
                    found, after = self._next_batch(conn, cutoff_ms, biz_code, batch, after)

            took = paced(read)
            # a short transaction per chunk of records (their dependents with them): the
            # scheduler's commits never queue behind one big delete (its binlog event, its
            # locks, its undo), and each is followed by its pause
            for i in range(0, len(found), chunk):
                part = found[i : i + chunk]

                def delete_part(part: list[tuple[str, int, int, int, int]] = part) -> None:
                    with begin(self.store.engine) as conn:
                        self._delete(conn, part, progress, dry_run)

                took += paced(delete_part)
            if found:
                progress.batches += 1
                progress.batch_ms.append(took * 1000)
                if on_batch is not None:
                    on_batch(progress)
            if after is None:
                return progress
            if not dry_run:
                sleep(pause_s)

    def _next_batch(
        self, conn: Connection, cutoff_ms: int, biz_code: str | None, batch: int, after: tuple[int, str] | None
    ) -> tuple[list[tuple[str, int, int, int, int]], tuple[int, str] | None]:
        """The final records of the next `batch` rows past `after` (oldest first), and the
        keyset position to go on from (None: the cutoff is reached)."""
        fr = self.t.fired
        stmt = select(
            fr.c.command_id,
            fr.c.scheduled_at,
            fr.c.state_rank,
            fr.c.state,
            fr.c.message,
            fr.c.trigger_id,
            fr.c.item_index,
            fr.c.item_count,
        ).where(fr.c.scheduled_at < cutoff_ms)
        if biz_code is not None:
            stmt = stmt.where(fr.c.biz_code == biz_code)
        if after is not None:
            at, cid = after
            stmt = stmt.where(or_(fr.c.scheduled_at > at, and_(fr.c.scheduled_at == at, fr.c.command_id > cid)))
        rows = conn.execute(stmt.order_by(fr.c.scheduled_at, fr.c.command_id).limit(batch)).all()
        final = [
            (str(r.command_id), int(r.scheduled_at), int(r.trigger_id), int(r.item_index), int(r.item_count or 1))
            for r in rows
            if int(r.state_rank) >= FINAL_RANK or (r.state == FiredState.RECEIVED.value and r.message == SHADOW_NOTE)
        ]
        nxt = (int(rows[-1].scheduled_at), str(rows[-1].command_id)) if len(rows) == batch else None
        return final, nxt

    def _delete(
        self, conn: Connection, found: list[tuple[str, int, int, int, int]], p: PurgeProgress, dry_run: bool
    ) -> None:
        fr, rl, ff, kr = self.t.fired, self.t.run_log, self.t.followup_fired, self.t.kill_request
        ids = [f[0] for f in found]
        # a page record answers for item_count items, each with its own command id (the
        # follow-up claims and kill requests name the item)
        item_ids = [
            command_id(tid, at, i) for _cid, at, tid, first, count in found for i in range(first, first + count)
        ]
        p.oldest_ms = found[0][1] if p.oldest_ms is None else p.oldest_ms
        p.newest_ms = found[-1][1]
        for chunk in _chunks(ids):
            p.run_logs += self._count_or_delete(conn, rl, rl.c.fired_id.in_(chunk), dry_run)
        for chunk in _chunks(item_ids):
            p.followup_claims += self._count_or_delete(conn, ff, ff.c.parent_command_id.in_(chunk), dry_run)
            p.kill_requests += self._count_or_delete(conn, kr, kr.c.command_id.in_(chunk), dry_run)
        for chunk in _chunks(ids):
            # the rank again: a record is deleted only as final or shadow (it was when read;
            # ranks only move forward, so this never skips one, it only says so)
            p.fired += self._count_or_delete(conn, fr, and_(fr.c.command_id.in_(chunk), _done(fr)), dry_run)

    @staticmethod
    def _count_or_delete(conn: Connection, table: Table, where: ColumnElement[bool], dry_run: bool) -> int:
        if dry_run:
            return int(conn.execute(select(func.count()).select_from(table).where(where)).scalar_one())
        return max(0, conn.execute(delete(table).where(where)).rowcount or 0)


def _done(fr: Table) -> ColumnElement[bool]:
    """A record nothing answers any more: final, or a shadow run's."""
    return or_(
        fr.c.state_rank >= FINAL_RANK, and_(fr.c.state == FiredState.RECEIVED.value, fr.c.message == SHADOW_NOTE)
    )


def _chunks(items: Sequence[str]) -> list[Sequence[str]]:
    return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]


__all__ = ["PurgeProgress", "SqlPurge"]
