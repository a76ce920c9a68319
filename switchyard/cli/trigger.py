"""`switchyard trigger pause|resume|cancel`: operators' stops of triggers
(`scheduler_core.operations`, `scheduler_core.stops`).

S (pause, cancel) is the command's start + STOP_LEAD (1 s), or the stop's write + STOP_LEAD
when the command's reads took longer than that (a loaded machine): no handler is invoked for an
occurrence at or after S once the command has returned, since every executor hears the
stop before S (broadcast here with `--bus`, relayed from the store by whoever holds the
bus within a few hundred ms otherwise). R (resume) is RESUME_LEAD (2 s) after the lift is
written: the executors must hear the lift before R, or they would skip what should run
again. A call of many triggers writes every stop (every lift) in one transaction.
"""

from __future__ import annotations

import getpass
import json
from contextlib import nullcontext
from typing import TYPE_CHECKING

import click

from migrator.ownership import GuardOutcome
from scheduler_core import operations
from scheduler_core.model import JobCode, TriggerId
from scheduler_core.stops import Scope, StopService
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from switchyard import exitcodes
from switchyard.cli.bus_args import BusArgs, bus_opts
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.names import NamedStore, known_business
from switchyard.cli.options import store_url
from switchyard.cli.outages import through_outages
from switchyard.cli.stop_reach import await_relay, tell
from switchyard.exitcodes import FAILED, OK, REFUSED
from switchyard.jobs import UnknownName, find_job
from switchyard.trigger_actions import act
from switchyard.wiring import migrator_store, open_existing_store

if TYPE_CHECKING:
    from migrator.store import MigratorStore


@exits(*STORE, FAILED, REFUSED)
@click.group()
def trigger() -> None:
    """Pause, resume or cancel triggers: effective in seconds, whatever the lookahead."""


def _select(
    store: NamedStore, own: MigratorStore, ids: tuple[int, ...], job: str | None, biz_code: str | None
) -> list[TriggerId]:
    """The triggers named; an unknown trigger, job or business is an error naming it."""
    if biz_code is not None and not known_business(store, own, biz_code):
        raise CliFailure(f"no such business: {biz_code}", exitcodes.USAGE)
    if job is not None:
        # its code or business:job, as the job commands take it; both named and
        # disagreeing is a typo in one of them, never "no trigger"
        try:
            job = find_job(store, job, biz_code).job_code
        except UnknownName as exc:
            raise CliFailure(str(exc.args[0]), exitcodes.USAGE) from None
    chosen = [TriggerId(i) for i in ids]
    found = {t.id for t in store.get_triggers(chosen)}
    unknown = [str(i) for i in chosen if i not in found]
    if unknown:
        raise CliFailure(f"no such trigger: {', '.join(unknown)}", exitcodes.USAGE)
    if job or biz_code:
        named = [
            t.id
            for t in store.triggers_of(biz_code=biz_code, job_code=JobCode(job) if job else None)
            if t.id is not None
        ]
        if not named:
            what = f"job {job}" if job else f"business {biz_code}"
            raise CliFailure(f"{what} has no trigger", exitcodes.USAGE)
        chosen += named
    if not chosen:
        raise CliFailure("name trigger ids, or --job / --business", exitcodes.USAGE)
    return list(dict.fromkeys(chosen))


def _command(action: str) -> click.Command:

    @exits_as(
        {
            **dict.fromkeys(STORE),
            OK: "done, or nothing to do (already so, finished: the reason is printed)",
            FAILED: "a trigger should have changed and did not",
            REFUSED: "refused: a job live only on the new side would fire nowhere (give --reason)",
        }
    )
    @click.command(
        action,
        help=f"{action.capitalize()} triggers by id, job or business. Exit 0 also when a trigger had nothing "
        "to do (already so, finished: its reason is printed); 1 when one should have changed and did not.",
    )
    @click.argument("ids", nargs=-1, type=int)
    @click.option("--job", default=None, help="Every trigger of this job (its code, or business:job).")
    @click.option("--business", "biz_code", default=None, help="Every trigger of this business (its biz_code).")
    @store_url
    @bus_opts
    @click.option(
        "--reason",
        default="",
        help="Why (audited, and in the skipped runs' records). Needed to pause or cancel a job live "
        "only on the new side (a business cut over): it then fires nowhere.",
    )
    @click.option("--actor", default=getpass.getuser, show_default="the current user", help="Who (audited).")
    @click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
    @cli_errors
    def cmd(
        ids: tuple[int, ...],
        job: str | None,
        biz_code: str | None,
        url: str,
        bus_args: BusArgs,
        reason: str,
        actor: str,
        as_json: bool,
    ) -> None:
        store = open_existing_store(url)
        started = store.clock.now()
        try:
            own = migrator_store(store)
            chosen = _select(store, own, ids, job, biz_code)
            stop_store = SqlStops(store)
            unsent = 0

            def attempt() -> tuple[operations.OperationReport, GuardOutcome]:
                nonlocal unsent
                with bus_args.opened() if bus_args.reaches_executors else nullcontext() as bus:
                    stops = StopService(stop_store, bus)
                    try:
                        return act(
                            store, own, stops, SqlSupersedes(store), action, chosen, actor=actor, reason=reason,
                            started=started,
                        )  # fmt: skip
                    finally:
                        unsent += stops.unsent

            # the store answered the selection: an outage from here is a restart, and the
            # stop may be stored already (the relay then sets the trigger's state): run
            # again, it finds what the cut-short attempt did (switchyard/cli/outages.py)
            report, guard = through_outages(attempt, action, done=lambda: False)
            touched = stop_store.stops_of(Scope.TRIGGER, [str(tid) for tid in report.changed])
            reach = await_relay(stop_store, touched, bus_args.reaches_executors, unsent=unsent)
        finally:
            store.close()
        _report(action, report, guard.refused, reach.as_json() if touched else None, as_json)
        if not as_json and touched:
            tell(reach)
        if guard.refused:
            raise SystemExit(exitcodes.REFUSED)
        if not report.ok:
            raise SystemExit(exitcodes.FAILED)

    return cmd


def _report(
    action: str,
    report: operations.OperationReport,
    refused: dict[TriggerId, str],
    reach: dict[str, object] | None,
    as_json: bool,
) -> None:
    at = None if report.at is None else report.at.isoformat()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "action": action,
                    "at": at,
                    "changed": report.changed,
                    "records": report.records,
                    "run_once": report.run_once,
                    "backlog": {str(k): v for k, v in report.backlog.items()},
                    "still_acquired": report.still_acquired,
                    "unchanged": {str(k): v for k, v in report.unchanged.items()},
                    "failed": sorted(report.failed),
                    "refused": {str(k): v for k, v in refused.items()},
                    "reach": reach,
                }
            )
        )
        return
    when = "from" if action != "resume" else "runs again from"
    click.echo(f"{action}: {len(report.changed)} changed; {when} {at}")
    if report.records:
        verb = "revived" if action == "resume" else "recorded skipped"
        click.echo(f"  {report.records} run(s) already published {verb}")
    if report.backlog:
        behind = ", ".join(f"{tid}: {n}" for tid, n in report.backlog.items())
        click.echo(f"  due before {at} and not fired yet (the scheduler was behind), handed out as runs: {behind}")
    if report.run_once:
        click.echo(f"  runs once at {at} (misfire policy fire_once_now): triggers {report.run_once}")
    if report.still_acquired:
        click.echo(f"  still being fired, state follows after this fire (the stop covers it): {report.still_acquired}")
    for tid, why in report.unchanged.items():
        click.echo(f"  trigger {tid}: {why}")
    for tid, why in refused.items():
        click.echo(f"  trigger {tid}: refused: {why}")


trigger.add_command(_command("pause"))
trigger.add_command(_command("resume"))
trigger.add_command(_command("cancel"))
