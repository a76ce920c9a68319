"""xxl-job child jobs (`child_jobid`) on the new side: after a successful run of a parent,
the admin triggers each child (XxlJobCompleter). Here each child job is mapped, through
the ledger, to the migrated trigger of that job, and the pairs become the scheduler's
on-success follow-ups (scheduler_core.followups) while the business is live on the new
side: from a live dual-run's start (the new side mirrors legacy, children included; chains
it cannot run are left to legacy there, and noted) and at the cutover; a rollback or a
shadow dual-run removes them. A child whose own schedule is NONE has a trigger with no
schedule (migrator.mapping): only a follow-up (or a hand) runs it.

At the cutover, a chain the new side cannot run refuses it and is named: a child that is not
migrated, quarantined, deleted, has no trigger (an API-only job), or belongs to another
business (it may still be on legacy, and even when it is not, one business's cutover
must not start firing another's jobs). Ids xxl-job itself skips (not a positive number,
or the job itself) are skipped here too, with a note.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import select

from dbkit.connections import connect
from migrator.model import LedgerStatus
from migrator.store import MigratorStore
from readers.records import SourceSystem
from scheduler_core.model import JobCode, TriggerId
from scheduler_core.ports import TriggerStore

if TYPE_CHECKING:
    from migrator.cutover import Link


@dataclass
class ChildChains:
    links: dict[TriggerId, list[TriggerId]] = field(default_factory=dict)  # every parent trigger -> its children
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def child_ids(value: str, parent: str) -> tuple[list[str], list[str]]:
    """The child ids xxl-job would trigger (split on ',', positive numbers only, never the
    job itself), and what it skips."""
    ids: list[str] = []
    skipped: list[str] = []
    for item in value.split(","):  # StringTool.isNumeric: digits only, no trimming
        if item.isdigit() and int(item) > 0:
            if str(int(item)) != parent:
                ids.append(str(int(item)))
        elif item.strip():
            skipped.append(item)
    return ids, skipped


def child_chains(store: TriggerStore, own: MigratorStore, biz: str, links: Sequence[Link]) -> ChildChains:
    # every parent of the business is in `links`, those without children with none: a
    # child removed since an earlier cutover is not fired any more
    out = ChildChains(links={ln.trigger.id: [] for ln in links if ln.trigger.id is not None})
    jobs = store.get_jobs([JobCode(ln.job_code) for ln in links])
    wanted: dict[str, list[str]] = {}
    for ln in links:
        job = jobs.get(JobCode(ln.job_code))
        params = _params(job.params) if job is not None else {}
        if params.get("bridge") != "xxl-job" or not params.get("child_jobs"):
            continue
        ids, skipped = child_ids(str(params["child_jobs"]), ln.source_key)
        if skipped:
            out.notes.append(f"job {ln.source_key}: child_jobid item(s) {skipped} skipped (xxl-job skips them too)")
        if ids:
            wanted[ln.source_key] = ids
    if not wanted:
        return out
    lg = own.t.ledger
    keys = sorted({c for ids in wanted.values() for c in ids})
    with connect(own.engine) as conn:
        rows = {
            r.source_key: r
            for r in conn.execute(
                select(lg.c.source_key, lg.c.business, lg.c.status, lg.c.target_job_code, lg.c.field, lg.c.reason)
                .where(lg.c.source_system == SourceSystem.XXL_JOB.value, lg.c.source_key.in_(keys))
            )
        }  # fmt: skip
    triggers = {t.job_code: t for t in store.triggers_of(biz_code=biz)}
    by_key = {ln.source_key: ln for ln in links}
    for parent_key, ids in wanted.items():
        parent = by_key[parent_key]
        for child in ids:
            why = _unrunnable(rows.get(child), biz, triggers)
            if why is not None:
                out.refusals.append(f"job {parent_key} ({parent.job_code}) -> child job {child}: {why}")
                continue
            trigger = triggers[rows[child].target_job_code]
            assert parent.trigger.id is not None and trigger.id is not None
            out.links.setdefault(parent.trigger.id, []).append(trigger.id)
    return out


def _unrunnable(row, biz: str, triggers: dict) -> str | None:  # type: ignore[no-untyped-def, type-arg]
    if row is None:
        return "not migrated (no ledger row): migrate it into this business first"
    if row.status == LedgerStatus.QUARANTINED.value:
        return f"quarantined ({row.field}: {row.reason})"
    if row.status == LedgerStatus.DELETED.value:
        return "deleted in the legacy admin: remove it from the parent's child_jobid"
    if row.business != biz:
        return (
            f"belongs to business {row.business}, not {biz}: cut over the businesses of a chain together "
            "(map them to one business) or remove the child"
        )
    if row.target_job_code not in triggers:
        return "has no trigger on the new side (an API-only job): nothing could fire it"
    return None


def _params(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
