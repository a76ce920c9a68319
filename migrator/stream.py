"""Snapshot, then stream: keep a business's target in step with its legacy tables.

The first run reads every legacy row inside a consistent-snapshot transaction (the
binlog position that goes with it is exact on MariaDB), applies it through the ordinary
idempotent migration, and records the position. From then on each committed legacy
transaction is applied in ONE target transaction together with the checkpoint just past
it, so a restart (or a kill -9) resumes exactly after the last applied change: nothing
lost, nothing applied twice.

A change is applied by re-reading the changed rows from the legacy database (by key)
and mapping them as a migration run would: the binlog says *which* rows changed, the
reader decides *what* they are. That keeps one decoding path (the reader's), survives
DDL on the legacy tables, and is idempotent by construction (ledger + content hash): a
replayed change maps to the content the target already has and writes nothing.
Businesses already cut over are left alone: their legacy rows no longer drive anything.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

from migrator.apply import AfterCommit, Migrator

from migrator.model import Action, BusinessState, LedgerStatus
from migrator.target import TargetWriter, Write
from readers.ports import LegacyReader
from readers.records import ChangeBatch, LegacyBusiness, LegacyDefinition, SourceSystem, StreamPosition

log = logging.getLogger(__name__)

# the table whose rows are definitions, per source, and its key column
DEFINITION_TABLE = {SourceSystem.XXL_JOB: "xxl_job_info", SourceSystem.BATCH_CENTER: "bc_task"}
BUSINESS_TABLE = {SourceSystem.XXL_JOB: "xxl_job_group", SourceSystem.BATCH_CENTER: "bc_biz"}


@dataclass
class StreamStats:
    batches: int = 0
    changes: int = 0
    applied: int = 0
    skipped_cut_over: int = 0
    position: StreamPosition | None = None
    snapshot_rows: int = 0
    business_refreshes: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class StreamMigrator:
    reader: LegacyReader
    writer: TargetWriter
    migrator: Migrator
    stream_id: str
    businesses: Collection[str] | None = None
    after_commit: AfterCommit | None = None
    stats: StreamStats = field(default_factory=StreamStats)
    _legacy_businesses: dict[str, LegacyBusiness] | None = field(default=None, repr=False)
    _states: dict[str, BusinessState] = field(default_factory=dict, repr=False)

    def checkpoint(self) -> StreamPosition | None:
        return self.writer.checkpoint(self.stream_id)

    def snapshot(self, snapshot_reader: LegacyReader, position: StreamPosition) -> None:
        """A full migration through a reader bound to the snapshot transaction, then the
        position. A crash before the position is written redoes the snapshot: idempotent."""
        snap = Migrator(snapshot_reader, self.writer, self.migrator.clock, self.migrator.options,
                        self.migrator.chunk)
        summary = snap.run(self.businesses, after_commit=self.after_commit)
        self.stats.snapshot_rows = sum(summary.counts.values())
        self.writer.apply([], checkpoint=(self.stream_id, position))
        self.stats.position = position
        log.info("snapshot applied (%s rows) at %s:%s", self.stats.snapshot_rows, position.log_file, position.log_pos)

    def follow(self, batches: Iterator[ChangeBatch], stop: threading.Event | None = None,
               max_group: int = 200) -> StreamStats:
        """Apply batches as they come. A reader thread keeps decoding while a group is
        applied; every transaction already waiting is applied in the same target
        transaction, with the checkpoint of the last one: fewer commits under load, the
        same exactly-once guarantee (the group lands whole or not at all)."""
        q: queue.Queue[ChangeBatch | BaseException | None] = queue.Queue(maxsize=max_group * 4)

        def pump() -> None:
            try:
                for batch in batches:
                    q.put(batch)
                    if stop is not None and stop.is_set():
                        break
                q.put(None)
            except BaseException as exc:  # handed to the applying thread, raised there
                q.put(exc)

        threading.Thread(target=pump, name="binlog-reader", daemon=True).start()
        done = False
        while not done:
            item = q.get()
            group: list[ChangeBatch] = []
            while True:
                if item is None:
                    done = True
                    break
                if isinstance(item, BaseException):
                    if group:
                        self.apply_group(group)
                    raise item
                group.append(item)
                if len(group) >= max_group:
                    break
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
            if group:
                self.apply_group(group)
        return self.stats

    def apply(self, batch: ChangeBatch) -> None:
        self.apply_group([batch])

    def apply_group(self, group: Sequence[ChangeBatch]) -> None:
        """Committed legacy transactions, applied in one target transaction with the
        checkpoint just past the last of them."""
        self._states.clear()
        source = self.reader.system
        table = DEFINITION_TABLE[source]
        keys: list[str] = []
        refresh = False
        changes = [ch for batch in group for ch in batch.changes]
        batch = group[-1]
        for ch in changes:
            if ch.table == table:
                row = ch.after if ch.after is not None else ch.before
                if row is not None and row.get("id") is not None:
                    keys.append(str(row["id"]))
            elif ch.table == BUSINESS_TABLE[source]:
                refresh = True  # a business's callback base, token or executors changed
                self._legacy_businesses = None
        writes = self._writes(list(dict.fromkeys(keys)))
        if refresh:
            self.stats.business_refreshes += 1
            writes += self._refresh_businesses(writes)
        self.writer.apply(writes, checkpoint=(self.stream_id, batch.position))
        if self.after_commit is not None and writes:
            self.after_commit(writes)
        self.stats.batches += len(group)
        self.stats.changes += len(changes)
        self.stats.applied += sum(1 for w in writes if w.action is not Action.UNCHANGED)
        self.stats.position = batch.position

    def _writes(self, keys: Sequence[str]) -> list[Write]:
        if not keys:
            return []
        source = self.reader.system.value
        by_key = self.reader.definitions_by_keys(keys)
        found: list[LegacyDefinition] = [by_key[k] for k in keys if k in by_key]
        gone = [k for k in keys if k not in by_key]
        legacy_biz = self._businesses() if found else {}
        writes = [w for w in self.migrator.decide(found, legacy_biz) if self._wanted(w.business)]
        ledger = self.writer.ledger(source, gone)
        writes += [Write(Action.DELETE, source, k, _biz_of_code(entry.job_code))
                   for k, entry in ledger.items()
                   if entry.status is LedgerStatus.MIGRATED and self._wanted(_biz_of_code(entry.job_code))]
        return [w for w in writes if not w.noop]

    def _refresh_businesses(self, already: Sequence[Write]) -> list[Write]:
        done = {w.source_key for w in already}
        defs = [d for d in self.reader.definitions(list(self.businesses) if self.businesses else None)
                if d.source_key not in done]
        return [w for w in self.migrator.decide(defs, self._businesses()) if not w.noop and self._wanted(w.business)]

    def _businesses(self) -> dict[str, LegacyBusiness]:
        # read once, and again only after a change to the business table went by
        if self._legacy_businesses is None:
            self._legacy_businesses = {b.biz_code: b for b in self.reader.businesses()}
        return self._legacy_businesses

    def _wanted(self, business: str) -> bool:
        if self.businesses is not None and business not in self.businesses:
            return False
        if business not in self._states:  # read once per applied transaction: a cutover may land any time
            self._states[business] = self.writer.business_state(business)
        if self._states[business] is BusinessState.CUTOVER:
            self.stats.skipped_cut_over += 1
            return False
        return True


def _biz_of_code(job_code: str | None) -> str:
    # job codes are "<source prefix>:<business>:<key>" (migrator.mapping.job_code_of)
    if not job_code or job_code.count(":") < 2:
        return ""
    return job_code.split(":", 2)[1]


StreamFactory = Callable[[StreamPosition], Iterator[ChangeBatch]]
