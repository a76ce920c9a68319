"""`switchyard freeze` / `unfreeze`: the kill switch for an incident. A freeze is a stop
(`scheduler_core.stops`) of a whole business, or of everything: from S (the command's
start + 1 s) no handler on the new side is invoked, whatever was published; the
triggers keep their states, so an unfreeze at R (+ 2 s) lets every occurrence from R on
run as scheduled (the ones in the freeze stay skipped, recorded with the reason).
Audited, shown by `status`, and counted by `status --check` as deliberate.
"""

from __future__ import annotations

import getpass
import json
from contextlib import nullcontext

import click

from migrator.business import BusinessRegistry
from scheduler_core.stops import ALL_KEY, Applied, Cause, Scope, StopService
from scheduler_core.store.stops import SqlStops
from switchyard import exitcodes
from switchyard.cli.bus_args import BusArgs, bus_opts
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.names import known_business
from switchyard.cli.options import store_url
from switchyard.cli.outages import through_outages
from switchyard.cli.stop_reach import await_relay, tell
from switchyard.exitcodes import FAILED
from switchyard.trigger_actions import RESUME_LEAD, stop_instant
from switchyard.wiring import migrator_store, open_existing_store


def _scope(biz_code: str | None, everything: bool) -> tuple[Scope, str]:
    if everything == (biz_code is not None):
        raise CliFailure("name one business (--business B) or --all", exitcodes.USAGE)
    return (Scope.ALL, ALL_KEY) if everything else (Scope.BUSINESS, str(biz_code))


def _switch(
    action: str,
    biz_code: str | None,
    everything: bool,
    url: str,
    bus_args: BusArgs,
    actor: str,
    reason: str,
    as_json: bool,
) -> None:
    scope, key = _scope(biz_code, everything)
    store = open_existing_store(url)
    try:
        own = migrator_store(store)
        if biz_code is not None and not known_business(store, own, biz_code):
            raise CliFailure(f"no such business: {biz_code}", exitcodes.USAGE)
        stop_store = SqlStops(store)
        now = store.clock.now()
        at = stop_instant(now, store.clock.now()) if action == "freeze" else now + RESUME_LEAD
        tries = unsent = 0

        def attempt() -> Applied | None:
            nonlocal tries, unsent
            tries += 1
            with bus_args.opened() if bus_args.reaches_executors else nullcontext() as bus:
                stops = StopService(stop_store, bus)
                try:
                    if action == "freeze":
                        return stops.stop(scope, key, at, Cause.FREEZE, actor, reason)
                    return stops.lift(scope, key, at, (Cause.FREEZE,))
                finally:
                    unsent += stops.unsent

        # the store answered: an outage from here is a restart, and the change may be
        # stored already: run again, it finds what the cut-short attempt did
        applied = through_outages(attempt, action, done=lambda: False)
        if applied is None and tries > 1:
            # not frozen any more: the attempt the database cut short had lifted it
            click.echo(
                f"unfroze {'everything' if everything else biz_code}: done by the attempt the database cut short"
            )
            return
        if applied is None:
            raise CliFailure(f"{'everything' if everything else biz_code} is not frozen", exitcodes.FAILED)
        reach = await_relay(stop_store, [applied.stop], bus_args.reaches_executors, unsent=unsent)
        registry = BusinessRegistry(own)
        targets = [r.biz_code for r in registry.all()] if everything else [str(biz_code)]
        if applied.changed:
            for biz in targets:
                if registry.get(biz) is not None:
                    registry.note(
                        biz,
                        actor=actor,
                        reason=reason or action,
                        detail={"action": action, "scope": "all" if everything else "business", "at": at.isoformat()},
                    )
    finally:
        store.close()
    what = "everything" if everything else f"business {biz_code}"
    if as_json:
        click.echo(
            json.dumps(
                {
                    "action": action,
                    "scope": scope.value,
                    "key": key,
                    "at": at.isoformat(),
                    "changed": applied.changed,
                    "records": applied.records,
                    "epoch": applied.stop.epoch,
                    "reach": reach.as_json(),
                }
            )
        )
        return
    if not applied.changed:
        click.echo(f"{what} is already frozen (from {applied.window.message})")
        return
    if action == "freeze":
        click.echo(f"froze {what} from {at.isoformat()}; {applied.records} published run(s) recorded skipped")
    else:
        click.echo(f"unfroze {what}: runs again from {at.isoformat()}; {applied.records} published run(s) revived")
    tell(reach)


def _options(fn):  # type: ignore[no-untyped-def]
    """The options freeze and unfreeze share."""
    for opt in reversed(
        (
            click.option("--business", "biz_code", default=None, help="One business (its biz_code)."),
            click.option("--all", "everything", is_flag=True, help="Every business."),
            click.option("--actor", default=getpass.getuser, show_default="the current user", help="Who (audited)."),
            store_url,
            bus_opts,
            click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text."),
        )
    ):
        fn = opt(fn)
    return fn


@exits(*STORE)
@click.command("freeze")
@_options
@click.option("--reason", required=True, help="Why (audited, and in the skipped runs' records).")
@cli_errors
def freeze(
    biz_code: str | None, everything: bool, reason: str, actor: str, url: str, bus_args: BusArgs, as_json: bool
) -> None:
    """Stop every run of a business (or of everything) on the new side within seconds."""
    _switch("freeze", biz_code, everything, url, bus_args, actor, reason, as_json)


@exits_as({**dict.fromkeys(STORE), FAILED: "it was not frozen"})
@click.command("unfreeze")
@_options
@click.option("--reason", default="", help="Why (audited).")
@cli_errors
def unfreeze(
    biz_code: str | None, everything: bool, reason: str, actor: str, url: str, bus_args: BusArgs, as_json: bool
) -> None:
    """Lift a freeze: runs scheduled from a couple of seconds from now on run again."""
    _switch("unfreeze", biz_code, everything, url, bus_args, actor, reason, as_json)


__all__ = ["freeze", "unfreeze"]
