"""The boundary checker (`dualrun.boundary.check_boundary`) counts exactly: an owned
occurrence fired twice by one side is doubled, once on either side (whichever owns it) is
clean, by the other side only is missing plus stray, by none is missing; an occurrence
exactly at a handover belongs to the side that takes over there. The "0 doubled" figures
of the demo, the watch and the stress rest on it: the checker made blind to a side's
second fire (`dups > 1` for `dups > 0`) passed every other test."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from dualrun.boundary import BoundaryCheck, Switch, check_boundary
from dualrun.model import Window
from dualrun.testing import fired
from readers.records import LegacyDefinition
from switchyard.wiring import dualrun_store
from tests.unit.test_dualrun_support import Scenario

# a second trigger of the job (a doubled trigger): its commands have ids of their own
OTHER_TRIGGER = 99


def _switched(tmp_path: Path, to_new: bool) -> tuple[Scenario, LegacyDefinition, datetime, list[datetime]]:
    """A job every 10 s over the hour; at H, an occurrence half-way, it is handed to the
    new side (`to_new`) or back to legacy. Each side fires what it owns, once: the old
    owner before H, the new owner from H on (H itself included)."""
    s = Scenario.create(tmp_path)
    s.business_row(state="cutover" if to_new else "legacy")
    d = s.job("12", "0/10 * * * * ?")
    times = s.times(d)
    h = times[len(times) // 2]
    before = [t for t in s.all_times(d) if t < h]
    after = [t for t in times if t >= h]
    if to_new:
        s.legacy(d, before)
        s.new(d, [t for t in times if t < h] + after)
    else:
        s.new(d, [t for t in times if t < h])
        s.legacy(d, before + after)
    return s, d, h, after


def _check(s: Scenario, d: LegacyDefinition, h: datetime, to_new: bool) -> BoundaryCheck:
    s.flush()
    switch = Switch(handover={d.source_key: h}, to_new=to_new, at=h)
    window = Window(start=s.current.start, end=s.current.end)
    return check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [switch], window=window, now=s.now)


def _issues(check: BoundaryCheck) -> list[tuple[str, datetime, str]]:
    return [(i.what, i.scheduled_at, i.owner) for i in check.issues]


def test_each_owned_occurrence_fired_once_is_clean_in_both_directions(tmp_path: Path) -> None:
    for to_new in (True, False):
        s, d, h, after = _switched(tmp_path / str(to_new), to_new)
        check = _check(s, d, h, to_new)
        assert check.clean, [str(i) for i in check.issues]
        assert check.owned == len(after) and check.owned > 100
        assert (check.missing, check.doubled, check.stray) == (0, 0, 0)


def test_an_occurrence_the_new_side_fired_twice_after_a_cutover_is_doubled(tmp_path: Path) -> None:
    s, d, h, after = _switched(tmp_path, to_new=True)
    twice = after[3]
    s.records.append(fired(s.code(d), s.biz_code, OTHER_TRIGGER, twice))
    check = _check(s, d, h, True)
    assert _issues(check) == [("doubled", twice, "new")]
    assert check.issues[0].detail == "fired 2 times on the new side"
    assert (check.missing, check.doubled, check.stray) == (0, 1, 0)


def test_an_occurrence_legacy_fired_twice_after_a_rollback_is_doubled(tmp_path: Path) -> None:
    s, d, h, after = _switched(tmp_path, to_new=False)
    twice = after[5]
    s.legacy(d, [twice])  # a second log row of one occurrence (a legacy duplicate)
    check = _check(s, d, h, False)
    assert _issues(check) == [("doubled", twice, "legacy")]
    assert check.issues[0].detail == "fired 2 times on the legacy side"


def test_an_occurrence_fired_three_times_is_one_doubled_issue_that_says_so(tmp_path: Path) -> None:
    s, d, h, after = _switched(tmp_path, to_new=True)
    s.records += [fired(s.code(d), s.biz_code, OTHER_TRIGGER + k, after[2]) for k in (0, 1)]
    check = _check(s, d, h, True)
    assert _issues(check) == [("doubled", after[2], "new")]
    assert check.issues[0].detail == "fired 3 times on the new side"


def test_the_occurrence_at_the_handover_belongs_to_the_side_taking_over(tmp_path: Path) -> None:
    # after a cutover, the new side owns H itself: legacy firing it as well is a double
    s, d, h, _after = _switched(tmp_path / "cut", to_new=True)
    s.legacy(d, [h])
    check = _check(s, d, h, True)
    assert [(w, t) for w, t, _o in _issues(check)] == [("doubled", h)]
    assert check.issues[0].owner == "new" and check.issues[0].detail.startswith("fired by both sides")
    # ... and legacy alone firing it (the new side not) leaves the owner's occurrence missing
    s2, d2, h2, _ = _switched(tmp_path / "cut-missing", to_new=True)
    s2.records = [r for r in s2.records if r.scheduled_at != h2]
    s2.legacy(d2, [h2])
    check = _check(s2, d2, h2, True)
    assert ("missing", h2, "new") in _issues(check)
    assert check.missing == 1


def test_an_owned_occurrence_neither_side_fired_is_missing(tmp_path: Path) -> None:
    s, d, h, after = _switched(tmp_path, to_new=True)
    gone = after[4]
    s.records = [r for r in s.records if r.scheduled_at != gone]
    check = _check(s, d, h, True)
    assert _issues(check) == [("missing", gone, "new")]


def test_a_fire_by_the_side_that_handed_over_is_a_double_or_a_stray(tmp_path: Path) -> None:
    # after a rollback, the new side fired one occurrence legacy owns (and legacy fired it)
    s, d, h, after = _switched(tmp_path, to_new=False)
    s.new(d, [after[1]])
    check = _check(s, d, h, False)
    assert _issues(check) == [("doubled", after[1], "legacy")]
    assert timedelta(0) <= after[1] - h
