"""Where verdicts are stored: a row of `dus_comparison` per comparison (dualrun.tables;
body = the full JSON). `latest(own, business)` is what the cutover gate reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from dbkit.connections import begin, connect
from dualrun.model import Comparison, Mode, StoredVerdict, Verdict, Window, as_dict, comparison_from_dict
from dualrun.store import DualRunStore
from dualrun.verdict import SHADOW_WARNING
from scheduler_core.times import from_ms, to_ms


def put_comparison(own: DualRunStore, comparison: Comparison) -> int:
    """Store one comparison (the full JSON in `body`); returns its id."""
    body = as_dict(comparison)
    t = own.t.comparison
    with begin(own.engine) as conn:
        result = conn.execute(
            insert(t).values(
                biz_code=comparison.biz_code,
                window_start=to_ms(comparison.window.start),
                window_end=to_ms(comparison.window.end),
                computed_at=to_ms(comparison.computed_at),
                verdict=comparison.verdict.value,
                reasons=json.dumps(list(comparison.reasons), ensure_ascii=False),
                body=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
            )
        )
        return int(result.inserted_primary_key[0])  # type: ignore[index]


def _stored(row: Any) -> StoredVerdict:
    body = json.loads(row.body)
    mode = Mode(body.get("mode", Mode.BOTH.value))
    return StoredVerdict(
        comparison_id=int(row.id),
        biz_code=row.biz_code,
        verdict=Verdict(row.verdict),
        reasons=tuple(json.loads(row.reasons)),
        window=Window(start=from_ms(row.window_start), end=from_ms(row.window_end)),
        computed_at=from_ms(row.computed_at),
        mode=mode,
        warnings=_stored_warnings(body, mode),
    )


def _stored_warnings(body: dict[str, Any], mode: Mode) -> tuple[str, ...]:
    """The stored warnings; a shadow verdict stored before its warning existed gains it, so
    the gate never passes a shadow verdict without saying success rate was not compared."""
    warnings = tuple(body.get("warnings", ()))
    if mode is Mode.SHADOW and SHADOW_WARNING not in warnings:
        warnings += (SHADOW_WARNING,)
    return warnings


def latest(own: DualRunStore, biz_code: str) -> StoredVerdict | None:
    """The most recently computed verdict of a business, or None: what the cutover gate
    reads (`.is_ready`, `.reasons`, `.age(now)` / `.is_fresh(now, max_age)`)."""
    t = own.t.comparison
    stmt = select(t).where(t.c.biz_code == biz_code).order_by(t.c.computed_at.desc(), t.c.id.desc()).limit(1)
    with connect(own.engine) as conn:
        row = conn.execute(stmt).first()
    return None if row is None else _stored(row)


def history(own: DualRunStore, biz_code: str, *, since: datetime | None = None, limit: int = 500) -> list[Comparison]:
    """Stored comparisons of a business, oldest first (the series `watch` builds)."""
    t = own.t.comparison
    stmt = select(t.c.body).where(t.c.biz_code == biz_code)
    if since is not None:
        stmt = stmt.where(t.c.computed_at >= to_ms(since))
    stmt = stmt.order_by(t.c.computed_at.desc(), t.c.id.desc()).limit(limit)
    with connect(own.engine) as conn:
        bodies = [r.body for r in conn.execute(stmt)]
    return [comparison_from_dict(json.loads(b)) for b in reversed(bodies)]


def load_comparison(own: DualRunStore, comparison_id: int) -> Comparison | None:
    t = own.t.comparison
    with connect(own.engine) as conn:
        body = conn.execute(select(t.c.body).where(t.c.id == comparison_id)).scalar_one_or_none()
    return None if body is None else comparison_from_dict(json.loads(body))


def latest_by_business(own: DualRunStore) -> dict[str, StoredVerdict]:
    """The latest verdict of every business that has one (for the overview page)."""
    t = own.t.comparison
    with connect(own.engine) as conn:
        codes = [r[0] for r in conn.execute(select(t.c.biz_code).distinct())]
    out = {}
    for code in sorted(codes):
        found = latest(own, code)
        if found is not None:
            out[code] = found
    return out


__all__ = ["history", "latest", "latest_by_business", "load_comparison", "put_comparison"]


def verdicts_of(own: DualRunStore, comparison_ids: Sequence[int]) -> dict[int, str]:
    """comparison id -> its verdict (ready | not_ready), without reading the stored bodies."""
    ids = sorted(set(comparison_ids))
    if not ids:
        return {}
    t = own.t.comparison
    with connect(own.engine) as conn:
        return {int(i): str(v) for i, v in conn.execute(select(t.c.id, t.c.verdict).where(t.c.id.in_(ids)))}
