"""Operations with nothing to do succeed (issue 32): pausing a paused trigger, resuming a
business whose finished triggers cannot resume, report why per trigger and exit 0; only
a trigger that should have changed and did not makes the call fail."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from scheduler_core.model import Job, JobCode, TriggerId, TriggerKind, TriggerState
from scheduler_core.operations import OperationReport
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.wiring import open_store
from tests.harness import state_of, stored_id, trigger_of

EVERY = timedelta(seconds=10)


def test_pause_twice_and_resume_beside_a_finished_trigger_exit_0_with_the_reason(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "init", "--url", url]).exit_code == 0
    store = open_store(url)
    try:
        job = store.put_job(Job(job_code=JobCode("billing:reconcile"), biz_code="billing", handler="h"))
        child = store.put_job(Job(job_code=JobCode("billing:child"), biz_code="billing", handler="h"))
        (rate,) = store.add_triggers(
            [trigger_of(job, TriggerKind.FIXED_RATE, store.clock.now() + EVERY, interval=EVERY)]
        )
        # a one-shot that has run: it can be neither paused nor resumed
        (done,) = store.add_triggers(
            [trigger_of(child, TriggerKind.ONCE, store.clock.now() - EVERY, state=TriggerState.COMPLETED)]
        )
        assert state_of(store, done) is TriggerState.COMPLETED
        pause = ["trigger", "pause", "--job", "billing:reconcile", "--url", url, "--reason", "incident"]
        assert runner.invoke(cli, pause).exit_code == 0
        again = runner.invoke(cli, pause)
        assert again.exit_code == exitcodes.OK, again.output
        assert f"trigger {stored_id(rate)}: already paused" in again.output

        resume = runner.invoke(cli, ["trigger", "resume", "--business", "billing", "--url", url])
        assert resume.exit_code == exitcodes.OK, resume.output
        assert "resume: 1 changed" in resume.output
        assert f"trigger {stored_id(done)}: is completed: not paused" in resume.output
        assert state_of(store, rate) is TriggerState.WAITING
    finally:
        store.engine.dispose()


def test_a_trigger_that_should_have_changed_still_fails_the_call() -> None:
    report = OperationReport("resume")
    report.unchanged[TriggerId(1)] = "already waiting"
    assert report.ok
    report.fail(TriggerId(2), "changed while resuming: run resume again")
    assert not report.ok
    assert report.unchanged[TriggerId(2)] == "changed while resuming: run resume again"
