"""The per-page lookup cache of the legacy log readers (readers/log_pages.py)."""

from __future__ import annotations

from readers.log_pages import uncached


def _rows(*ids: int) -> list[dict[str, int]]:
    return [{"job_id": i} for i in ids]


def test_only_the_ids_the_cache_lacks_are_looked_up() -> None:
    cache = {1: 10, 2: 20}
    assert uncached(_rows(1, 2, 3, 3), "job_id", cache, limit=100) == [3]  # type: ignore[arg-type]
    assert cache == {1: 10, 2: 20}


def test_a_full_cache_is_cleared_before_the_page_is_worked_out() -> None:
    # The page's ids 1 and 2 were cached; the cache is past its limit and the page brings
    # a new id. After the clear every id of the page must be looked up again, or the rows
    # of 1 and 2 would find nothing in the cache (read as unknown).
    cache = {i: i for i in range(1, 6)}
    assert uncached(_rows(1, 2, 99), "job_id", cache, limit=3) == [1, 2, 99]  # type: ignore[arg-type]
    assert cache == {}


def test_a_full_cache_that_already_holds_the_page_is_kept() -> None:
    cache = {i: i for i in range(1, 6)}
    assert uncached(_rows(1, 2), "job_id", cache, limit=3) == []  # type: ignore[arg-type]
    assert len(cache) == 5
