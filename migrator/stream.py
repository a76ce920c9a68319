"""Snapshot, then stream: keep a business's target in step with its legacy tables.

The first run reads every legacy row inside a consistent-snapshot transaction (the
binlog position that goes with it is exact on MariaDB), applies it through the ordinary
idempotent migration, and records the position. From then on each committed legacy
transaction is applied in ONE target transaction together with the checkpoint just past
it, so a restart (or a kill -9) resumes exactly after the last applied change: nothing
lost, nothing applied twice.

A change is applied from its row image: the binlog's after-image is FULL (the stream's
preflight insists on binlog_row_image=FULL and binlog_row_metadata=FULL), so the row is
decoded by the reader's own mapping (`image_decoder`, via `readers.images`) exactly as a
read of that row would be, and mapped as a migration run maps it, with no read of the
legacy database per change. Of several changes to one row in a group, the last image
wins (each transaction's images are complete rows, in commit order). A reader without
an image decoder falls back to re-reading the changed rows by key. Idempotent by
construction (ledger + content hash): a replayed change maps to the content the target
already has and writes nothing; an image whose content digest equals the ledger's is
recognised as unchanged without mapping. Businesses already cut over take definition
edits only (their triggers' states are the new side's own); the switch's own stops of
legacy jobs are told from an operator's by their holds (migrator.holds).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dbkit.connections import begin, connect
from migrator.apply import AfterCommit, Migrator
from migrator.ledger_hash import context_digest, dialect_context, source_half
from migrator.model import Action, BusinessState, LedgerStatus
from migrator.refused_rows import in_place, value_refused, write_or_quarantine
from migrator.target import TargetWriter, Write
from readers.images import ImageShapeChanged
from readers.ports import ImageDecoder, ImageDigester, ImageDigestReader, LegacyReader, RowImageReader
from readers.records import (
    ChangeBatch,
    ChangeOp,
    ContentDigest,
    LegacyBusiness,
    LegacyDefinition,
    RowChange,
    SourceSystem,
    StreamPosition,
)
from readers.streams.polling import PollingChangeStream

log = logging.getLogger(__name__)

# the table whose rows are definitions, per source, and its key column
DEFINITION_TABLE = {SourceSystem.XXL_JOB: "xxl_job_info", SourceSystem.BATCH_CENTER: "bc_task"}
BUSINESS_TABLE = {SourceSystem.XXL_JOB: "xxl_job_group", SourceSystem.BATCH_CENTER: "bc_biz"}


@dataclass
class StreamStats:
    batches: int = 0
    changes: int = 0
    applied: int = 0
    unchanged: int = 0  # images whose content the ledger already held: neither mapped nor written
    cut_over_edits: int = 0  # changes of businesses cut over: definitions applied, trigger states kept
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
    biz_codes: Collection[str] | None = None
    after_commit: AfterCommit | None = None
    stats: StreamStats = field(default_factory=StreamStats)
    _legacy_businesses: dict[str, LegacyBusiness] | None = field(default=None, repr=False)
    _states: dict[str, BusinessState] = field(default_factory=dict, repr=False)
    _decoder: ImageDecoder | None = field(default=None, repr=False)
    _digester: ImageDigester | None = field(default=None, repr=False)
    _old_shapes: set[frozenset[str]] = field(default_factory=set, repr=False)  # image shapes older than the table

    def checkpoint(self) -> StreamPosition | None:
        return self.writer.checkpoint(self.stream_id)

    def snapshot(self, snapshot_reader: LegacyReader, position: StreamPosition) -> None:
        """A full migration through a reader bound to the snapshot transaction, then the
        position. A crash before the position is written redoes the snapshot: idempotent."""
        snap = Migrator(snapshot_reader, self.writer, self.migrator.clock, self.migrator.options, self.migrator.chunk)
        summary = snap.run(self.biz_codes, after_commit=self.after_commit)
        self.stats.snapshot_rows = sum(summary.counts.values())
        self.writer.apply([], checkpoint=(self.stream_id, position))
        self.stats.position = position
        log.info("snapshot applied (%s rows) at %s:%s", self.stats.snapshot_rows, position.log_file, position.log_pos)

    def follow(
        self, batches: Iterator[ChangeBatch], stop: threading.Event | None = None, max_group: int = 200
    ) -> StreamStats:
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
        self._drain(q, max_group)
        return self.stats

    def _drain(self, q: queue.Queue[ChangeBatch | BaseException | None], max_group: int = 200) -> None:
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

    def apply(self, batch: ChangeBatch) -> None:
        self.apply_group([batch])

    def apply_group(self, group: Sequence[ChangeBatch]) -> None:
        """Committed legacy transactions, applied in one target transaction with the
        checkpoint just past the last of them."""
        source = self.reader.system
        table = DEFINITION_TABLE[source]
        changes = [ch for batch in group for ch in batch.changes]
        batch = group[-1]
        refresh = any(ch.table == BUSINESS_TABLE[source] for ch in changes)
        if refresh:  # a business's callback base, token, executors or name changed: decode with the new ones
            self._legacy_businesses = None
            self._decoder = None
            self._digester = None
        latest: dict[str, RowChange | None] = {}  # source key -> its last change (None: gone)
        for ch in changes:
            if ch.table != table:
                continue
            before = _key(ch.before)
            after = _key(ch.after)
            if before is not None and before != after:  # deleted, or its key changed
                latest.pop(before, None)
                latest[before] = None
            if after is not None:
                latest.pop(after, None)
                latest[after] = ch
        unchanged = self.stats.unchanged
        try:
            writes = self._apply_in_one(latest, refresh, batch.position, whole=True)
        except Exception as exc:
            if value_refused(exc) is None:
                raise
            # a row of the group the store cannot hold (migrator.refused_rows): the group
            # again, still in one transaction, its writes behind savepoints, so the row is
            # quarantined and the stream goes on instead of stalling on it for ever
            self.stats.unchanged = unchanged  # counted again by the second pass
            writes = self._apply_in_one(latest, refresh, batch.position, whole=False)
        if refresh:
            self.stats.business_refreshes += 1
        for w in writes:
            if w.note is not None:  # e.g. an operator's action on legacy after cutover: reported, not applied
                log.warning("change stream: %s", w.note)
                if len(self.stats.notes) < 1000:
                    self.stats.notes.append(w.note)
        if self.after_commit is not None and writes:
            self.after_commit(writes)
        self.stats.batches += len(group)
        self.stats.changes += len(changes)
        self.stats.applied += sum(1 for w in writes if w.action is not Action.UNCHANGED)
        self.stats.position = batch.position

    def _apply_in_one(
        self, latest: dict[str, RowChange | None], refresh: bool, position: StreamPosition, *, whole: bool
    ) -> list[Write]:
        """One target transaction for the whole group: its reads (ledger, business states)
        and its writes see one state, and the checkpoint commits with them. `whole`: the
        writes in one piece; else each piece behind a savepoint, a refused row quarantined.
        Returns the writes as applied."""
        checkpoint = (self.stream_id, position)
        with begin(self.writer.own.engine) as conn:
            self._states = self.writer.business_states(conn)
            writes = self._writes(latest, conn)
            if refresh:
                writes += self._refresh_businesses(writes, conn)
            if whole:
                self.writer.apply(writes, checkpoint=checkpoint, conn=conn)
                return writes

            def in_savepoint(piece: Sequence[Write], _rendered: object) -> int:
                with conn.begin_nested():  # a refused piece rolls back alone
                    return self.writer.apply(piece, conn=conn)

            _, refused = write_or_quarantine(in_savepoint, writes, None)
            self.writer.write_checkpoint(conn, *checkpoint, len(writes))
            return in_place(writes, refused)

    def _writes(self, latest: dict[str, RowChange | None], conn: Connection) -> list[Write]:
        if not latest:
            return []
        source = self.reader.system.value
        found: list[LegacyDefinition] = []
        reread: list[str] = []
        gone: list[str] = []
        unchanged = self._unchanged(latest, conn)
        for key, ch in latest.items():
            if key in unchanged:
                continue
            if ch is None:
                gone.append(key)
                continue
            defn = None if ch.op is ChangeOp.DELETE or ch.after is None else self._decode(ch.after)
            if defn is None:
                reread.append(key)
            else:
                found.append(defn)
        if reread:
            by_key = self.reader.definitions_by_keys(reread)
            found += [by_key[k] for k in reread if k in by_key]
            gone += [k for k in reread if k not in by_key]
        legacy_biz = self._businesses() if found else {}
        writes = [w for w in self.migrator.decide(found, legacy_biz, conn, self._states) if self._wanted(w.biz_code)]
        ledger = self.writer.ledger(source, gone, conn)
        writes += [
            Write(action=Action.DELETE, source=source, source_key=k, biz_code=_biz_of_code(entry.job_code))
            for k, entry in ledger.items()
            if entry.status is LedgerStatus.MIGRATED and self._wanted(_biz_of_code(entry.job_code))
        ]
        return [w for w in writes if not w.noop]

    def _unchanged(self, latest: dict[str, RowChange | None], conn: Connection) -> set[str]:
        """Keys whose after-image carries content the ledger already holds (migrated, same
        source digest in the same context, legacy flag set): nothing to map or write. Most
        of a legacy binlog is the scheduler's own bookkeeping (a recurring task's next fire
        time and version, columns outside the digest), so this is the common case; it
        costs one row digest per image and one ledger read per group."""
        digest_of = self._image_digester()
        if digest_of is None:
            return set()
        digests: dict[str, ContentDigest] = {}
        for key, ch in latest.items():
            if ch is None or ch.op is ChangeOp.DELETE or ch.after is None:
                continue
            try:
                cd = digest_of(ch.after)
            except ImageShapeChanged:  # DDL: the full path reloads the reader's schema
                continue
            if cd is not None and not cd.flag_pending and cd.source_key == key:
                digests[key] = cd
        if not digests:
            return set()
        source = self.reader.system.value
        ledger = self.writer.ledger(source, list(digests), conn)
        legacy_biz = self._businesses()
        options = self.migrator.options
        same = set()
        for key, cd in digests.items():
            entry = ledger.get(key)
            if (
                entry is not None
                and entry.status is LedgerStatus.MIGRATED
                and source_half(entry.content_hash)
                == context_digest(
                    cd.digest,
                    source,
                    cd.biz_code,
                    cd.time_zone,
                    legacy_biz.get(cd.biz_code),
                    options,
                    broadcast=cd.broadcast,
                    cron_dialect=dialect_context(cd.cron_dialect, cd.cron_dialect_fallback),
                )
            ):
                same.add(key)
        self.stats.unchanged += len(same)
        return same

    def _image_digester(self) -> ImageDigester | None:
        if self._digester is None and isinstance(self.reader, ImageDigestReader):
            self._digester = self.reader.image_digester()
        return self._digester

    def _decode(self, image: dict[str, object]) -> LegacyDefinition | None:
        """The definition in a row image; None: read the row by key instead (a reader
        without a decoder, or an image of a table shape older than the table now)."""
        decode = self._image_decoder()
        if decode is None:
            return None
        try:
            return decode(image)
        except ImageShapeChanged:
            shape = frozenset(image)
            if shape in self._old_shapes:
                return None
        # DDL on the definition table since the reader inspected it: inspect again (the
        # columns, and for xxl-job the lineage) and decode with the new shape
        log.warning(
            "change stream: %s columns changed (DDL); reloading the reader's schema",
            DEFINITION_TABLE[self.reader.system],
        )
        assert isinstance(self.reader, RowImageReader)
        self.reader.reload_schema()
        self._decoder = None
        self._digester = None
        decode = self._image_decoder()
        assert decode is not None
        try:
            return decode(image)
        except ImageShapeChanged:
            # an image written before a later DDL (the stream is behind): the row as it is
            # now, read by key, is what the target converges to
            self._old_shapes.add(shape)
            return None

    def _image_decoder(self) -> ImageDecoder | None:
        # the cached decoder first: isinstance against a runtime-checkable Protocol costs
        # more than decoding a row, and this is asked once per changed row
        if self._decoder is None and isinstance(self.reader, RowImageReader):
            self._decoder = self.reader.image_decoder()
        return self._decoder

    def _refresh_businesses(self, already: Sequence[Write], conn: Connection) -> list[Write]:
        done = {w.source_key for w in already}
        defs = [
            d
            for d in self.reader.definitions(list(self.biz_codes) if self.biz_codes else None)
            if d.source_key not in done
        ]
        return [
            w
            for w in self.migrator.decide(defs, self._businesses(), conn, self._states)
            if not w.noop and self._wanted(w.biz_code)
        ]

    def _businesses(self) -> dict[str, LegacyBusiness]:
        # read once, and again only after a change to the business table went by
        if self._legacy_businesses is None:
            self._legacy_businesses = {b.biz_code: b for b in self.reader.businesses()}
        return self._legacy_businesses

    def _wanted(self, biz_code: str) -> bool:
        if self.biz_codes is not None and biz_code not in self.biz_codes:
            return False
        # A business cut over still takes definition edits made in the legacy admin (a
        # cron, a parameter), as `migrate run` does; TargetWriter never changes its
        # triggers' states, and the switch's own stops are held (migrator.holds). The
        # states are read once per applied group, in its transaction.
        if self._states.get(biz_code, BusinessState.LEGACY) is BusinessState.CUTOVER:
            self.stats.cut_over_edits += 1
        return True


def _key(image: dict[str, object] | None) -> str | None:
    if image is None or image.get("id") is None:
        return None
    return str(image["id"])


def _biz_of_code(job_code: str | None) -> str:
    # job codes are "<source prefix>:<business>:<key>" (migrator.mapping.job_code_of)
    if not job_code or job_code.count(":") < 2:
        return ""
    return job_code.split(":", 2)[1]


StreamFactory = Callable[[StreamPosition], Iterator[ChangeBatch]]


@dataclass
class KeyCompare:
    """The polling stream's delete detection: polling sees rows, never their absence, so
    the keys the ledger holds as migrated for the source are compared with the legacy
    table's, `keys_per_pass` of them every `every_s` seconds (bounded work per pass: one
    ledger page and one legacy `IN` list), round-robin by key. A delete is seen within
    about ceil(migrated keys / keys_per_pass) x every_s."""

    every_s: float = 10.0
    keys_per_pass: int = 1000
    _cursor: str = field(default="", repr=False)
    passes: int = 0
    rounds: int = 0
    compared: int = 0

    def next_keys(self, writer: TargetWriter, source: SourceSystem) -> list[str]:
        """The next page of migrated keys after the cursor; a short page ends a round and
        the next pass starts again from the first key."""
        lg = writer.own.t.ledger
        with connect(writer.own.engine) as conn:
            keys = [
                str(k)
                for (k,) in conn.execute(
                    select(lg.c.source_key)
                    .where(
                        lg.c.source_system == source.value,
                        lg.c.status == LedgerStatus.MIGRATED.value,
                        lg.c.source_key > self._cursor,
                    )
                    .order_by(lg.c.source_key)
                    .limit(self.keys_per_pass)
                )
            ]
        self._cursor = keys[-1] if len(keys) >= self.keys_per_pass else ""
        self.passes += 1
        self.compared += len(keys)
        if not self._cursor:
            self.rounds += 1
            if self.rounds == 1:  # once: how late a delete can be seen, from the first full round
                log.info(
                    "key compare: first round done (%d migrated keys in %d passes); a delete is seen "
                    "within about %.0f s",
                    self.compared,
                    self.passes,
                    self.passes * self.every_s,
                )
        return keys


def polling_batches(
    poller: PollingChangeStream,
    writer: TargetWriter,
    source: SourceSystem,
    stop: threading.Event,
    *,
    interval_s: float,
    compare: KeyCompare,
    start: StreamPosition | None = None,
) -> Iterator[ChangeBatch]:
    """The polling stream's batches, with the deletes a key compare finds between them
    (a batch of DELETEs at the poller's position: its checkpoint is the one already
    reached, so a restart polls from the same place and compares again)."""
    last_compare = time.monotonic()
    while not stop.is_set():
        for batch in poller.poll():
            yield batch
            if stop.is_set():
                return
        if time.monotonic() - last_compare >= compare.every_s:
            last_compare = time.monotonic()
            keys = [(int(k),) for k in compare.next_keys(writer, source) if k.isdigit()]
            gone = poller.full_compare(keys) if keys else []
            if gone:
                position = poller.position or start or StreamPosition("poll", 0)
                log.info("key compare: %d key(s) gone from %s", len(gone), DEFINITION_TABLE[source])
                yield ChangeBatch(changes=tuple(gone), position=position)
        if stop.wait(interval_s):
            return
