"""Plan and run a migration, per business, idempotently.

A plan maps every legacy definition and compares its content hash with the ledger:
create, update, unchanged, quarantine (with field and reason), or delete (a ledger row
whose source row is gone). `run` writes the same decisions chunk by chunk, each chunk in
one transaction with its ledger rows, so a re-run writes nothing for unchanged rows and
bad rows never stop the rest.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
import hashlib
import json
from dataclasses import dataclass

from sqlalchemy import select

from migrator.mapping import Mapped, MappingOptions, Rejection, business_of, map_definition
from migrator.model import Action, BusinessState, LedgerStatus, MigrationSummary, PlannedRow
from migrator.target import TargetWriter, Write
from readers.ports import LegacyReader
from readers.records import LegacyBusiness, LegacyDefinition
from scheduler_core.ports import Clock

CHUNK = 1000
AfterCommit = Callable[[Sequence[Write]], None]


@dataclass
class Migrator:
    reader: LegacyReader
    writer: TargetWriter
    clock: Clock
    options: MappingOptions = MappingOptions()
    chunk: int = CHUNK

    def plan(self, businesses: Collection[str] | None = None, *, keep_rows: bool = True) -> MigrationSummary:
        return self._go(businesses, write=False, keep_rows=keep_rows)

    def run(
        self,
        businesses: Collection[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        after_commit: AfterCommit | None = None,
        keep_rows: bool = False,
    ) -> MigrationSummary:
        return self._go(businesses, write=True, keep_rows=keep_rows, progress=progress, after_commit=after_commit)

    # -- internals --------------------------------------------------------------------

    def decide(self, defs: Sequence[LegacyDefinition], legacy_businesses: dict[str, LegacyBusiness]) -> list[Write]:
        """The writes for one chunk of definitions (no I/O but the ledger read)."""
        if not defs:
            return []
        source = defs[0].source.value
        ledger = self.writer.ledger(source, [d.source_key for d in defs])
        now = self.clock.now()
        states: dict[str, BusinessState] = {}
        out: list[Write] = []
        for d in defs:
            biz = business_of(d, self.options)
            if biz not in states:
                states[biz] = self.writer.business_state(biz)
            active = states[biz] is not BusinessState.LEGACY
            result = map_definition(d, legacy_businesses.get(d.business), now, self.options, active=active)
            entry = ledger.get(d.source_key)
            if isinstance(result, Rejection):
                qhash = quarantine_hash(result, d)
                same = entry is not None and entry.status is LedgerStatus.QUARANTINED and entry.content_hash == qhash
                out.append(Write(Action.QUARANTINE, source, d.source_key, biz, None, result.field, result.reason,
                                 dict(d.raw), qhash, noop=same))
                continue
            assert isinstance(result, Mapped)
            if entry is None or entry.status is not LedgerStatus.MIGRATED:
                out.append(Write(Action.CREATE, source, d.source_key, biz, result))
            elif entry.content_hash == result.content_hash:
                out.append(Write(Action.UNCHANGED, source, d.source_key, biz, result, noop=True))
            else:
                out.append(Write(Action.UPDATE, source, d.source_key, biz, result))
        return out

    def _go(
        self,
        businesses: Collection[str] | None,
        *,
        write: bool,
        keep_rows: bool,
        progress: Callable[[int], None] | None = None,
        after_commit: AfterCommit | None = None,
    ) -> MigrationSummary:
        started = time.perf_counter()
        summary = MigrationSummary(business=",".join(sorted(businesses)) if businesses else None)
        legacy_biz = {b.biz_code: b for b in self.reader.businesses()}
        wanted = None if businesses is None else set(businesses)
        # the reader filters by legacy business code; the mapping may rename businesses
        legacy_filter = None if wanted is None else [
            code for code in legacy_biz if self.options.business_map.get(code, code) in wanted
        ] or list(wanted)
        seen: set[str] = set()
        source = None
        for defs in _chunks(self.reader.definitions(legacy_filter), self.chunk):
            source = defs[0].source.value
            writes = self.decide(defs, legacy_biz)
            seen.update(d.source_key for d in defs)
            self._record(summary, writes, keep_rows)
            if write:
                changing = [w for w in writes if not w.noop]
                if changing:
                    summary.rows_written += self.writer.apply(changing)
                    if after_commit is not None:
                        after_commit(changing)
            if progress is not None:
                progress(len(defs))
        # a full pass: ledger rows whose source row is gone become deletes
        deletes = self._deleted(source, wanted, seen)
        self._record(summary, deletes, keep_rows)
        if write and deletes:
            summary.rows_written += self.writer.apply(deletes)
        summary.seconds = time.perf_counter() - started
        return summary

    def _deleted(self, source: str | None, wanted: set[str] | None, seen: set[str]) -> list[Write]:
        """Ledger rows whose source row is gone (operators delete rows by hand)."""
        lg = self.writer.t.ledger
        stmt = select(lg.c.source_system, lg.c.source_key, lg.c.business).where(
            lg.c.status == LedgerStatus.MIGRATED.value)
        if source is not None:
            stmt = stmt.where(lg.c.source_system == source)
        if wanted is not None:
            stmt = stmt.where(lg.c.business.in_(sorted(wanted)))
        with self.writer.store.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        src = source or self.reader.system.value
        return [Write(Action.DELETE, s, k, b) for s, k, b in rows if k not in seen and s == src]

    @staticmethod
    def _record(summary: MigrationSummary, writes: Iterable[Write], keep_rows: bool) -> None:
        for w in writes:
            summary.add(PlannedRow(w.source, w.source_key, w.business, w.action,
                                   w.mapped.job.job_code if w.mapped else None, w.field, w.reason),
                        keep=keep_rows and w.action is not Action.UNCHANGED)


def quarantine_hash(rejection: Rejection, defn: LegacyDefinition) -> str:
    body = [rejection.field, rejection.reason, sorted((k, repr(v)) for k, v in defn.raw.items())]
    return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode()).hexdigest()


def _chunks(it: Iterable[LegacyDefinition], size: int) -> Iterator[list[LegacyDefinition]]:
    buf: list[LegacyDefinition] = []
    for d in it:
        buf.append(d)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf
