"""`switchyard run kill COMMAND_ID | --job JOB_CODE`: ask the executor holding a run to
cancel its handler (scheduler_core.kills).

The request is stored first; with `--bus pulsar://...` it is also published at once and
the executors' answers are waited for (`--wait`, bounded) and printed. Without a bus the
process that holds the bus (the scheduler leader, `scheduler run --shards`' member owning
the lowest partition, `switchyard serve`) relays it within about a second, and the
command waits as long for the run's record to say it was killed.

Exit codes: 0 the request was stored (whatever the executors answered: a handler that
ignores the kill is reported still running, not as an error), and also when the run had
already finished (its final state is printed: there is nothing left to kill); 2 an
unknown command id or job ("no such run: ...", "no such job: ..."), or neither / both
given; 3 the store or the bus unreachable.
"""

from __future__ import annotations

import getpass
import json
import os
import threading
import time
from datetime import timedelta
from typing import Any

import click

from scheduler_core.kills import Kill, KillAnswer, KillService, decode_answer
from scheduler_core.model import Job
from scheduler_core.ports import ControlFeed, MessageBus
from scheduler_core.store.kills import RunItem, SqlKills
from switchyard import exitcodes
from switchyard.cli.durations import seconds
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.options import bus_url, pulsar_token, store_url, topic_prefix
from switchyard.exitcodes import OK, USAGE
from switchyard.jobs import UnknownName, find_job
from switchyard.wiring import open_bus, open_existing_store

POLL_S = 0.1
RELAYED_BY = "the process holding the bus (the scheduler leader, or `switchyard serve`) relays it within about a second"


@exits(*STORE)
@click.group("run")
def run_group() -> None:
    """Act on runs in work (a run: one command, `TRIGGER-T_MS-ITEM`)."""


class _Answers:
    """The executors' answers to one request, from the control channel."""

    def __init__(self) -> None:
        self.request_id: int | None = None
        self.by_command: dict[str, KillAnswer] = {}
        self._early: list[KillAnswer] = []
        self._lock = threading.Lock()
        self.changed = threading.Event()

    def on_message(self, payload: bytes) -> None:
        try:
            answer = decode_answer(payload)
        except ValueError:
            return
        if answer is None:
            return
        with self._lock:
            if self.request_id is None:
                self._early.append(answer)  # before the request id is known
                return
            self._take(answer)

    def expect(self, request_id: int) -> None:
        with self._lock:
            self.request_id = request_id
            for a in self._early:
                self._take(a)
            self._early.clear()

    def _take(self, answer: KillAnswer) -> None:
        if answer.request_id == self.request_id:
            self.by_command[answer.command_id] = answer  # the latest answer stands
            self.changed.set()


@exits_as(
    {
        **dict.fromkeys(STORE),
        OK: "the request was stored (or the run had already finished)",
        USAGE: "an unknown command id or job, or neither or both given",
    }
)
@run_group.command("kill")
@click.argument("command_id", required=False)
@click.option("--job", "job_code", default=None, help="Every run of this job in work now (its code, or business:job).")
@store_url
@bus_url
@pulsar_token
@topic_prefix
@click.option(
    "--wait",
    type=seconds(0, 60),
    default="5s",
    show_default=True,
    help="How long to wait for the executors' answers (with --bus) or the run's record (without).",
)
@click.option("--actor", default=getpass.getuser, show_default="the current user", help="Who (recorded).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def kill_cmd(
    command_id: str | None,
    job_code: str | None,
    url: str,
    bus_url: str,
    pulsar_token_env: str,
    topic_prefix: str,
    wait: timedelta,
    actor: str,
    as_json: bool,
) -> None:
    """Ask the executor holding a run (or every run of --job in work) to cancel its
    handler; the run is recorded killed once the handler returns."""
    if (command_id is None) == (job_code is None):
        raise CliFailure("name one run (COMMAND_ID) or --job JOB_CODE", exitcodes.USAGE)
    store = open_existing_store(url)
    bus: MessageBus | None = None
    feed: ControlFeed | None = None
    try:
        kills = SqlKills(store)
        job: Job | None = None
        if job_code is not None:  # its code or business:job, as the job commands take it
            try:
                job = find_job(store, job_code)
            except UnknownName as exc:
                raise CliFailure(str(exc.args[0]), exitcodes.USAGE) from None
            job_code = job.job_code
        wait_s = wait.total_seconds()
        targets, biz_code = _targets(kills, command_id, job)
        running = [t for t in targets if not t.state.is_final]
        if not running:
            _finished(targets, job_code, as_json)
            return
        answers = _Answers()
        if bus_url != "memory":  # the in-process bus of this command reaches no executor
            bus = open_bus(bus_url, token=os.environ.get(pulsar_token_env), topic_prefix=topic_prefix)
            feed = bus.follow_control(answers.on_message)
        kill = KillService(kills, store.clock, bus).request(
            biz_code, command_id=command_id, job_code=job_code, by=actor
        )
        answers.expect(kill.request_id)
        wanted = {t.command_id for t in running}
        if bus is not None:
            _wait_answers(answers, wanted if command_id else set(), wait_s)
        states = _wait_records(kills, running, wait_s if bus is None else min(2.0, wait_s))
        _report(kill, running, states, answers.by_command, bus is not None, as_json)
    finally:
        if feed is not None:
            feed.close()
        if bus is not None:
            bus.close()
        store.close()


def _targets(kills: SqlKills, command_id: str | None, job: Job | None) -> tuple[list[RunItem], str]:
    if command_id is not None:
        try:
            item = kills.run_item(command_id)
        except ValueError:
            raise CliFailure(
                f"no such run: {command_id!r} is not a command id (TRIGGER-T_MS-ITEM)", exitcodes.USAGE
            ) from None
        if item is None:
            raise CliFailure(f"no such run: {command_id}", exitcodes.USAGE)
        return [item], item.biz_code
    assert job is not None
    return kills.unfinished_items(job.biz_code, job.job_code), job.biz_code


def _finished(targets: list[RunItem], job_code: str | None, as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "request": None,
                    "runs": [
                        {"command_id": t.command_id, "state": t.state.value, "message": t.message} for t in targets
                    ],
                    "note": "nothing to kill",
                }
            )
        )
        return
    if job_code is not None:
        click.echo(f"no run of {job_code} is in work: nothing to kill")
        return
    (t,) = targets
    why = f" ({t.message})" if t.message else ""
    click.echo(f"run {t.command_id} already finished: {t.state.value}{why}; nothing to kill")


def _wait_answers(answers: _Answers, wanted: set[str], wait: float) -> None:
    """Until every wanted command has an answer that is not "still running" yet (by job:
    until the first answers stop coming for a moment), or `wait` seconds."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        answers.changed.wait(min(POLL_S, max(0.0, end - time.monotonic())))
        answers.changed.clear()
        got = answers.by_command
        if wanted and wanted <= set(got):
            return
        if not wanted and got:
            answers.changed.wait(0.5)  # a job's other runs answer at about the same time
            return


def _wait_records(kills: SqlKills, running: list[RunItem], wait: float) -> dict[str, RunItem]:
    """The items as their records say now, after waiting up to `wait` s for each to be final."""
    end = time.monotonic() + wait
    while True:
        now = {t.command_id: kills.run_item(t.command_id) or t for t in running}
        if all(t.state.is_final for t in now.values()) or time.monotonic() >= end:
            return now
        time.sleep(POLL_S)


def _report(
    kill: Kill,
    running: list[RunItem],
    states: dict[str, RunItem],
    answers: dict[str, KillAnswer],
    with_bus: bool,
    as_json: bool,
) -> None:
    delivery = "published on the bus" if with_bus else f"stored; {RELAYED_BY}"
    if as_json:
        runs: list[dict[str, Any]] = []
        for t in running:
            now = states[t.command_id]
            a = answers.get(t.command_id)
            runs.append(
                {
                    "command_id": t.command_id,
                    "state": now.state.value,
                    "message": now.message,
                    "answer": None
                    if a is None
                    else {"outcome": a.outcome.value, "message": a.message, "executor": a.executor},
                }
            )
        click.echo(json.dumps({"request": kill.request_id, "delivery": "bus" if with_bus else "relay", "runs": runs}))
        return
    click.echo(f"{kill}: {delivery}")
    for t in running:
        now = states[t.command_id]
        a = answers.get(t.command_id)
        if a is not None:
            click.echo(f"  {t.command_id}: {a.outcome.value}: {a.message} [{a.executor}]; record {now.state.value}")
        elif now.state.is_final:
            click.echo(f"  {t.command_id}: {now.state.value}: {now.message}")
        elif with_bus:
            click.echo(f"  {t.command_id}: no executor answered yet (record {now.state.value})")
        else:
            click.echo(f"  {t.command_id}: not killed yet (record {now.state.value}); {RELAYED_BY}")
