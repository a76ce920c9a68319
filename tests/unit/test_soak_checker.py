"""The soak checker's own arithmetic (tests/soak/checker.py), each part able to fail: the
ownership it reads from the audit, duplicates, memory growth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from dualrun.boundary import BoundaryIssue
from tests.soak.checker import (
    DUAL_RUN_LEAD,
    AuditedSwitch,
    DualSpan,
    Invocation,
    MemorySeries,
    check_duplicates,
    memory_growth,
    owner_at,
    plan_switches,
    problems_of,
    ran_before_its_stop_returned,
    stop_excuses,
    stop_returns,
)
from tests.soak.processes import wait_for

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


def _at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_ownership_follows_live_dual_run_cutover_and_rollback() -> None:
    audit = [
        AuditedSwitch(_at(10), "legacy", "dual_run", False, {}),
        AuditedSwitch(_at(20), "dual_run", "cutover", False, {"1": _at(22).isoformat()}),
        AuditedSwitch(_at(40), "cutover", "legacy", False, {"1": _at(46).isoformat()}),
    ]
    planned, spans = plan_switches(audit, ["1"], T0, _at(60))
    assert owner_at(planned, "1", _at(5)) is False  # legacy from the start
    assert owner_at(planned, "1", _at(10) + DUAL_RUN_LEAD) is True  # held to every fire in the dual-run
    assert owner_at(planned, "1", _at(30)) is True
    assert owner_at(planned, "1", _at(45)) is True  # before F
    assert owner_at(planned, "1", _at(46)) is False
    assert [(s.start, s.end) for s in spans] == [(_at(10) - DUAL_RUN_LEAD, _at(22))]


def test_a_shadow_dual_run_leaves_legacy_the_owner() -> None:
    audit = [AuditedSwitch(_at(10), "legacy", "dual_run", True, {})]
    planned, spans = plan_switches(audit, ["1"], T0, _at(60))
    assert owner_at(planned, "1", _at(30)) is False and spans == []


def test_a_rollback_from_a_dual_run_hands_back_the_jobs_it_left_out_at_its_instant() -> None:
    audit = [
        AuditedSwitch(_at(10), "legacy", "dual_run", False, {}),
        AuditedSwitch(_at(30), "dual_run", "legacy", False, {}),
    ]
    planned, _ = plan_switches(audit, ["1"], T0, _at(60))
    assert owner_at(planned, "1", _at(29)) is True and owner_at(planned, "1", _at(30)) is False


def _inv(pid: int, cid: str) -> Invocation:
    return Invocation(pid, cid, 1000, 1000, "job")


def test_a_repeat_in_another_process_is_a_redelivery_in_the_same_one_a_defect() -> None:
    d = check_duplicates([_inv(1, "7-1000-0"), _inv(2, "7-1000-0")])
    assert d.redelivered == 1 and not d.twice_in_one_process and not d.split_ids
    d = check_duplicates([_inv(1, "7-1000-0"), _inv(1, "7-1000-0")])
    assert d.twice_in_one_process == ["7-1000-0 pid 1 x2"]


def test_memory_growth_is_measured_after_warm_up_and_only_for_long_lives() -> None:
    grew = MemorySeries("x", 1, tuple((t, 100 if t < 60 else 100 + t) for t in range(0, 200, 5)))
    g = memory_growth(grew, 60, 90)
    assert g is not None and g > 0.2
    assert memory_growth(MemorySeries("x", 1, ((0, 1), (5, 1))), 60, 90) is None


def test_status_problems_are_named_per_job() -> None:
    out = '[{"business": "b", "problems": [{"job_code": "j", "side": "orphaned", "why": "w"}]}]'
    assert problems_of(out) == ("b j orphaned w",)


def test_only_legacys_own_misses_inside_its_database_restart_are_set_apart() -> None:
    """A restart of the database legacy fires from loses legacy's fires, as the real admin's
    would be lost: listed apart. The new side's misses, or legacy's outside it, stay missing."""
    from datetime import UTC, datetime, timedelta

    from dualrun.boundary import BoundaryIssue
    from tests.soak.checker import BusinessCheck, set_apart_legacy_outages

    t = datetime(2026, 12, 6, 18, 40, tzinfo=UTC)
    issue = lambda owner, at: BoundaryIssue("missing", "j", at, owner, "")  # noqa: E731
    check = BusinessCheck("b", missing=[issue("legacy", t), issue("new", t), issue("legacy", t + timedelta(minutes=5))])
    set_apart_legacy_outages(check, [(t - timedelta(seconds=1), t + timedelta(seconds=3))])
    assert [(i.owner, i.scheduled_at) for i in check.legacy_lost_in_restart] == [("legacy", t)]
    assert [(i.owner, i.scheduled_at) for i in check.missing] == [("new", t), ("legacy", t + timedelta(minutes=5))]


def test_a_recovery_probe_that_raises_while_a_server_restarts_is_asked_again() -> None:
    """The probe of a MariaDB restart failed once on a pooled connection from before it
    ("lost connection"): the error killed the probe's thread and the run counted the
    restart unrecovered though the server was back in seconds."""
    answers: Iterator[bool | Exception] = iter([ConnectionError("lost connection"), False, True])

    def probe() -> bool:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return bool(a)

    assert wait_for(probe, within_s=5.0, every_s=0.0) is not None


def test_a_new_side_stop_never_excuses_a_miss_of_an_occurrence_legacy_alone_owned() -> None:
    """A rollback's fence stays open over all that legacy owns afterwards: it excused every
    legacy miss from then on (the self-test's planted misses came back "stopped on
    purpose"). A stop accounts for the new side's misses, in a dual-run for either's."""
    stopped_all: Callable[[str, int], bool] = lambda _job, _ms: True  # noqa: E731
    span = DualSpan(_at(10), _at(20))
    legacy_miss = BoundaryIssue("missing", "j1", _at(30), "legacy", "")
    assert not stop_excuses(legacy_miss, [span], stopped_all)
    assert stop_excuses(BoundaryIssue("missing", "j1", _at(30), "new", ""), [span], stopped_all)
    assert stop_excuses(BoundaryIssue("missing", "j1", _at(15), "legacy", ""), [span], stopped_all)
    assert stop_excuses(BoundaryIssue("stray", "j1", _at(30), "legacy", ""), [span], stopped_all)
    assert not stop_excuses(BoundaryIssue("missing", "j1", _at(30), "new", ""), [span], lambda _j, _m: False)


def test_an_operator_whose_read_fails_in_a_server_restart_goes_on() -> None:
    """A MariaDB restart failed the operator's own read of the store once, and the error
    ended the business's operator thread: no more switches for the rest of the run."""
    from dbkit.errors import StoreUnavailable
    from tests.soak.run import _operator

    class Steps:
        def __init__(self) -> None:
            self.calls, self.actions = 0, []  # type: ignore[var-annotated]

        def elapsed(self) -> float:
            return 0.0

        def operate(self, _b: object) -> None:
            self.calls += 1
            if self.calls == 1:
                raise StoreUnavailable("cannot reach the database")

    w = Steps()
    deadline = __import__("time").monotonic() + 4.0
    _operator(w, SimpleNamespace(biz="b"), deadline)  # type: ignore[arg-type]
    assert w.calls >= 2 and [a.what for a in w.actions] == ["operator read failed (server restart)"]


def test_a_dual_run_is_read_from_when_its_new_side_began_not_from_its_audit_row() -> None:
    """A dual-run start whose fence-lift broadcast waited on a restarting broker wrote its
    audit row 8 s after its new side began firing: the checker read the first seconds of
    the dual-run as legacy's alone and their fires by both sides as doubled (the 60-minute
    run: 63, in bursts of 2-7 s)."""
    audit = [AuditedSwitch(_at(20), "legacy", "dual_run", False, {}, began=_at(12))]
    _planned, spans = plan_switches(audit, ["1"], T0, _at(60))
    assert spans and spans[0].start == _at(12)
    _planned, spans = plan_switches([AuditedSwitch(_at(20), "legacy", "dual_run", False, {})], ["1"], T0, _at(60))
    assert spans[0].start == _at(20) - DUAL_RUN_LEAD  # no such record (an older row): as before


def test_a_run_invoked_before_its_stops_command_returned_is_told_apart_from_one_after() -> None:
    """README "A stop is a stop": no handler at or after S once the command has returned.
    A soak slowed down saw a pause whose relay took 1.6 s while a run due 0.5 s after S
    was invoked; that is the stop still going out, not a run after it. Only a stop an
    operator command wrote (its S in the command's output) is read so."""
    from scheduler_core.times import to_ms

    pause_out = (
        "pause: 1 changed; from 2026-12-06T12:00:10.493794+00:00\n  9 run(s) already published recorded skipped\n"
        "  reaches the executors: broadcast on the bus by this command and relayed by soak-s1 after 1648 ms\n"
    )
    rollback_out = (
        "b: dual_run -> legacy\n  fence: the new side invokes nothing at or after 2026-12-06T12:00:30.250000+00:00"
    )
    actions = [
        SimpleNamespace(at=12.2, biz="b", what="pause", code=0, out=pause_out),
        SimpleNamespace(at=31.0, biz="b", what="rollback", code=0, out=rollback_out),
        SimpleNamespace(at=40.0, biz="b", what="pause", code=2, out="pause: from 2026-12-06T12:00:39+00:00"),
        SimpleNamespace(at=50.0, biz="b", what="edit definitions (v1)", code=0, out=""),
    ]
    returned = stop_returns(actions, T0)
    s_pause, s_fence = to_ms(_at(10.493794)), to_ms(_at(30.25))
    assert returned == {("b", s_pause): to_ms(_at(12.2)), ("b", s_fence): to_ms(_at(31.0))}

    def inv(wall_s: float) -> Invocation:
        return Invocation(1, "1-x-0", s_pause + 500, to_ms(_at(wall_s)), "job")

    assert ran_before_its_stop_returned(inv(11.0), "b", [s_pause], returned)  # going out
    assert not ran_before_its_stop_returned(inv(12.5), "b", [s_pause], returned)  # after: a defect
    assert not ran_before_its_stop_returned(inv(11.0), "other", [s_pause], returned)
    # covered by two stops: excused only while neither command had returned
    assert not ran_before_its_stop_returned(inv(11.0), "b", [s_pause, to_ms(_at(5.0))], returned)
    assert not ran_before_its_stop_returned(inv(11.0), "b", [], returned)


def test_the_driver_s_traced_growth_names_the_line_that_kept_memory(tmp_path: Path) -> None:
    """SWITCHYARD_SOAK_TRACEMALLOC's report: what grew between two snapshots, by site."""
    import tracemalloc

    from tests.soak.run import write_trace_growth

    kept: list[bytes] = []
    tracemalloc.start(5)
    try:
        before = tracemalloc.take_snapshot()
        kept.extend(bytes(1024) for _ in range(512))  # the growth: 512 KiB kept
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    out = tmp_path / "tracemalloc.txt"
    write_trace_growth(before, after, out)
    text = out.read_text()
    first = text.split("\n\n")[1]  # the biggest growth, after the total line
    assert "+5" in first.splitlines()[0] and "KiB" in first, text[:500]
    assert "test_soak_checker.py" in first and "kept.extend" in first, first
    assert len(kept) == 512
