"""`switchyard trigger pause|resume|cancel`: operators' stops of triggers
(`scheduler_core.operations`, `scheduler_core.stops`).

S (pause, cancel) is the command's start + STOP_LEAD (1 s): no handler is invoked for an
occurrence at or after S once the command has returned, since every executor hears the
stop before S (broadcast here with `--bus`, relayed from the store by whoever holds the
bus within a few hundred ms otherwise). R (resume) is RESUME_LEAD (2 s) after the lift is
written: the executors must hear the lift before R, or they would skip what should run
again. A call of many triggers writes every stop (every lift) in one transaction.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from datetime import datetime, timedelta

import click

from migrator.business import BusinessRegistry
from migrator.ownership import guard_trigger_operation
from scheduler_core import operations
from scheduler_core.model import JobCode, TriggerId
from scheduler_core.stops import Scope, StopService
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from switchyard import exitcodes
from switchyard.cli.bus_args import BusArgs, bus_opts
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.names import known_business
from switchyard.cli.options import store_url
from switchyard.cli.stop_reach import await_relay, tell
from switchyard.wiring import migrator_store, open_store

STOP_LEAD = timedelta(seconds=1)
RESUME_LEAD = timedelta(seconds=2)


@click.group()
def trigger() -> None:
    """Pause, resume or cancel triggers: effective in seconds, whatever the lookahead."""


def _select(store: SqlTriggerStore, ids: tuple[int, ...], job: str | None, biz_code: str | None) -> list[TriggerId]:
    """The triggers named; an unknown trigger, job or business is an error naming it."""
    own = migrator_store(store)
    if biz_code is not None and not known_business(store, own, biz_code):
        raise CliFailure(f"no such business: {biz_code}", exitcodes.USAGE)
    if job is not None and store.get_job(JobCode(job)) is None:
        raise CliFailure(f"no such job: {job}", exitcodes.USAGE)
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


Apply = Callable[[SqlTriggerStore, StopService, list[TriggerId], str, str, datetime], operations.OperationReport]


def _apply(action: str) -> Apply:
    def run(
        store: SqlTriggerStore, stops: StopService, ids: list[TriggerId], actor: str, reason: str, started: datetime
    ) -> operations.OperationReport:
        if action == "pause":  # S: the command's start + 1 s, whatever the reads took
            return operations.pause(store, stops, ids, started + STOP_LEAD, actor, reason)
        if action == "cancel":
            return operations.cancel(store, stops, ids, started + STOP_LEAD, actor, reason)
        # R: 2 s after the lift is written (not after the start): every executor hears it first
        return operations.resume(store, stops, SqlSupersedes(store), ids, store.clock.now() + RESUME_LEAD)

    return run


def _command(action: str) -> click.Command:
    apply = _apply(action)

    @click.command(action)
    @click.argument("ids", nargs=-1, type=int)
    @click.option("--job", default=None)
    @click.option("--business", "biz_code", default=None, help="Only this business (its biz_code).")
    @store_url
    @bus_opts
    @click.option(
        "--reason",
        default="",
        help="Why (audited, and in the skipped runs' records). Needed to pause or cancel a job live "
        "only on the new side (a business cut over): it then fires nowhere.",
    )
    @click.option("--actor", default=getpass.getuser, show_default="the current user", help="Who (audited).")
    @click.option("--json", "as_json", is_flag=True)
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
        store = open_store(url)
        started = store.clock.now()
        try:
            own = migrator_store(store)
            chosen = _select(store, ids, job, biz_code)
            guard = guard_trigger_operation(store, own, action, chosen, reason)
            stop_store = SqlStops(store)
            if bus_args.reaches_executors:
                with bus_args.opened() as bus:
                    report = apply(store, StopService(stop_store, bus), guard.allowed, actor, reason, started)
            else:
                report = apply(store, StopService(stop_store), guard.allowed, actor, reason, started)
            changed = set(report.changed)
            touched = [s for tid in report.changed if (s := stop_store.stop_of(Scope.TRIGGER, str(tid))) is not None]
            reach = await_relay(stop_store, touched, bus_args.reaches_executors)
            registry = BusinessRegistry(own)
            for biz, tids in guard.audited.items():
                done = [t for t in tids if t in changed]
                if done:
                    registry.note(
                        biz,
                        actor=actor,
                        reason=reason or f"trigger {action}",
                        detail={"action": f"trigger {action}", "triggers": done, "at": str(report.at)},
                    )
        finally:
            store.engine.dispose()
        _report(action, report, guard.refused, reach.as_json() if touched else None, as_json)
        if not as_json and touched:
            tell(reach)
        if guard.refused:
            raise SystemExit(exitcodes.REFUSED)
        if not report.ok:
            raise SystemExit(exitcodes.FAILED)

    cmd.__doc__ = f"{action.capitalize()} triggers by id, job or business."
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
                    "still_acquired": report.still_acquired,
                    "unchanged": {str(k): v for k, v in report.unchanged.items()},
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
