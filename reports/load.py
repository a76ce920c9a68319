"""Read what a report shows from the store: the comparison, its history, the cutover states."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dualrun.collect import fetch_businesses
from dualrun.errors import NoComparison
from dualrun.model import iso
from dualrun.store import DualRunStore
from dualrun.verdict_store import history, latest, latest_by_business, load_comparison
from reports.model import BusinessReport, HistoryPoint, OverviewReport, OverviewRow


def load_report(
    own: DualRunStore, business: str, *, now: datetime, comparison_id: int | None = None, history_limit: int = 200
) -> BusinessReport:
    """The report of one business: its latest (or a given) comparison and the stored series."""
    if comparison_id is None:
        found = latest(own, business)
        if found is None:
            raise NoComparison(business)
        comparison_id = found.comparison_id
    comparison = load_comparison(own, comparison_id)
    if comparison is None or comparison.business != business:
        raise NoComparison(business)
    series = history(own, business, limit=history_limit)
    state = next((b.state for b in fetch_businesses(own) if b.biz_code == business), None)
    return BusinessReport(
        business=business,
        generated_at=now,
        comparison=comparison,
        comparison_id=comparison_id,
        state=state,
        history=tuple(HistoryPoint.of(c) for c in series),
        gate_stream=gate_stream(own, business),
    )


def gate_stream(own: DualRunStore, business: str) -> dict[str, Any] | None:
    """The change stream's catch-up state the cutover gate found at the business's latest
    cutover (stored with its audit row), or None (never cut over, or no stream checked)."""
    found = own.migration.last_cutover(business)
    if found is None:
        return None
    at, detail = found
    try:
        stream = json.loads(detail or "{}").get("stream")
    except (ValueError, AttributeError):
        return None
    if not isinstance(stream, dict):
        return None
    return {**stream, "at": iso(datetime.fromtimestamp(at / 1000, tz=timezone.utc))}


def load_overview(
    own: DualRunStore, *, now: datetime, reports_dir: Path | None = None, link_suffix: str = ".html"
) -> OverviewReport:
    """Every business with its cutover state and latest verdict; links to the per-business
    reports that exist next to the overview (`<business><suffix>`)."""
    infos = {b.biz_code: b for b in fetch_businesses(own)}
    verdicts = latest_by_business(own)
    rows = []
    for code in sorted(set(infos) | set(verdicts)):
        info, v = infos.get(code), verdicts.get(code)
        link = f"{code}{link_suffix}"
        rows.append(
            OverviewRow(
                business=code,
                source=info.source_system if info else None,
                state=info.state if info else None,
                shadow=bool(info and info.shadow),
                verdict=v.verdict.value if v else None,
                computed_at=v.computed_at if v else None,
                reasons=v.reasons if v else (),
                warnings=v.warnings if v else (),
                link=link if reports_dir is not None and (reports_dir / link).exists() else None,
            )
        )
    return OverviewReport(generated_at=now, rows=tuple(rows))
