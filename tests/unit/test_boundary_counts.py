"""The boundary checker (`dualrun.boundary.check_boundary`) counts exactly: an owned
occurrence fired twice by one side is doubled, once on either side (whichever owns it) is
clean, by the other side only is missing plus stray, by none is missing; an occurrence
exactly at a handover belongs to the side that takes over there. The "0 doubled" figures
of the demo, the watch and the stress rest on it: the checker made blind to a side's
second fire (`dups > 1` for `dups > 0`) passed every other test."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from dualrun.boundary import BoundaryCheck, HandoverPlan, check_boundary
from dualrun.model import Window
from dualrun.testing import cron_definition, fired
from migrator.tables import migrator_tables
from readers.records import LegacyDefinition
from scheduler_core.model import SHADOW_NOTE, FiredState, Job, JobCode, Trigger, TriggerKind
from scheduler_core.times import to_ms
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
    switch = HandoverPlan(handover={d.source_key: h}, to_new=to_new, at=h)
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


# --- what the checker reads and how it owns: each line of check_boundary held by a test ---------


def _marked(s: Scenario, at: datetime, **changes: object) -> None:
    """The new side's record of `at` changed (state, message): a record that ran no handler."""
    s.records = [replace(r, **changes) if r.scheduled_at == at else r for r in s.records]  # type: ignore[arg-type]


def test_records_that_ran_no_handler_are_no_fires_and_one_running_is(tmp_path: Path) -> None:
    # after a cutover: a pending record (never published) leaves its occurrence missing; a
    # received one with no message (running: an executor stamped it) is a fire
    s, d, h, after = _switched(tmp_path / "cut", to_new=True)
    _marked(s, after[1], state=FiredState.PENDING, received_at=None, started_at=None, result_at=None)
    _marked(s, after[2], state=FiredState.RECEIVED, message="", result_at=None)
    check = _check(s, d, h, True)
    assert _issues(check) == [("missing", after[1], "new")]
    # after a rollback: the new side's shadow-only records past F are no fires (not doubled)
    s2, d2, f, after2 = _switched(tmp_path / "back", to_new=False)
    s2.new(d2, after2[:3])
    for at in after2[:3]:
        _marked(s2, at, state=FiredState.RECEIVED, message=SHADOW_NOTE, result_at=None)
    check = _check(s2, d2, f, False)
    assert check.clean, [str(i) for i in check.issues]


def test_a_switched_off_legacy_definition_still_says_what_is_due(tmp_path: Path) -> None:
    """A cutover switches the legacy job off: its schedule still tells what is due."""
    s = Scenario.create(tmp_path)
    s.business_row(state="cutover")
    d = s.job("12", "0/10 * * * * ?", enabled=False)
    times = s.times(d)
    h = times[len(times) // 2]
    s.legacy(d, [t for t in s.all_times(d) if t < h])
    gone = times[len(times) // 2 + 4]
    s.new(d, [t for t in times if t != gone])
    assert _issues(_check(s, d, h, True)) == [("missing", gone, "new")]


def test_handovers_given_as_report_text_and_issues_name_job_and_window(tmp_path: Path) -> None:
    s, d, h, after = _switched(tmp_path, to_new=True)
    s.records.append(fired(s.code(d), s.biz_code, OTHER_TRIGGER, after[0]))
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    switch = HandoverPlan(handover={d.source_key: h.isoformat()}, to_new=True, at=h)  # as SwitchReport.handover
    check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [switch], window=window, now=s.now)
    assert [(i.what, i.job_code, i.scheduled_at) for i in check.issues] == [("doubled", s.code(d), after[0])]
    assert check.window == window and check.owned == len(after)
    # what the comparison would show after the switch: the double, and legacy (switched off) silent
    assert check.mismatch_counts == {"extra_on_new": 1, "missing_on_legacy": len(after)}


def test_a_switch_covers_from_when_it_began_not_only_from_its_handover(tmp_path: Path) -> None:
    """Between the switch's start and its handover the old owner settles; an occurrence
    there that neither side fired is missing all the same."""
    s, d, h, _after = _switched(tmp_path, to_new=True)
    gone = h - timedelta(seconds=20)
    # an xxl-job log row has its trigger time only (to the second)
    s.log.rows = [r for r in s.log.rows if r.triggered_at is None or abs(r.triggered_at - gone) >= timedelta(seconds=1)]
    s.records = [r for r in s.records if r.scheduled_at != gone]
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    began = HandoverPlan(handover={d.source_key: h}, to_new=True, at=h - timedelta(seconds=30))
    check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [began], window=window, now=s.now)
    assert _issues(check) == [("missing", gone, "legacy")]
    late = HandoverPlan(handover={d.source_key: h}, to_new=True, at=h)
    check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [late], window=window, now=s.now)
    assert check.clean, "before the switch began, dual-run: not the checker's"


def test_lateness_is_judged_at_now_not_at_the_window_end(tmp_path: Path) -> None:
    """A command of the dual-run's last stretch (covered: the switch began before H) that is
    published, not received yet, 1 s after its time is not late (late_after 5 s); judged at
    the window's end it would be."""
    s, d, h, _after = _switched(tmp_path, to_new=True)
    last = h - timedelta(seconds=10)
    _marked(s, last, state=FiredState.PUBLISHED, received_at=None, started_at=None, result_at=None)
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    switch = HandoverPlan(handover={d.source_key: h}, to_new=True, at=h - timedelta(seconds=60))
    for now, late in ((last + timedelta(seconds=1), 0), (window.end, 1)):
        check = check_boundary(
            s.store, dualrun_store(s.store), s.reader(), s.biz_code, [switch], window=window, now=now
        )
        assert check.mismatch_counts.get("late_on_new", 0) == late, (now, check.mismatch_counts)


def test_every_job_is_owned_and_judged_on_its_own(tmp_path: Path) -> None:
    """Two jobs handed over at H: the first clean, the second fired by both sides once and
    by neither once; each job's occurrences count (owned), the second's issues name it."""
    s = Scenario.create(tmp_path)
    s.business_row(state="cutover")
    one, two = s.job("12", "0/10 * * * * ?"), s.job("13", "5/10 * * * * ?")
    times = s.times(one)
    h = times[len(times) // 2]
    for d in (one, two):
        s.legacy(d, [t for t in s.all_times(d) if t < h])
        s.new(d)
    after_two = [t for t in s.times(two) if t >= h]
    both, gone = after_two[2], after_two[6]
    s.legacy(two, [both])
    s.records = [r for r in s.records if not (r.job_code == s.code(two) and r.scheduled_at == gone)]
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    switch = HandoverPlan(handover={one.source_key: h, two.source_key: h}, to_new=True, at=h)
    check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [switch], window=window, now=s.now)
    assert [(i.what, i.job_code, i.scheduled_at) for i in check.issues] == [
        ("doubled", s.code(two), both),
        ("missing", s.code(two), gone),
    ]
    assert check.owned == len([t for t in times if t >= h]) + len(after_two)


def test_switches_apply_in_time_order_and_the_later_wins_at_the_same_instant(tmp_path: Path) -> None:
    # a cutover at H and a rollback at F > H, given in any order: the new side owns [H, F)
    s = Scenario.create(tmp_path)
    s.business_row(state="legacy")
    d = s.job("12", "0/10 * * * * ?")
    times = s.times(d)
    h, f = times[len(times) // 3], times[2 * len(times) // 3]
    s.legacy(d, [t for t in s.all_times(d) if t < h or t >= f])
    s.new(d, [t for t in times if h <= t < f])
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    cut = HandoverPlan(handover={d.source_key: h}, to_new=True, at=h)
    back = HandoverPlan(handover={d.source_key: f}, to_new=False, at=f)
    for order in ([cut, back], [back, cut]):
        check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, order, window=window, now=s.now)
        assert check.clean, [str(i) for i in check.issues[:3]]
    # handed to the new side and back at one instant (a one-shot): the later switch, legacy, owns
    s2 = Scenario.create(tmp_path / "same")
    s2.business_row(state="legacy")
    d2 = s2.job("12", "0/10 * * * * ?")
    s2.legacy(d2)
    s2.flush()
    at = s2.times(d2)[len(s2.times(d2)) // 2]
    pair = [
        HandoverPlan(handover={d2.source_key: at}, to_new=True, at=at),
        HandoverPlan({d2.source_key: at}, False, at),
    ]
    check = check_boundary(s2.store, dualrun_store(s2.store), s2.reader(), s2.biz_code, pair, window=window, now=s2.now)
    assert check.clean, [str(i) for i in check.issues[:3]]


def test_a_fire_no_occurrence_explains_by_the_side_that_handed_over_is_a_stray(tmp_path: Path) -> None:
    """A job every 10 minutes: a fire 5 minutes off its schedule pairs with nothing."""
    for to_new in (False, True):
        s = Scenario.create(tmp_path / str(to_new))
        s.business_row(state="cutover" if to_new else "legacy")
        d = s.job("14", "0 0/10 * * * ?")
        times = s.times(d)
        h = times[len(times) // 2]
        old, new = (s.legacy, s.new) if to_new else (s.new, s.legacy)
        old(d, [t for t in (s.all_times(d) if to_new else times) if t < h])
        new(d, [t for t in (times if to_new else s.all_times(d)) if t >= h or (to_new and t < h)])
        off = h + timedelta(minutes=5)
        old(d, [off])  # the side that handed the job over fires off the schedule
        check = _check(s, d, h, to_new)
        assert _issues(check) == [("stray", off, "new" if to_new else "legacy")], [str(i) for i in check.issues]


def test_a_job_with_nothing_in_the_window_does_not_hide_the_next_jobs_issues(tmp_path: Path) -> None:
    """Handed over first: a daily job with no occurrence in the window (no fire, no
    mismatch); then a job fired by both sides after H: still doubled. `now` left out: the
    window's end."""
    s = Scenario.create(tmp_path)
    s.business_row(state="cutover")
    daily, two = s.job("11", "0 0 3 * * ?"), s.job("13", "5/10 * * * * ?")
    times = s.times(two)
    h = times[len(times) // 2]
    assert s.times(daily) == []
    s.legacy(two, [t for t in s.all_times(two) if t < h])
    s.new(two)
    both = times[len(times) // 2 + 3]
    s.legacy(two, [both])
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    switch = HandoverPlan(handover={daily.source_key: h, two.source_key: h}, to_new=True, at=h)
    check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [switch], window=window)
    assert [(i.what, i.job_code, i.scheduled_at) for i in check.issues] == [("doubled", s.code(two), both)]


def test_a_quarantined_job_beside_the_switch_is_not_the_checkers(tmp_path: Path) -> None:
    """A legacy job the migrator quarantined is never handed over: its fires are legacy's
    own, whatever the switch; the business's migrated job is checked as usual."""
    s, d, h, after = _switched(tmp_path, to_new=True)
    held = cron_definition("77", s.biz_code, "0/30 * * * * ?")
    s.defs.append(held)
    with s.store.engine.begin() as conn:
        conn.execute(
            insert(migrator_tables().ledger).values(
                source_system=s.source.value,
                source_key="77",
                business=s.biz_code,
                status="quarantined",
                content_hash="h",
                field="schedule_conf",
                reason="a test's bad row",
                updated_at=0,
            )
        )
    s.legacy(held)
    gone = after[2]
    s.records = [r for r in s.records if r.scheduled_at != gone]
    check = _check(s, d, h, True)
    assert [(i.what, i.job_code, i.scheduled_at) for i in check.issues] == [("missing", s.code(d), gone)]


def test_a_failure_in_the_covered_dual_run_stretch_is_counted(tmp_path: Path) -> None:
    """Between the switch's start and H both sides fire (paired): a run that failed on the
    new side where legacy's succeeded shows in the comparison's counts (not in shadow:
    there the handler never ran)."""
    s, d, h, _after = _switched(tmp_path, to_new=True)
    failed = h - timedelta(seconds=20)
    _marked(s, failed, state=FiredState.FAILED)
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    switch = HandoverPlan(handover={d.source_key: h}, to_new=True, at=h - timedelta(seconds=60))
    check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [switch], window=window, now=s.now)
    assert check.mismatch_counts.get("failed_on_new") == 1, check.mismatch_counts


def test_a_follow_up_run_of_the_new_side_is_no_schedule_fire(tmp_path: Path) -> None:
    """A child job run by its parent's success (a follow-up claim) is not an occurrence of
    its schedule: after a rollback it is no stray of the new side."""
    s, d, f, after = _switched(tmp_path, to_new=False)
    code = s.code(d)
    s.store.put_job(Job(job_code=JobCode(code), biz_code=s.biz_code, handler="h"))
    (child,) = s.store.add_triggers(
        [Trigger(job_code=JobCode(code), biz_code=s.biz_code, kind=TriggerKind.ONCE, next_fire_at=f)]
    )
    assert child.id is not None
    at = after[3] + timedelta(seconds=4)  # off the schedule: the parent's success, not a cron time
    run = fired(code, s.biz_code, int(child.id), at)
    s.records.append(run)
    with s.store.engine.begin() as conn:
        conn.execute(
            insert(s.store.t.followup_fired).values(
                parent_command_id="parent-1",
                child_trigger_id=int(child.id),
                child_command_id=run.command_id,
                at=to_ms(at),
            )
        )
    check = _check(s, d, f, False)
    assert check.clean, [str(i) for i in check.issues]
