"""The batch-center bridge's secrets: a business's `bc_biz.access_token`, read per call."""

from __future__ import annotations

from collections.abc import Callable

from dbkit.connections import connect
from dbkit.engine import make_engine


def batch_center_tokens(legacy_url: str) -> Callable[[str], str | None]:
    """The batch-center bridge's token provider: `bc_biz:<biz_code>` -> that business's
    `bc_biz.access_token` in the legacy database (read per call, never logged)."""
    from sqlalchemy import text

    engine = make_engine(legacy_url)

    def lookup(ref: str) -> str | None:
        kind, _, biz = ref.partition(":")
        if kind != "bc_biz" or not biz:
            return None
        with connect(engine) as conn:
            row = conn.execute(text("SELECT access_token FROM bc_biz WHERE biz_code = :b"), {"b": biz}).first()
        return None if row is None or not row[0] else str(row[0])

    return lookup


__all__ = ["batch_center_tokens"]
