"""Plan and run a migration, per business, idempotently.

A plan maps every legacy definition and compares its content hash with the ledger:
create, update, unchanged, quarantine (with field and reason), or delete (a ledger row
whose source row is gone). `run` writes the same decisions chunk by chunk, each chunk in
one transaction with its ledger rows, so a re-run writes nothing for unchanged rows and
bad rows never stop the rest.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dbkit import fastpath
from dbkit.connections import connect
from dbkit.fastpath import driver_tuples
from migrator.holds import LegacyHolds
from migrator.ledger_hash import (
    HALF,
    combined,
    context_digest,
    dialect_context,
    mapped_half,
    source_digest,
    source_half,
)
from migrator.mapping import Mapped, MappingOptions, Rejection, business_of, map_definition, with_lane
from migrator.model import Action, BusinessState, LedgerStatus, MigrationSummary, PlannedRow
from migrator.prefetch import prefetch
from migrator.refused_rows import Refused, in_place, write_or_quarantine
from migrator.target import Rendered, TargetWriter, Write
from readers.ports import LegacyReader
from readers.records import LegacyBusiness, LegacyDefinition
from scheduler_core.model import Lane, TriggerState
from scheduler_core.ports import Clock

CHUNK = 1000
DELETE_SCAN_PAGE = 10_000  # ledger keys per read of the deleted-row scan
AfterCommit = Callable[[Sequence[Write]], None]
_T = TypeVar("_T")  # what _chunks groups: definitions, or their content digests


@dataclass
class Migrator:
    reader: LegacyReader
    writer: TargetWriter
    clock: Clock
    options: MappingOptions = MappingOptions()
    chunk: int = CHUNK

    def plan(self, biz_codes: Collection[str] | None = None, *, keep_rows: bool = True) -> MigrationSummary:
        return self._go(biz_codes, write=False, keep_rows=keep_rows)

    def run(
        self,
        biz_codes: Collection[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        after_commit: AfterCommit | None = None,
        keep_rows: bool = False,
    ) -> MigrationSummary:
        return self._go(biz_codes, write=True, keep_rows=keep_rows, progress=progress, after_commit=after_commit)

    # -- internals --------------------------------------------------------------------

    def decide(
        self,
        defs: Sequence[LegacyDefinition],
        legacy_businesses: dict[str, LegacyBusiness],
        conn: Connection | None = None,
        states: Mapping[str, BusinessState] | None = None,
        recheck: Callable[[Collection[str]], Mapping[str, LegacyDefinition]] | None = None,
    ) -> list[Write]:
        """The writes for one chunk of definitions (no I/O but the ledger read and the
        business states, on `conn` when given: the caller's transaction; `states`: the
        business states already read, absent ones are legacy; `recheck`: the legacy rows
        as they are now, by key, for a snapshot's stopped rows, see below)."""
        if not defs:
            return []
        source = defs[0].source.value
        ledger = self.writer.ledger(source, [d.source_key for d in defs], conn)
        now = self.clock.now()
        known = states is not None
        states = dict(states or {})
        # stopped legacy rows that Switchyard stopped itself (a cutover): not an operator's
        # stop, so never mirrored onto the new side (migrator.holds)
        stopped = [d.source_key for d in defs if not d.enabled]
        held = self.holds.held(source, stopped, conn) if stopped else set()
        digests = {d.source_key: source_digest(d, legacy_businesses.get(d.biz_code), self.options) for d in defs}

        def unchanged(key: str) -> bool:
            entry, digest = ledger.get(key), digests[key]
            return bool(
                digest
                and entry is not None
                and entry.status is LedgerStatus.MIGRATED
                and source_half(entry.content_hash) == digest
            )

        if recheck is not None:
            # A snapshot read a row stopped, and its hold after that: a rollback in between
            # (it restarts the legacy jobs, then drops their holds) makes the switch's own
            # stop look like an operator's, which would pause the trigger. A stopped row
            # with no hold that is running now was the switch's stop: the row as it is now
            # is what the operator left. Only rows that would be mapped are read again, and
            # only migrated ones (the switch never stopped a row it had not migrated).
            suspects = [k for k in stopped if k not in held and k in ledger and not unchanged(k)]
            if suspects:
                held |= {k for k, now in recheck(suspects).items() if now.enabled}
        out: list[Write] = []
        lanes: dict[str, Lane] = {}
        for d in defs:
            biz = business_of(d, self.options)
            # every write of this row names the same row: only its decision differs
            row_write = partial(Write, source=source, source_key=d.source_key, biz_code=biz)
            entry = ledger.get(d.source_key)
            digest = digests[d.source_key]
            if unchanged(d.source_key):
                assert entry is not None
                # the same legacy content in the same context: the target already holds its
                # mapping, so it is not mapped again (the cheap path of an unchanged re-run)
                out.append(
                    row_write(
                        action=Action.UNCHANGED,
                        noop=True,
                        content_hash=entry.content_hash,
                        flag_pending=d.migrated_flag is False,
                    )
                )
                continue
            if biz not in states:
                states[biz] = BusinessState.LEGACY if known else self.writer.business_state(biz, conn)
            active = states[biz] is not BusinessState.LEGACY
            own_stop = d.source_key in held
            result = map_definition(
                replace(d, enabled=True) if own_stop else d,
                legacy_businesses.get(d.biz_code),
                now,
                self.options,
                active=active,
            )
            if isinstance(result, Mapped):
                # the business's default lane: a target-side choice, not legacy content (not
                # in the content hash: a business's new default changes no migrated job)
                if biz not in lanes:
                    lanes[biz] = self.writer.default_lane(biz, conn)
                result = with_lane(result, lanes[biz])
            if isinstance(result, Rejection):
                qhash = quarantine_hash(result, d)
                same = (
                    entry is not None and entry.status is LedgerStatus.QUARANTINED and _same(entry.content_hash, qhash)
                )
                out.append(
                    row_write(
                        action=Action.QUARANTINE,
                        field=result.field,
                        reason=result.reason,
                        raw=dict(d.raw),
                        content_hash=combined(digest, qhash),
                        noop=same,
                    )
                )
                continue
            assert isinstance(result, Mapped)
            h = combined(digest, result.content_hash)
            fresh = entry is None or entry.status is not LedgerStatus.MIGRATED
            note = (
                None
                if not fresh and entry is not None and _same(entry.content_hash, result.content_hash)
                else _cutover_note(d, biz, states[biz], Action.CREATE if fresh else Action.UPDATE, result)
            )
            if fresh:
                # raw: the excerpt of the quarantine the row becomes if the store refuses it (migrator.refused_rows)
                out.append(row_write(action=Action.CREATE, mapped=result, content_hash=h, note=note, raw=d.raw))
                continue
            assert entry is not None  # not fresh: a migrated ledger row
            if _same(entry.content_hash, result.content_hash):
                # mapped the same: the target is right. When only the digest moved (a column
                # outside the mapping changed, the mapping code changed, an old ledger row)
                # the ledger row alone takes the new digest, else every later run would map
                # this row again: a one-off ledger write, never a target write. Not for a
                # row stopped by the switch: its digest is the stop's, and the row as the
                # operator left it must still differ from the ledger once the hold is gone
                refresh = bool(digest) and source_half(entry.content_hash) != digest and not own_stop
                out.append(
                    row_write(
                        action=Action.UNCHANGED,
                        mapped=result,
                        noop=not refresh,
                        content_hash=h if refresh else entry.content_hash,
                        flag_pending=d.migrated_flag is False,
                        note=note,
                    )
                )
            else:
                out.append(row_write(action=Action.UPDATE, mapped=result, content_hash=h, note=note, raw=d.raw))
        return out

    def _go(
        self,
        biz_codes: Collection[str] | None,
        *,
        write: bool,
        keep_rows: bool,
        progress: Callable[[int], None] | None = None,
        after_commit: AfterCommit | None = None,
    ) -> MigrationSummary:
        started = time.perf_counter()
        summary = MigrationSummary(biz_code=",".join(sorted(biz_codes)) if biz_codes else None)
        legacy_biz = {b.biz_code: b for b in self.reader.businesses()}
        wanted = None if biz_codes is None else set(biz_codes)
        # the reader filters by legacy business code; the mapping may rename businesses
        legacy_filter = (
            None
            if wanted is None
            else [code for code in legacy_biz if self.options.business_map.get(code, code) in wanted] or list(wanted)
        )
        seen: set[str] = set()
        source = self.reader.system.value

        def decided() -> Iterator[tuple[list[Write], list[Write], Rendered | None]]:
            # reading, mapping, the summary's counts and (for a run) rendering the rows to
            # write: all on one thread
            for defs in self._to_decide(legacy_filter, legacy_biz, summary, seen, progress):
                writes = self.decide(defs, legacy_biz, recheck=self.reader.definitions_by_keys)
                self._record(summary, writes, keep_rows)
                changing = [w for w in writes if not w.noop]
                yield writes, changing, self.writer.render(changing) if write and changing else None

        # rows the store refused to hold, quarantined in their place: the summary takes them
        # once the loop is over (the summary is the deciding thread's while it runs)
        refused: list[Refused] = []
        # a run prepares the next chunk while the current one is written (see prefetch)
        for writes, changing, rendered in prefetch(decided()) if write else decided():
            if write:
                if changing:
                    written, refused_here = write_or_quarantine(
                        lambda ws, r: self.writer.apply(ws, rendered=r), changing, rendered
                    )
                    summary.rows_written += written
                    if refused_here:
                        refused += refused_here
                        writes = in_place(writes, refused_here)
                # after the commit: what changed, and unchanged rows whose legacy flag an
                # earlier run failed to set after its commit
                done = [w for w in writes if not w.noop or w.flag_pending]
                if done and after_commit is not None:
                    after_commit(done)
        _quarantined_instead(summary, refused)
        # a full pass: ledger rows whose source row is gone become deletes
        deletes = self._deleted(source, wanted, seen)
        self._record(summary, deletes, keep_rows)
        if write and deletes:
            summary.rows_written += self.writer.apply(deletes)
        summary.seconds = time.perf_counter() - started
        return summary

    def _to_decide(
        self,
        legacy_filter: list[str] | None,
        legacy_biz: dict[str, LegacyBusiness],
        summary: MigrationSummary,
        seen: set[str],
        progress: Callable[[int], None] | None,
    ) -> Iterator[list[LegacyDefinition]]:
        """Chunks of definitions to decide. When the legacy server computes the content
        digests itself, rows whose digest the ledger already holds are counted here from
        one short hash each (unchanged, or still quarantined with the field and reason the
        ledger keeps), and only the others are read and mapped."""
        source = self.reader.system.value
        digests = getattr(self.reader, "content_digests", None)
        # a first run (nothing migrated yet) has nothing to skip: the plain scan reads each
        # row once, instead of its digest and then the row by key
        if digests is not None and not self.writer.has_migrated(source):
            digests = None
        pages = digests(legacy_filter) if digests is not None else None
        if pages is None:
            for defs in _chunks(self.reader.definitions(legacy_filter), self.chunk):
                seen.update(d.source_key for d in defs)
                yield defs
                if progress is not None:
                    progress(len(defs))
            return
        for page in _chunks(pages, self.chunk):
            seen.update(p.source_key for p in page)
            ledger = self.writer.ledger_digests(source, [p.source_key for p in page])
            other: list[str] = []
            for p in page:
                entry = ledger.get(p.source_key)
                same = entry is not None and entry.source_half == context_digest(
                    p.digest,
                    source,
                    p.biz_code,
                    p.time_zone,
                    legacy_biz.get(p.biz_code),
                    self.options,
                    broadcast=p.broadcast,
                    cron_dialect=dialect_context(p.cron_dialect, p.cron_dialect_fallback),
                )
                biz = self.options.business_map.get(p.biz_code, p.biz_code)
                if same and entry is not None and entry.status is LedgerStatus.MIGRATED and not p.flag_pending:
                    summary.counts[Action.UNCHANGED.value] += 1  # as summary.add counts a row it does not keep
                elif same and entry is not None and entry.status is LedgerStatus.QUARANTINED and entry.field:
                    # the same content in the same context, mapped by the same mapping code
                    # (its fingerprint is in the digest), is rejected the same way again:
                    # ~15% of a real table, which a re-run would otherwise read and map every time
                    summary.add(
                        PlannedRow(
                            source=source,
                            source_key=p.source_key,
                            biz_code=biz,
                            action=Action.QUARANTINE,
                            field=entry.field,
                            reason=entry.reason,
                        ),
                        keep=True,
                    )
                else:
                    other.append(p.source_key)
            if other:
                by_key = self.reader.definitions_by_keys(other)
                yield [by_key[k] for k in other if k in by_key]  # a row deleted meanwhile: the next run sees it
            if progress is not None:
                progress(len(page))

    def _deleted(self, source: str | None, wanted: set[str] | None, seen: set[str]) -> list[Write]:
        """Ledger rows whose source row is gone (operators delete rows by hand)."""
        lg = self.writer.own.t.ledger
        src = source or self.reader.system.value
        stmt = select(lg.c.source_key, lg.c.business).where(
            lg.c.status == LedgerStatus.MIGRATED.value, lg.c.source_system == src
        )
        if wanted is not None:
            stmt = stmt.where(lg.c.business.in_(sorted(wanted)))
        with connect(self.writer.own.engine) as conn:
            if fastpath.fast(conn):
                return self._deleted_on_driver(conn, src, wanted, seen)
            return [
                Write(action=Action.DELETE, source=src, source_key=k, biz_code=b)
                for k, b in conn.execute(stmt)
                if k not in seen
            ]

    def _deleted_on_driver(self, conn: Connection, src: str, wanted: set[str] | None, seen: set[str]) -> list[Write]:
        """`_deleted` on PyMySQL: every migrated row of the source, at the end of every
        run, in pages by key as driver tuples (Core's Row objects, all held at once, cost
        a second and a few hundred MB per million rows; an unbuffered cursor's per-row
        fetch half the scan)."""
        lg = self.writer.own.t.ledger
        q = conn.dialect.identifier_preparer.quote
        if wanted is not None and not wanted:
            return []
        # the primary key's order, also with a business filter (its index would sort every page)
        sql = (
            f"SELECT {q('source_key')}, {q('business')} FROM {q(lg.name)} FORCE INDEX (PRIMARY) "
            f"WHERE {q('source_system')} = %s AND {q('status')} = %s"
        )
        args: list[object] = [src, LedgerStatus.MIGRATED.value]
        if wanted is not None:
            sql += f" AND {q('business')} IN ({', '.join(['%s'] * len(wanted))})"
            args += sorted(wanted)
        # keyset pages on the primary key (source_system, source_key): its collation
        # orders and compares the keys, so no key is skipped or read twice
        page = f" ORDER BY {q('source_key')} LIMIT {DELETE_SCAN_PAGE}"
        first, rest = f"{sql} AND {q('source_key')} >= %s{page}", f"{sql} AND {q('source_key')} > %s{page}"
        out: list[Write] = []
        sql, after = first, ""  # the first page from the smallest key (an empty one included)
        while True:  # ends: every page starts past the last key of the one before
            rows = driver_tuples(conn, sql, (*args, after))
            out += [Write(action=Action.DELETE, source=src, source_key=k, biz_code=b) for k, b in rows if k not in seen]
            if len(rows) < DELETE_SCAN_PAGE:
                return out
            sql, after = rest, rows[-1][0]

    @property
    def holds(self) -> LegacyHolds:
        return LegacyHolds(self.writer.own)

    @staticmethod
    def _record(summary: MigrationSummary, writes: Iterable[Write], keep_rows: bool) -> None:
        counts = summary.counts
        for w in writes:
            if w.note is not None:
                summary.notes.append(w.note)
            action = w.action
            if action is Action.QUARANTINE or (keep_rows and action is not Action.UNCHANGED):
                summary.add(
                    PlannedRow(
                        source=w.source,
                        source_key=w.source_key,
                        biz_code=w.biz_code,
                        action=action,
                        job_code=w.mapped.job.job_code if w.mapped else None,
                        field=w.field,
                        reason=w.reason,
                    ),
                    keep=True,
                )
            else:
                # a row the summary only counts (what `add` does with it): no PlannedRow
                counts[action.value] += 1


def _quarantined_instead(summary: MigrationSummary, refused: Sequence[Refused]) -> None:
    """The summary's counts and rows with each refused write a quarantine instead."""
    if not refused:
        return
    keys = {x.write.source_key for x in refused}
    summary.rows = [r for r in summary.rows if r.source_key not in keys or r.action is Action.QUARANTINE]
    for x in refused:
        summary.counts[x.write.action.value] -= 1
        q = x.quarantine
        summary.add(
            PlannedRow(
                source=q.source,
                source_key=q.source_key,
                biz_code=q.biz_code,
                action=Action.QUARANTINE,
                field=q.field,
                reason=q.reason,
            ),
            keep=True,
        )


_QUARANTINE_JSON = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(..., ensure_ascii=False)'s text


def quarantine_hash(rejection: Rejection, defn: LegacyDefinition) -> str:
    body = [rejection.field, rejection.reason, sorted((k, repr(v)) for k, v in defn.raw.items())]
    return hashlib.sha256(_QUARANTINE_JSON(body).encode()).hexdigest()


def _cutover_note(d: LegacyDefinition, biz: str, state: BusinessState, action: Action, result: Mapped) -> str | None:
    """What an operator did in the legacy admin to a job of a business already cut over:
    reported, never applied to the new side (TargetWriter keeps a cut-over trigger's
    state). Only a row whose mapping changed says something new; a job switched back on
    over the switch's own stop maps the same, and `status --check` finds it live on both."""
    if state is not BusinessState.CUTOVER or result.trigger is None:
        return None
    who = f"{d.source.value} job {d.source_key} (business {biz}, cut over)"
    if action is Action.CREATE and d.enabled:
        return (
            f"{who} is new on legacy and switched on there: it fires on BOTH sides; stop it in the legacy "
            "admin (the new side fires it)"
        )
    if action is Action.UPDATE and result.trigger.state is not TriggerState.WAITING:
        return (
            f"{who} was made {d.status or 'stopped'} in the legacy admin after the cutover: not applied, "
            "the new side keeps firing it (`switchyard trigger pause|cancel --reason` if that was meant)"
        )
    return None


def _same(stored: str, full_hash: str) -> bool:
    """The stored ledger hash holds this mapped (or quarantine) hash: in its second half,
    or, written before the two-half format, as the whole of it."""
    return stored == full_hash or (len(stored) == 2 * HALF and mapped_half(stored) == full_hash[:HALF])


def _chunks(it: Iterable[_T], size: int) -> Iterator[list[_T]]:
    buf: list[_T] = []
    for d in it:
        buf.append(d)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf
