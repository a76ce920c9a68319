"""Read what a report shows from the store: the comparison, its history, the cutover states."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from dualrun.boundary_store import boundary_tallies
from dualrun.collect import fetch_businesses
from dualrun.errors import NoComparison
from dualrun.model import iso
from dualrun.store import DualRunStore
from dualrun.verdict_store import history, latest, latest_by_business, load_comparison
from reports.model import BusinessReport, HistoryPoint, OverviewReport, OverviewRow
from scheduler_core.times import from_ms


def load_report(
    own: DualRunStore, biz_code: str, *, now: datetime, comparison_id: int | None = None, history_limit: int = 200
) -> BusinessReport:
    """The report of one business: its latest (or a given) comparison and the stored series."""
    if comparison_id is None:
        found = latest(own, biz_code)
        if found is None:
            raise NoComparison(biz_code)
        comparison_id = found.comparison_id
    comparison = load_comparison(own, comparison_id)
    if comparison is None or comparison.biz_code != biz_code:
        raise NoComparison(biz_code)
    series = history(own, biz_code, limit=history_limit)
    state = next((b.state for b in fetch_businesses(own) if b.biz_code == biz_code), None)
    cut = last_cutover(own, biz_code)
    return BusinessReport(
        biz_code=biz_code,
        generated_at=now,
        comparison=comparison,
        comparison_id=comparison_id,
        state=state,
        history=tuple(HistoryPoint.of(c) for c in series),
        gate_stream=None if cut is None else cut["stream"],
        cutover=cut,
        verdict_max_age=own.migration.verdict_max_age(),
        boundary=tuple(t.as_dict() for t in boundary_tallies(own, biz_code).get(biz_code, [])),
    )


def last_cutover(own: DualRunStore, biz_code: str) -> dict[str, Any] | None:
    """The business's latest cutover as audited: when, who, why, whether it was forced and
    past what (the gate's refusals and the verdict it read), and the change stream's
    catch-up state the gate found (None: not checked). None: never cut over."""
    found = own.migration.last_cutover(biz_code)
    if found is None:
        return None
    at, actor, reason, forced, comparison_id, detail = found
    try:
        body = json.loads(detail or "{}")
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    stream = body.get("stream")
    at_iso = iso(from_ms(int(at)))
    overrode = body.get("overrode")
    if not isinstance(overrode, list):  # audit rows from before `overrode` was kept: the note
        overrode = [
            n.removeprefix("forced past: ") for n in body.get("notes", []) if str(n).startswith("forced past: ")
        ]
    return {
        "at": at_iso,
        "actor": actor,
        "reason": reason,
        "forced": forced,
        "comparison_id": comparison_id,
        "gate_verdict": body.get("gate_verdict"),
        "overrode": [str(x) for x in overrode],
        "warnings": [str(w) for w in body.get("warnings", [])],
        "stream": {**stream, "at": at_iso} if isinstance(stream, dict) else None,
    }


def load_overview(
    own: DualRunStore, *, now: datetime, reports_dir: Path | None = None, link_suffix: str = ".html"
) -> OverviewReport:
    """Every business with its cutover state and latest verdict; links to the per-business
    reports that exist next to the overview (`<business><suffix>`)."""
    infos = {b.biz_code: b for b in fetch_businesses(own)}
    verdicts = latest_by_business(own)
    tallies = boundary_tallies(own)
    max_age = own.migration.verdict_max_age()
    rows = []
    for code in sorted(set(infos) | set(verdicts)):
        info, v = infos.get(code), verdicts.get(code)
        link = f"{code}{link_suffix}"
        rows.append(
            OverviewRow(
                biz_code=code,
                source=info.source_system if info else None,
                state=info.state if info else None,
                shadow=bool(info and info.shadow),
                verdict=v.verdict.value if v else None,
                computed_at=v.computed_at if v else None,
                reasons=v.reasons if v else (),
                warnings=v.warnings if v else (),
                link=link if reports_dir is not None and (reports_dir / link).exists() else None,
                stale_after=max_age,
                quarantined=len(own.migration.quarantined(info.source_system, code)) if info else 0,
                boundary=tuple(t.as_dict() for t in tallies.get(code, [])),
            )
        )
    return OverviewReport(generated_at=now, rows=tuple(rows))
