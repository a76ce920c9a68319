"""`switchyard trigger pause|resume|cancel`."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable

import click

from migrator.business import BusinessRegistry
from migrator.ownership import guard_trigger_operation
from scheduler_core import operations
from scheduler_core.model import JobCode, TriggerId
from scheduler_core.ports import TriggerStore
from switchyard import exitcodes
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.options import store_url
from switchyard.wiring import migrator_store, open_store


@click.group()
def trigger() -> None:
    """Pause, resume or cancel triggers (through the scheduler's own CAS)."""


def _select(store: TriggerStore, ids: tuple[int, ...], job: str | None, biz_code: str | None) -> list[TriggerId]:
    chosen = [TriggerId(i) for i in ids]
    if job or biz_code:
        chosen += [
            t.id
            for t in store.triggers_of(biz_code=biz_code, job_code=JobCode(job) if job else None)
            if t.id is not None
        ]
    if not chosen:
        raise CliFailure("name trigger ids, or --job / --business", exitcodes.USAGE)
    return chosen


def _command(action: str, fn: Callable[[TriggerStore, list[TriggerId]], operations.OperationReport]) -> click.Command:
    @click.command(action)
    @click.argument("ids", nargs=-1, type=int)
    @click.option("--job", default=None)
    @click.option("--business", "biz_code", default=None, help="Only this business (its biz_code).")
    @store_url
    @click.option(
        "--reason",
        default="",
        help="Why (audited). Needed to pause or cancel a job live only on the "
        "new side (a business cut over): it then fires nowhere.",
    )
    @click.option("--actor", default=getpass.getuser, show_default="the current user", help="Who (audited).")
    @click.option("--json", "as_json", is_flag=True)
    @cli_errors
    def cmd(
        ids: tuple[int, ...], job: str | None, biz_code: str | None, url: str, reason: str, actor: str, as_json: bool
    ) -> None:
        store = open_store(url)
        try:
            own = migrator_store(store)
            guard = guard_trigger_operation(store, own, action, _select(store, ids, job, biz_code), reason)
            report = fn(store, guard.allowed) if guard.allowed else operations.OperationReport(action)
            registry = BusinessRegistry(own)
            for biz, tids in guard.audited.items():
                done = [t for t in tids if t in set(report.changed)]
                if done:
                    registry.note(
                        biz,
                        actor=actor,
                        reason=reason or f"trigger {action}",
                        detail={"action": f"trigger {action}", "triggers": done},
                    )
        finally:
            store.engine.dispose()
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "action": action,
                        "changed": report.changed,
                        "best_effort": report.best_effort,
                        "unchanged": {str(k): v for k, v in report.unchanged.items()},
                        "refused": {str(k): v for k, v in guard.refused.items()},
                    }
                )
            )
        else:
            click.echo(f"{action}: {len(report.changed)} changed")
            if report.best_effort:
                click.echo(f"  best-effort (already admitted, commands may still be delivered): {report.best_effort}")
            for tid, why in report.unchanged.items():
                click.echo(f"  trigger {tid}: {why}")
            for tid, why in guard.refused.items():
                click.echo(f"  trigger {tid}: refused: {why}")
        if guard.refused:
            raise SystemExit(exitcodes.REFUSED)
        if not report.ok:
            raise SystemExit(exitcodes.FAILED)

    cmd.__doc__ = f"{action.capitalize()} triggers by id, job or business."
    return cmd


trigger.add_command(_command("pause", operations.pause))
trigger.add_command(_command("resume", operations.resume))
trigger.add_command(_command("cancel", operations.cancel))
