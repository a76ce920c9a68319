"""`switchyard job list|show|add|edit|copy|delete|run|start|stop|default-lane` (issues 28, 29): the new
center's jobs, migrated or created here, through the one validated path
(`switchyard.jobs`). A job is named by its code or as `business:job`."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import click

from scheduler_core import operations
from scheduler_core.alert_rule import KINDS as ALERT_KINDS
from scheduler_core.alert_rule import AlertRule, parse_kinds
from scheduler_core.jobspec import JobInputError, JobSpec, Schedule, parse_block, parse_lane
from scheduler_core.model import DEFAULT_CRON_DIALECT, Lane, MisfirePolicy, TriggerKind
from scheduler_core.stops import Scope, StopService
from scheduler_core.store.job_admin import TriggerBusy
from scheduler_core.store.stops import SqlStops
from switchyard import exitcodes
from switchyard.cli.bus_args import BusArgs, bus_opts
from switchyard.cli.durations import parse_duration
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.options import store_url
from switchyard.cli.stop_reach import await_relay, tell
from switchyard.jobs import Jobs, JobView, UnknownName, preview
from switchyard.wiring import migrator_store, open_existing_store

KINDS = ("cron", "every", "once", "none")


@exits_as(dict.fromkeys(exitcodes.MEANING))
@click.group()
def job() -> None:
    """The new center's jobs, migrated or created here: list, show, add, edit, copy, delete,
    run once now, start and stop. Bad input exits 2 naming the field; every write is audited."""


@dataclass
class _Session:
    jobs: Jobs
    stop_store: SqlStops
    bus_args: BusArgs | None


@contextmanager
def _opened(url: str, actor: str, bus_args: BusArgs | None = None) -> Iterator[_Session]:
    store = open_existing_store(url)
    try:
        with bus_args.opened() if bus_args is not None and bus_args.reaches_executors else nullcontext() as bus:
            stop_store = SqlStops(store)
            yield _Session(
                Jobs(store, migrator_store(store), StopService(stop_store, bus), actor), stop_store, bus_args
            )
    except UnknownName as exc:
        raise CliFailure(str(exc.args[0]), exitcodes.USAGE) from None
    except JobInputError as exc:
        raise CliFailure(f"bad input: {exc}", exitcodes.USAGE) from None
    except TriggerBusy as exc:
        raise CliFailure(str(exc), exitcodes.FAILED) from None
    except PermissionError as exc:
        raise CliFailure(f"refused: {exc}", exitcodes.REFUSED) from None
    finally:
        store.engine.dispose()


json_opt = click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
actor_opt = click.option("--actor", default=getpass.getuser, show_default="the current user", help="Who (audited).")
reason_opt = click.option("--reason", default="", help="Why (audited).")
name_arg = click.argument("name", metavar="JOB")
business_opt = click.option(
    "--business", "biz_code", default=None, help="The job's business; with it, a job of another business is an error."
)


def _definition_opts(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options that set a job's definition and schedule (add, edit)."""
    for opt in reversed(
        (
            click.option("--handler", default=None, help="The handler name the executors registered."),
            click.option("--param", "params", default=None, help="The job's parameter, handed to every run."),
            click.option("--cron", default=None, help="Schedule: a Quartz cron (seconds first), in --zone."),
            click.option("--every", default=None, help="Schedule: a fixed rate (e.g. 30s, 5m, 2h)."),
            click.option("--at", "once_at", default=None, help="Schedule: one run at this ISO time with offset."),
            click.option(
                "--no-schedule", "no_schedule", is_flag=True, help="Schedule: none (a child job, run after its parent)."
            ),
            click.option("--zone", default=None, help="The cron's time zone (IANA name). [default: UTC]"),
            click.option(
                "--dialect",
                type=click.Choice(["2.3", "2.5"]),
                default=None,
                help=f"The cron's Quartz line. [default: {DEFAULT_CRON_DIALECT}]",
            ),
            click.option("--end", "end_at", default=None, help="No fire after this ISO time with offset."),
            click.option(
                "--misfire",
                type=click.Choice([p.value for p in MisfirePolicy]),
                default=None,
                help="A fire missed by more than the misfire threshold: run once now, or skip. "
                "[default: fire_once_now]",
            ),
            click.option("--shards", type=int, default=None, help="Sharding items per run. [default: 1]"),
            click.option(
                "--item",
                "items",
                multiple=True,
                help="A sharding item's parameter (repeat once per item; sets --shards to their count).",
            ),
            click.option("--timeout", default=None, help="A run's timeout (e.g. 30s, 5m). [default: 30s]"),
            click.option("--retries", type=int, default=None, help="Retries of a failed run. [default: 0]"),
            click.option("--priority", type=int, default=None, help="1 highest .. 9 (ties of equal fire times)."),
            click.option(
                "--lane",
                type=click.Choice([lane.value for lane in Lane]),
                default=None,
                help="Where its triggers are admitted and published: burst (on-the-hour fan-out), default, bulk "
                "(low priority). [default: the business's default lane]",
            ),
            click.option(
                "--block",
                default=None,
                help="A later run while an earlier one of the job is still in work in an executor process: "
                "concurrent (runs beside it), discard_later (not run, recorded failed), cover_early (the earlier "
                "one is killed, recorded killed), serial (waits in a queue, runs after it; xxl-job's "
                "SERIAL_EXECUTION). Per executor process. [default: concurrent]",
            ),
            click.option(
                "--child", "children", multiple=True, help="A child job run after each successful run (repeatable)."
            ),
            click.option(
                "--alert",
                "alert_targets",
                multiple=True,
                help="Where the job's alerts go: webhook:URL or mail:ADDRESS (repeatable; an edit's replace the job's).",
            ),
            click.option(
                "--alert-on",
                "alert_on",
                default=None,
                help=f"What alerts, comma-separated: {','.join(ALERT_KINDS)}. [default: all three]",
            ),
            click.option("--no-alert", "no_alert", is_flag=True, help="Remove every alert target of the job."),
        )
    ):
        fn = opt(fn)
    return fn


def _when(name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise JobInputError(name, f"not an ISO time: {text!r}") from None
    if at.tzinfo is None:
        raise JobInputError(name, f"{text!r} needs a zone offset (e.g. +00:00)")
    return at


def _duration(name: str, text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise JobInputError(name, str(exc)) from None


def _schedule(given: dict[str, Any], base: Schedule | None) -> Schedule | None:
    """The schedule the options give, over `base` (an edit keeps what is not given); None:
    no schedule option given."""
    kinds = [
        k
        for k, v in zip(KINDS, (given["cron"], given["every"], given["once_at"], given["no_schedule"]), strict=True)
        if v
    ]
    if len(kinds) > 1:
        raise JobInputError("schedule", f"give one of --cron, --every, --at, --no-schedule (got {', '.join(kinds)})")
    shaping = any(given[k] is not None for k in ("zone", "dialect", "end_at", "misfire"))
    if not kinds and not shaping:
        return None
    if not kinds and base is None:
        raise JobInputError("schedule", "give one of --cron, --every, --at, --no-schedule")
    b = base or Schedule(kind=TriggerKind.NONE)
    kind = (
        {
            "cron": TriggerKind.CRON,
            "every": TriggerKind.FIXED_RATE,
            "once": TriggerKind.ONCE,
            "none": TriggerKind.NONE,
        }[kinds[0]]
        if kinds
        else b.kind
    )
    same = kind is b.kind
    return Schedule(
        kind=kind,
        cron=given["cron"] or (b.cron if same else None),
        dialect=given["dialect"] or b.dialect,
        time_zone=given["zone"] or b.time_zone,
        interval=_duration("every", given["every"]) if given["every"] else (b.interval if same else None),
        at=_when("at", given["once_at"]) or (b.at if same else None),
        misfire_policy=MisfirePolicy(given["misfire"]) if given["misfire"] else b.misfire_policy,
        end_at=_when("end", given["end_at"]) if given["end_at"] is not None else b.end_at,
    )


def _changes(given: dict[str, Any], base: JobSpec | None) -> dict[str, Any]:
    """The JobSpec fields the options set."""
    out: dict[str, Any] = {}
    for opt_name, field_name in (("handler", "handler"), ("params", "params"), ("retries", "max_retry")):
        if given[opt_name] is not None:
            out[field_name] = given[opt_name]
    if given["priority"] is not None:
        out["priority"] = given["priority"]
    if given["lane"] is not None:
        out["lane"] = parse_lane(given["lane"])
    if given["block"] is not None:
        out["block"] = parse_block(given["block"])
    if given["timeout"] is not None:
        out["timeout"] = _duration("timeout", given["timeout"])
    if given["items"]:
        out["items"] = tuple(given["items"])
        out["shard_total"] = len(given["items"])
        if given["shards"] is not None and given["shards"] != len(given["items"]):
            raise JobInputError("shards", f"{given['shards']} shards for {len(given['items'])} --item parameters")
    elif given["shards"] is not None:
        out["shard_total"] = given["shards"]
        out["items"] = ()
    if given["children"]:
        out["children"] = tuple(c for c in given["children"] if c)
    alerts = _alerts(given, base.alerts if base is not None else AlertRule())
    if alerts is not None:
        out["alerts"] = alerts
    schedule = _schedule(given, base.schedule if base is not None else None)
    if schedule is not None:
        out["schedule"] = schedule
    return out


def _alerts(given: dict[str, Any], base: AlertRule) -> AlertRule | None:
    """The alert rule the options give over `base`; None: no alert option given."""
    targets, on = tuple(given["alert_targets"]), given["alert_on"]
    if given["no_alert"]:
        if targets or on is not None:
            raise JobInputError("alert", "--no-alert with --alert or --alert-on")
        return AlertRule()
    if not targets and on is None:
        return None
    try:
        kinds = parse_kinds(on) if on is not None else base.kinds
    except ValueError as exc:
        raise JobInputError("alert-on", str(exc)) from None
    if on is not None and not kinds:
        raise JobInputError("alert-on", f"name at least one of {', '.join(ALERT_KINDS)}")
    targets = targets or base.targets
    if not targets:
        raise JobInputError("alert-on", "the job has no alert target: give --alert webhook:URL or mail:ADDRESS")
    return AlertRule(targets=targets, kinds=kinds)


def _emit(view: JobView, as_json: bool, note: str = "") -> None:
    if as_json:
        click.echo(json.dumps({**view.as_dict(), **({"note": note} if note else {})}))
        return
    d = view.as_dict()
    click.echo(f"{d['business']}:{d['job']}  {d['state']}")
    sched = d["schedule"] or {}
    kind = sched.get("kind")
    if kind == "cron":
        what = f"cron {sched['cron']} ({sched['zone']}, Quartz {sched['dialect']})"
    elif kind == "fixed_rate":
        what = f"every {sched['every_s']:g} s"
    elif kind == "once":
        what = f"once at {sched['at']}"
    else:
        what = "none (runs after its parent, or by hand)"
    click.echo(f"  schedule:  {what}; misfire {sched.get('misfire', '-')}")
    click.echo(f"  next fire: {d['next_fire_at'] or '-'}")
    click.echo(f"  handler:   {d['handler']}  param: {d['params']!r}")
    click.echo(
        f"  shards:    {d['shards']}{' items ' + repr(d['items']) if d['items'] else ''}  timeout {d['timeout_s']:g} s"
        f"  retries {d['retries']}  priority {d['priority']}  lane {d['lane']}  block {d['block']}"
    )
    if d["children"]:
        click.echo(f"  children:  {', '.join(d['children'])}")
    if d["alerts"]["targets"]:
        click.echo(f"  alerts:    on {','.join(d['alerts']['on'])} to {', '.join(d['alerts']['targets'])}")
    if note:
        click.echo(f"  {note}")


@exits(*STORE)
@job.command("list")
@business_opt
@click.option("--state", "states", multiple=True, help="Only jobs in this state: running, stopped, child (repeatable).")
@click.option("--handler", default=None, help="Only jobs of this handler.")
@store_url
@json_opt
@cli_errors
def list_jobs(biz_code: str | None, states: tuple[str, ...], handler: str | None, url: str, as_json: bool) -> None:
    """Every job, by business and code."""
    with _opened(url, "") as s:
        views = [
            v
            for v in s.jobs.all(biz_code)
            if (not states or v.state in states) and (handler is None or v.job.handler == handler)
        ]
    if as_json:
        click.echo(json.dumps([v.as_dict() for v in views]))
        return
    if not views:
        click.echo("no jobs" + (f" in business {biz_code}" if biz_code else ""))
    for v in views:
        d = v.as_dict()
        click.echo(
            f"{d['business']}:{d['job']:<40} {d['state']:<12} {d['lane']:<8} {d['handler']:<24} "
            f"next {d['next_fire_at'] or '-'}"
        )


@exits(*STORE)
@job.command("show")
@name_arg
@business_opt
@store_url
@json_opt
@cli_errors
def show(name: str, biz_code: str | None, url: str, as_json: bool) -> None:
    """One job: its definition, schedule, its next 5 fire times (in the job's zone) and children."""
    with _opened(url, "") as s:
        view = s.jobs.view(s.jobs.resolve(name, biz_code))
        coming = preview(view.trigger, s.jobs.store.clock.now())
    if as_json:
        click.echo(json.dumps({**view.as_dict(), "next_fires": coming}))
        return
    _emit(view, as_json)
    if coming:
        click.echo(f"  next {len(coming)}:    {', '.join(coming)}")


@exits_as(
    {
        **dict.fromkeys(STORE),
        exitcodes.FAILED: "the job's trigger was being fired, or its stop could not settle yet: run it again",
        exitcodes.REFUSED: "a migrated job of a business not cut over is the legacy admin's",
    }
)
@job.command("add")
@name_arg
@click.option("--business", "biz_code", default=None, help="The job's business (or name the job business:job).")
@_definition_opts
@click.option("--stopped", is_flag=True, help="Create it stopped (start it with `switchyard job start`).")
@store_url
@reason_opt
@actor_opt
@json_opt
@cli_errors
def add(
    name: str, biz_code: str | None, stopped: bool, url: str, reason: str, actor: str, as_json: bool, **given: Any
) -> None:
    """Create a job and its trigger; its first fire time is computed from the schedule.
    A business first named here is created (native: it fires on the new center only)."""
    if biz_code is None and ":" in name:
        biz_code, _, name = name.partition(":")
    if not biz_code:
        raise CliFailure("bad input: business: name it with --business or as business:job", exitcodes.USAGE)
    with _opened(url, actor) as s:
        changes = _changes(given, None)
        if "schedule" not in changes:
            raise JobInputError("schedule", "give one of --cron, --every, --at, --no-schedule")
        if "handler" not in changes:
            raise JobInputError("handler", "give --handler")
        spec = JobSpec(job_code=name, biz_code=biz_code, **changes)
        view = s.jobs.add(spec, stopped=stopped, reason=reason)
    _emit(view, as_json, "created stopped: `switchyard job start` starts it" if stopped else "")


@exits_as(
    {
        **dict.fromkeys(STORE),
        exitcodes.FAILED: "the job's trigger was being fired, or its stop could not settle yet: run it again",
        exitcodes.REFUSED: "a migrated job of a business not cut over is the legacy admin's",
    }
)
@job.command("edit")
@name_arg
@business_opt
@_definition_opts
@store_url
@reason_opt
@actor_opt
@json_opt
@cli_errors
def edit(name: str, biz_code: str | None, url: str, reason: str, actor: str, as_json: bool, **given: Any) -> None:
    """Change a job. A schedule change takes effect at now + 5 s through the schedule-edit
    path: runs of the old schedule already handed out for later are superseded, the new
    schedule's are published; nothing is rewritten under the scheduler."""
    with _opened(url, actor) as s:
        found = s.jobs.resolve(name, biz_code)
        changes = _changes(given, s.jobs.view(found, all_items=True).spec())
        if not changes:
            raise JobInputError("edit", "nothing to change: give at least one option")
        view, note = s.jobs.edit(found, changes, reason=reason)
    _emit(view, as_json, note)


@exits_as(
    {
        **dict.fromkeys(STORE),
        exitcodes.FAILED: "the job's trigger was being fired, or its stop could not settle yet: run it again",
        exitcodes.REFUSED: "a migrated job of a business not cut over is the legacy admin's",
    }
)
@job.command("copy")
@name_arg
@click.argument("new_name", metavar="NEW_JOB")
@business_opt
@click.option("--to-business", "to_biz", default=None, help="The copy's business. [default: the job's]")
@store_url
@reason_opt
@actor_opt
@json_opt
@cli_errors
def copy(
    name: str, new_name: str, biz_code: str | None, to_biz: str | None, url: str, reason: str, actor: str, as_json: bool
) -> None:
    """Copy a job to NEW_JOB with its definition and schedule, created stopped."""
    with _opened(url, actor) as s:
        view = s.jobs.copy(s.jobs.resolve(name, biz_code), new_name, biz_code=to_biz, reason=reason)
    _emit(view, as_json, "created stopped: `switchyard job start` starts it")


@exits(*STORE)
@job.command("default-lane")
@click.argument("biz_code", metavar="BUSINESS")
@click.argument("lane", required=False, type=click.Choice([lane.value for lane in Lane]))
@store_url
@reason_opt
@actor_opt
@json_opt
@cli_errors
def default_lane(biz_code: str, lane: str | None, url: str, reason: str, actor: str, as_json: bool) -> None:
    """Show a business's default lane (the lane its jobs get when `--lane` names none),
    or set it to LANE: for jobs added or migrated from now on; a job keeps its lane."""
    with _opened(url, actor) as s:
        got = s.jobs.default_lane(biz_code, None if lane is None else parse_lane(lane), reason=reason)
    if as_json:
        click.echo(json.dumps({"business": biz_code, "default_lane": got.value}))
    else:
        click.echo(f"{biz_code}: default lane {got.value}")


def _stop_like(action: str, doc: str) -> click.Command:
    @exits_as(
        {
            **dict.fromkeys(STORE),
            exitcodes.FAILED: "the job's stop could not settle yet (its trigger was being fired): run it again",
            exitcodes.REFUSED: "refused by the business's state (a job left firing nowhere, or on both sides)",
        }
    )
    @job.command(action, help=doc)
    @name_arg
    @business_opt
    @store_url
    @bus_opts
    @reason_opt
    @actor_opt
    @json_opt
    @cli_errors
    def cmd(
        name: str, biz_code: str | None, url: str, bus_args: BusArgs, reason: str, actor: str, as_json: bool
    ) -> None:
        with _opened(url, actor, bus_args) as s:
            found = s.jobs.resolve(name, biz_code)
            trigger_ids = [t.id for t in s.jobs.triggers(found.job_code) if t.id is not None]
            if action == "delete":
                report: operations.OperationReport | None = s.jobs.delete(found, reason=reason)
            elif action == "stop":
                report = s.jobs.stop(found, reason=reason)
            else:
                report = s.jobs.start(found, reason=reason)
            touched = s.stop_store.stops_of(Scope.TRIGGER, [str(t) for t in (report.changed if report else [])])
            reach = await_relay(s.stop_store, touched, bus_args.reaches_executors)
        out = {
            "job": found.job_code,
            "business": found.biz_code,
            "action": action,
            "at": None if report is None or report.at is None else report.at.isoformat(),
            "triggers": trigger_ids,
            "changed": [] if report is None else report.changed,
            "unchanged": {} if report is None else {str(k): v for k, v in report.unchanged.items()},
            "run_once": [] if report is None else report.run_once,
            "reach": reach.as_json() if touched else None,
        }
        if as_json:
            click.echo(json.dumps(out))
        else:
            verb = {"delete": "deleted", "stop": "stopped", "start": "started"}[action]
            when = f" from {out['at']}" if out["at"] else ""
            click.echo(f"{found.biz_code}:{found.job_code} {verb}{when}")
            for tid, why in out["unchanged"].items():  # type: ignore[union-attr]
                click.echo(f"  trigger {tid}: {why}")
            if out["run_once"]:
                click.echo(f"  runs once at {out['at']} (misfire policy fire_once_now: a fire fell in the stop)")
            if touched:
                tell(reach)
        if report is not None and not report.ok:
            raise SystemExit(exitcodes.FAILED)

    return cmd


_stop_like(
    "stop",
    "Stop a job (pause its trigger): nothing runs at or after now + 1 s, including runs already handed "
    "to the executors.",
)
_stop_like(
    "start",
    "Start a stopped job (resume its trigger) from now + 2 s; under fire_once_now a fire missed while "
    "stopped runs once then.",
)
_stop_like(
    "delete",
    "Delete a job: its triggers are cancelled first (nothing runs at or after now + 1 s), then its "
    "definition goes; its run history stays.",
)


@exits_as(
    {
        **dict.fromkeys(STORE),
        exitcodes.FAILED: "the job's trigger was being fired, or its stop could not settle yet: run it again",
        exitcodes.REFUSED: "a migrated job of a business not cut over is the legacy admin's",
    }
)
@job.command("run")
@name_arg
@business_opt
@click.option(
    "--param",
    "params",
    default=None,
    help="This run's own parameter instead of the job's (the command publishes the run itself: needs --bus).",
)
@click.option(
    "--address",
    "addresses",
    multiple=True,
    help="A bridged xxl-job job only: run on this executor address (repeatable; the job's route "
    "strategy picks among them) instead of its app's registered executors. Needs --bus.",
)
@store_url
@bus_opts
@reason_opt
@actor_opt
@json_opt
@cli_errors
def run_once(
    name: str,
    biz_code: str | None,
    params: str | None,
    addresses: tuple[str, ...],
    url: str,
    bus_args: BusArgs,
    reason: str,
    actor: str,
    as_json: bool,
) -> None:
    """Run a job once now, outside its schedule (a one-shot trigger due now; the scheduler
    fires it on its next tick; with --param this command publishes it). `switchyard runs
    --job JOB` shows the run."""
    with _opened(url, actor, bus_args) as s:
        found = s.jobs.resolve(name, biz_code)
        added = s.jobs.run(found, params=params, addresses=addresses, bus=s.jobs.stops.bus, reason=reason)
    published_here = params is not None or bool(addresses)
    out = {
        "job": found.job_code,
        "business": found.biz_code,
        "trigger_id": added.id,
        "at": added.next_fire_at.isoformat(),
        "params": found.params if params is None else params,
        "addresses": list(addresses),
        "published_by": "this command" if published_here else "scheduler",
    }
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"{found.biz_code}:{found.job_code} runs once at {out['at']} (trigger {added.id})")


__all__ = ["job"]
