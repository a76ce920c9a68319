"""A switch cut short by its database is run again as soon as the database answers
(switchyard/cli/outages.py): the chaos soak saw a rollback fail half-way in a MariaDB
restart and leave four jobs live on neither side until its operator ran it again."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from dbkit.errors import StoreRefused, StoreUnavailable
from migrator.business import TransitionRefused
from switchyard.cli.outages import CompletedBefore, through_outages


class Steps:
    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        out = self.outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out


def _lost() -> OperationalError:
    import pymysql

    return OperationalError("UPDATE t", {}, pymysql.err.OperationalError(2013, "Lost connection to MySQL server"))


def test_a_switch_cut_short_by_an_outage_is_run_again_until_it_completes(capsys: pytest.CaptureFixture[str]) -> None:
    step = Steps(StoreUnavailable("cannot reach the database", "(2003)"), _lost(), "report")
    slept: list[float] = []
    assert through_outages(step, "rollback", sleep=slept.append) == "report"
    assert step.calls == 3 and slept == [1.0, 1.0]
    assert "rollback cut short" in capsys.readouterr().err  # said once, on stderr


def test_past_its_patience_the_outage_is_raised() -> None:
    now = [0.0]
    step = Steps(*[StoreUnavailable("cannot reach the database", "")] * 10)

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(StoreUnavailable):
        through_outages(step, "rollback", patience_s=3.0, sleep=sleep, clock=lambda: now[0])
    assert step.calls == 4  # at 0, 1, 2 and 3 s


def test_other_errors_and_refusals_are_not_retried() -> None:
    with pytest.raises(StoreRefused):
        through_outages(Steps(StoreRefused("database error", "")), "rollback", sleep=lambda _s: None)
    with pytest.raises(TransitionRefused):
        through_outages(Steps(TransitionRefused("already on legacy")), "rollback", sleep=lambda _s: None)


def test_a_refusal_after_an_outage_says_the_cut_short_attempt_completed_it() -> None:
    step = Steps(StoreUnavailable("cannot reach the database", ""), TransitionRefused("b is already on legacy"))
    with pytest.raises(CompletedBefore, match="done by the attempt the database cut short"):
        through_outages(step, "rollback", sleep=lambda _s: None)


def test_an_outage_before_the_switch_changed_anything_is_raised_at_once() -> None:
    """A legacy URL that cannot be reached fails the rollback's first read: an error now,
    not two minutes of retries (nothing is half-done)."""
    step = Steps(StoreUnavailable("cannot reach the database", ""), "report")
    with pytest.raises(StoreUnavailable):
        through_outages(step, "rollback", half_done=lambda: False, sleep=lambda _s: None)
    assert step.calls == 1


def test_a_refusal_after_an_outage_is_completed_before_only_where_the_switch_leads() -> None:
    """A cutover run again after an outage can be refused for another reason (a job left
    dark): that is not "done by the attempt cut short" unless the business is cut over."""
    outage = StoreUnavailable("cannot reach the database", "")
    with pytest.raises(TransitionRefused, match="dark"):
        through_outages(
            Steps(outage, TransitionRefused("a job left dark")), "cutover", done=lambda: False, sleep=lambda _s: None
        )
    with pytest.raises(CompletedBefore, match="cutover: done by the attempt"):
        through_outages(
            Steps(outage, TransitionRefused("not dual_run")), "cutover", done=lambda: True, sleep=lambda _s: None
        )
