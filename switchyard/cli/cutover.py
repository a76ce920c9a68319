"""`switchyard status | cutover B | rollback B | dualrun start B`."""

from __future__ import annotations

import functools
import getpass
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import click

from migrator.business import BusinessRegistry, TransitionRefused
from migrator.cutover import BusinessSwitch, SwitchReport
from migrator.model import BusinessState
from migrator.ownership import PROBLEMS
from migrator.ports import VERDICT_MAX_AGE
from readers.timezones import LegacyZones
from scheduler_core.ports import MessageBus
from scheduler_core.stops import Scope
from scheduler_core.store.stops import SqlStops
from switchyard import exitcodes
from switchyard.cli.bus_args import BusArgs as _BusArgs
from switchyard.cli.bus_args import bus_opts as _bus_opts
from switchyard.cli.business import one_business
from switchyard.cli.durations import format_duration, seconds
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits_as
from switchyard.cli.names import known_business, refuse_native
from switchyard.cli.options import LEGACY_URL_ENV, legacy_url_option, legacy_zone_options, store_url
from switchyard.cli.outages import CompletedBefore, through_outages
from switchyard.cli.stop_reach import await_relay, tell
from switchyard.exitcodes import FAILED, OK, REFUSED, SCHEMA, UNREACHABLE, USAGE
from switchyard.freezes import standing_freezes
from switchyard.settings import zones_for_source
from switchyard.wiring import (
    DualRunGate,
    dualrun_store,
    fence_service,
    legacy_control,
    legacy_switches,
    migrator_store,
    open_existing_store,
    stream_catchup,
)

# not required by click: a native business is told it has no legacy side before it is asked
# for a legacy database (`_switch` asks for it otherwise)
legacy_opt = legacy_url_option("URL of the business's legacy database.", required=False)
actor_opt = click.option(
    "--actor", default=getpass.getuser, show_default="the current user", help="Who is switching (audited)."
)
json_opt = click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")


@contextmanager
def _switch(
    url: str,
    biz: str,
    legacy_url: str | None,
    zones: LegacyZones,
    max_age_s: float = 3600.0,
    bus: MessageBus | None = None,
    stream_wait_s: float = 5.0,
    stream_max_pending: int = 0,
) -> Iterator[BusinessSwitch]:
    """The business's switch; its store and legacy connections closed after use (a pooled
    connection left open holds a DROP DATABASE back, in tests that run the commands).
    Of the zones it needs the database's, the one legacy DATETIME columns are in (a switch
    evaluates no legacy cron: the triggers carry their own zone, xxl-job's
    trigger_next_time is epoch ms)."""
    store = open_existing_store(url)
    own = migrator_store(store)
    try:
        rec = BusinessRegistry(own).get(biz)
        if rec is None:
            raise CliFailure(f"unknown business {biz!r}: migrate it first (`switchyard migrate run`)", exitcodes.USAGE)
        refuse_native(biz, rec.source_system, "switch to or from")
        if not legacy_url:
            raise CliFailure(
                f"{biz}: its legacy database is needed: give --legacy-url (or {LEGACY_URL_ENV})", exitcodes.USAGE
            )
        try:
            zones_for_source(rec.source_system, zones)
        except ValueError as exc:
            raise CliFailure(f"{biz}: {exc}", exitcodes.USAGE) from None
        db_tz = zones.db
        control = legacy_control(rec.source_system, legacy_url, store.clock, db_tz)
        try:
            yield BusinessSwitch(
                store,
                own,
                control,
                store.clock,
                DualRunGate(dualrun_store(store)),
                max_verdict_age=timedelta(seconds=max_age_s),
                fences=fence_service(store, bus) if bus is not None else None,
                catchup=stream_catchup(
                    own,
                    control.engine,  # type: ignore[attr-defined]
                    db_tz,
                    wait_s=stream_wait_s,
                    max_pending=stream_max_pending,
                ),
            )
        finally:
            control.close()
    finally:
        store.close()


def _switched(
    sw: BusinessSwitch, biz: str, what: str, leads_to: BusinessState, step: Callable[[], SwitchReport], as_json: bool
) -> SwitchReport | None:
    """`step` run through a database's outages (switchyard/cli/outages.py), its report
    printed; None when an attempt the outage cut short had completed it (said instead)."""

    def done() -> bool:
        rec = sw.registry.get(biz)
        return rec is not None and rec.state is leads_to

    try:
        report = through_outages(step, what, half_done=lambda: sw.half_done, done=done)
    except CompletedBefore as completed:
        click.echo(str(completed))
        return None
    _emit(report, as_json)
    return report


def _switch_opts(fn):  # type: ignore[no-untyped-def]
    """What every switch command (cutover, rollback, dualrun start) is told first: the
    business, the store, its legacy database and zones, and who is switching."""
    for opt in reversed((one_business(), store_url, legacy_opt, legacy_zone_options, actor_opt)):
        fn = opt(fn)
    return fn


def _emit(report: SwitchReport, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.as_dict(), default=str))
        return
    click.echo(f"{report.biz_code}: {report.from_state} -> {report.to_state}" + (" (FORCED)" if report.forced else ""))
    for k, v in (
        ("activated", report.activated),
        ("deactivated", report.deactivated),
        ("rewound", report.rewound),
        ("legacy jobs switched on", report.legacy_started),
    ):
        if v:
            click.echo(f"  {k}: {v}")
    if report.handover:
        first = sorted(report.handover.items(), key=lambda kv: kv[1])[:5]
        click.echo(
            f"  handover of {len(report.handover)} job(s), earliest: " + ", ".join(f"{k} at {v}" for k, v in first)
        )
    if report.fence_at:
        click.echo(
            f"  fence: the new side invokes nothing at or after {report.fence_at}"
            f" ({report.fenced} published command(s) recorded as skipped)"
        )
    for k, why in report.not_handed_back.items():
        click.echo(f"  NOT handed back: {k}: {why}")
    for n in report.notes:
        click.echo(f"  note: {n}")
    for w in report.warnings:
        click.echo(f"  warning: {w}")
    if report.stream is not None:
        click.echo(f"  stream: {report.stream['sentence']}")


def _refused(fn):  # type: ignore[no-untyped-def]
    def run(*a, **k):  # type: ignore[no-untyped-def]
        try:
            return fn(*a, **k)
        except TransitionRefused as exc:
            raise CliFailure(str(exc), exitcodes.REFUSED) from None

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


@exits_as(
    {
        OK: None,
        FAILED: "--check found a job firing on neither side or on both",
        USAGE: None,
        UNREACHABLE: None,
        SCHEMA: None,
    }
)
@click.command("status")
@store_url
@legacy_url_option(
    "A legacy database to read the legacy switches from (repeatable: one per legacy system); "
    "without it the legacy side is inferred from the store.",
    required=False,
    multiple=True,
    dest="legacy_urls",
)
@click.option("--business", "biz_codes", multiple=True, help="Only these businesses (biz_code, repeatable).")
@click.option("--jobs", "show_jobs", is_flag=True, help="List every job and the side that fires it.")
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if any job fires on neither side (orphaned) or on both "
    "outside a dual-run (double): the command for a cron job or an alert.",
)
@json_opt
@cli_errors
def status(
    url: str, legacy_urls: tuple[str, ...], biz_codes: tuple[str, ...], show_jobs: bool, check: bool, as_json: bool
) -> None:
    """Every business's state, its last verdict, and per job which side fires it."""
    from dualrun.verdict_store import latest_by_business
    from migrator.ownership import ownership

    store = open_existing_store(url)
    try:
        own = migrator_store(store)
        records = {r.biz_code: r for r in BusinessRegistry(own).all()}
        # a name that is no business is an error, never an empty answer: `status --check
        # --business <typo>` in an alert would otherwise pass for ever (a native business,
        # never migrated, is known: it has nothing on a legacy side to check)
        unknown = [b for b in dict.fromkeys(biz_codes) if b not in records and not known_business(store, own, b)]
        if unknown:
            raise CliFailure(
                "no such business: "
                + ", ".join(unknown)
                + (f" (businesses: {', '.join(sorted(records)[:20])})" if records else " (none migrated yet)"),
                exitcodes.USAGE,
            )
        verdicts = latest_by_business(dualrun_store(store))
        switches = legacy_switches(legacy_urls, store.clock) if legacy_urls else None
        try:
            owned = ownership(store, own, switches, list(biz_codes) or None)
        finally:
            if switches is not None:
                switches.close()
        frozen = standing_freezes(store)
    finally:
        store.close()
    rows = []
    problems = 0
    for bo in owned:
        r = records[bo.biz_code]
        v = verdicts.get(bo.biz_code)
        problems += len(bo.problems)
        rows.append(
            {
                "business": r.biz_code,
                "source": r.source_system,
                "state": r.state.value,
                "shadow": r.shadow,
                "since": r.updated_at.isoformat(),
                "verdict": v.verdict.value if v else None,
                "verdict_at": v.computed_at.isoformat() if v else None,
                "reasons": list(v.reasons) if v else [],
                "sides": bo.counts(),
                "problems": [j.as_dict() for j in bo.problems],
                "frozen": frozen.of(r.biz_code),
                **({"jobs": [j.as_dict() for j in bo.jobs]} if show_jobs or as_json else {}),
            }
        )
    if as_json:
        click.echo(json.dumps(rows))
    else:
        if not rows:
            click.echo("no businesses yet: run `switchyard migrate run`")
        else:
            click.echo(f"{'BUSINESS':<24} {'SOURCE':<13} {'STATE':<9}{'':<10} VERDICT  JOBS BY SIDE")
        for row, bo in zip(rows, owned, strict=True):
            verdict = f"{row['verdict']} at {row['verdict_at']}" if row["verdict"] else "no verdict"
            sides = ", ".join(f"{k} {n}" for k, n in row["sides"].items() if n)  # type: ignore[union-attr]
            click.echo(
                f"{row['business']:<24} {row['source']:<13} {row['state']:<9}"
                f"{' (shadow)' if row['shadow'] else '':<10} {verdict}  jobs: {sides or 'none'}"
            )
            if row["frozen"]:
                click.echo(f"     FROZEN (deliberate: nothing runs on the new side): {row['frozen']}")
            listed = bo.jobs if show_jobs else bo.problems
            if listed:
                # the columns named once per business: `!!` marks a job firing on neither side or on both
                click.echo(f"     {'LEGACY KEY':<12} {'JOB':<40} {'FIRES ON':<9} {'NEW SIDE':<9} LEGACY SIDE")
            for j in listed:
                flag = "  !! " if j.side in PROBLEMS else "     "
                click.echo(
                    f"{flag}{j.source_key:<12} {j.job_code:<40} {j.side.value:<9} "
                    f"{j.trigger_state:<9} {'on' if j.legacy_live else 'off'}"
                    f"{'' if j.legacy_known else ' (inferred)'}{' (held by the switch)' if j.held else ''}"
                    f"{'  ' + j.why if j.why else ''}"
                )
        if problems:
            click.echo(f"{problems} job(s) orphaned or double: see above")
    if check and problems:
        raise SystemExit(exitcodes.FAILED)


@exits_as(
    {
        OK: "switched",
        FAILED: None,
        USAGE: None,
        UNREACHABLE: None,
        SCHEMA: None,
        REFUSED: "refused by the gate (the verdict, the stream, a job left firing nowhere): nothing changed",
    }
)
@click.command("cutover")
@_switch_opts
@click.option("--force", is_flag=True, help="Override the verdict gate (needs --reason; audited).")
@click.option("--reason", default="", help="Why (audited).")
@click.option(
    "--max-verdict-age",
    type=seconds(1),
    default=format_duration(VERDICT_MAX_AGE),  # the one bound the reports flag a stale verdict by
    show_default=True,
    help="The oldest verdict the gate accepts.",
)
@click.option(
    "--stream-wait",
    type=seconds(0),
    default="5s",
    show_default=True,
    help="How long to wait for the change stream to apply what is pending before refusing.",
)
@click.option(
    "--stream-max-pending",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Legacy changes the stream may still have pending at the switch.",
)
@json_opt
@cli_errors
@_refused
def cutover(
    biz_code: str,
    url: str,
    legacy_url: str | None,
    legacy_zones: LegacyZones,
    actor: str,
    force: bool,
    reason: str,
    max_verdict_age: timedelta,
    stream_wait: timedelta,
    stream_max_pending: int,
    as_json: bool,
) -> None:
    """Switch the business to the new path (refused unless its latest verdict is ready and fresh,
    and the change stream following it is caught up)."""
    with _switch(
        url,
        biz_code,
        legacy_url,
        legacy_zones,
        max_verdict_age.total_seconds(),
        stream_wait_s=stream_wait.total_seconds(),
        stream_max_pending=stream_max_pending,
    ) as sw:
        step = functools.partial(sw.cutover, biz_code, actor=actor, reason=reason, force=force)
        _switched(sw, biz_code, "cutover", BusinessState.CUTOVER, step, as_json)


@exits_as(
    {
        OK: "handed back",
        FAILED: "a job could not be handed back (each named)",
        USAGE: None,
        UNREACHABLE: None,
        SCHEMA: None,
        REFUSED: "refused, nothing changed: a job would be left firing nowhere",
    }
)
@click.command("rollback")
@_switch_opts
@click.option("--reason", default="", help="Why (audited).")
@_bus_opts
@json_opt
@cli_errors
@_refused
def rollback(
    biz_code: str,
    url: str,
    legacy_url: str | None,
    legacy_zones: LegacyZones,
    actor: str,
    reason: str,
    bus_args: _BusArgs,
    as_json: bool,
) -> None:
    """Send the business back to its legacy scheduler in seconds, exactly at the boundary.

    The handover F is now + the legacy side's start margin: executors skip (and record)
    every command of the business at or after F, and legacy fires from F on. Refused
    (exit 5, nothing changed) when a job would be left firing nowhere; exit 1 when a job
    could not be handed back (each one named)."""
    with bus_args.opened() as bus, _switch(url, biz_code, legacy_url, legacy_zones, bus=bus) as sw:
        step = functools.partial(sw.rollback, biz_code, actor=actor, reason=reason)
        report = _switched(sw, biz_code, "rollback", BusinessState.LEGACY, step, as_json)
    if report is None:
        return
    if report.fence_at and not as_json:
        _tell_fence_reach(url, biz_code, bus_args)
    if not report.ok:
        # never a success on a hand-over that left jobs behind: each is named above
        raise SystemExit(exitcodes.FAILED)


def _tell_fence_reach(url: str, biz_code: str, bus_args: _BusArgs) -> None:
    """How the rollback's fence reaches the executors: broadcast here with a bus, and
    relayed from the store by whoever holds the bus; a warning when neither happened."""
    store = open_existing_store(url)
    try:
        stops = SqlStops(store)
        stop = stops.stop_of(Scope.BUSINESS, biz_code)
        reach = await_relay(stops, [stop] if stop is not None else [], bus_args.reaches_executors)
    finally:
        store.close()
    tell(reach)


@exits_as({**dict.fromkeys(STORE), REFUSED: "refused by the business's state: nothing changed"})
@click.command("start")
@_switch_opts
@click.option("--shadow", is_flag=True, help="The new path records without invoking handlers.")
@click.option("--reason", default="", help="Why (audited).")
@_bus_opts
@json_opt
@cli_errors
@_refused
def dualrun_start(
    biz_code: str,
    url: str,
    legacy_url: str | None,
    legacy_zones: LegacyZones,
    actor: str,
    shadow: bool,
    reason: str,
    bus_args: _BusArgs,
    as_json: bool,
) -> None:
    """Move a migrated business into dual-run (both paths fire, or the new one in shadow).
    After a rollback, the new side starts after the last command the rollback fenced."""
    with bus_args.opened() as bus, _switch(url, biz_code, legacy_url, legacy_zones, bus=bus) as sw:
        step = functools.partial(sw.start_dual_run, biz_code, shadow=shadow, actor=actor, reason=reason)
        _switched(sw, biz_code, "dual-run start", BusinessState.DUAL_RUN, step, as_json)
