"""`switchyard runs` (issue 28): the run log, one row per fire and sharding item, read from
the fired records: when it was scheduled, published, received, started and finished, its
result, attempt, lag, message and the executor process that ran it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import click

from scheduler_core.model import FiredState, JobCode
from scheduler_core.stops import StopService
from scheduler_core.store import run_log
from scheduler_core.store.job_admin import SqlJobAdmin
from scheduler_core.store.purge import MAX_BATCH, PurgeProgress, SqlPurge
from scheduler_core.store.stops import SqlStops
from scheduler_core.times import to_ms
from switchyard import exitcodes
from switchyard.cli.durations import Duration, parse_duration
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits
from switchyard.cli.options import store_url
from switchyard.jobs import Jobs, UnknownName
from switchyard.wiring import executor_registry, migrator_store, open_existing_store

STATES = [s.value for s in FiredState]
# a younger final run may still have a result redelivered (its follow-up claim must stand)
MIN_RETENTION = timedelta(hours=1)
_TIMES = ("scheduled_at", "fired_at", "published_at", "received_at", "started_at", "result_at")


@exits(*STORE)
@click.group("runs", invoke_without_command=True)
@click.option("--job", "job_name", default=None, help="Only this job (its code, or business:job).")
@click.option("--business", "biz_code", default=None, help="Only this business (its biz_code).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(STATES),
    help="Only runs in this state (repeatable): pending is handed out, no result yet.",
)
@click.option(
    "--since", default="2h", show_default=True, help="Only runs scheduled this long ago or later (e.g. 30m, 2h, 7d)."
)
@click.option(
    "--before",
    default=None,
    help="Only runs scheduled before this ISO time with offset: the next page is --before the last row's scheduled_at.",
)
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True, help="At most this many rows.")
@store_url
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@click.pass_context
@cli_errors
def runs(
    ctx: click.Context,
    job_name: str | None,
    biz_code: str | None,
    states: tuple[str, ...],
    since: str,
    before: str | None,
    limit: int,
    url: str,
    as_json: bool,
) -> None:
    """The run log, newest first: one row per fire and sharding item (subcommands: the
    log lines of one run, and the retention purge)."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise CliFailure(f"bad input: since: {exc}", exitcodes.USAGE) from None
    until = None
    if before is not None:
        try:
            until = datetime.fromisoformat(before)
        except ValueError:
            raise CliFailure(f"bad input: before: not an ISO time: {before!r}", exitcodes.USAGE) from None
        if until.tzinfo is None:
            raise CliFailure(f"bad input: before: {before!r} needs a zone offset", exitcodes.USAGE)
    store = open_existing_store(url)
    try:
        jobs = Jobs(store, migrator_store(store), StopService(SqlStops(store)), "")  # reads only
        job_code: JobCode | None = None
        try:
            if biz_code is not None:
                jobs.check_business(biz_code)
            if job_name is not None:
                found = jobs.resolve(job_name, biz_code)
                job_code, biz_code = found.job_code, found.biz_code
        except UnknownName as exc:
            raise CliFailure(str(exc.args[0]), exitcodes.USAGE) from None
        now = store.clock.now()
        rows = SqlJobAdmin(store).runs(
            job_code=job_code, biz_code=biz_code, states=states, since=now - window, before=until, limit=limit
        )
        names = executor_registry(store).names(r["executor"] for r in rows)
    finally:
        store.engine.dispose()
    out = [_row(r, names) for r in rows]
    if as_json:
        click.echo(json.dumps(out))
        return
    if not out:
        click.echo(f"no runs since {(now - window).isoformat()}")
    for r in out:
        lag = "-" if r["lag_ms"] is None else f"{r['lag_ms']} ms"
        click.echo(
            f"{r['scheduled_at']}  {r['business']}:{r['job']}  item {r['item']}/{r['items']}  "
            f"{r['result']:<9} attempt {r['attempt']}  lag {lag}"
            + (f"  finished {r['finished_at']}" if r["finished_at"] else "")
            + (f"  executor {r['executor_name'] or r['executor']}" if r["executor"] else "")
            + (f"  {r['message']}" if r["message"] else "")
        )


def _iso(ms: int | None) -> str | None:
    return (
        None if ms is None else datetime.fromtimestamp(int(ms) / 1000).astimezone().isoformat(timespec="milliseconds")
    )


def _row(r: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """A fired record as a run: the lag is the executor's start (else its receipt) after the
    scheduled time, what an operator means by "late". The executor is the instance id of
    the process that ran it (`switchyard executors --json`), with its registry name while
    the registry keeps the row; None for a run with no result yet, or whose executor is
    older than the field."""
    began = r["started_at"] if r["started_at"] is not None else r["received_at"]
    return {
        "command_id": r["command_id"],
        "trigger_id": r["trigger_id"],
        "job": r["job_code"],
        "business": r["biz_code"],
        "item": r["item_index"],
        "items": r["item_total"],
        "scheduled_at": _iso(r["scheduled_at"]),
        "published_at": _iso(r["published_at"]),
        "received_at": _iso(r["received_at"]),
        "started_at": _iso(r["started_at"]),
        "finished_at": _iso(r["result_at"]),
        "result": r["state"],
        "attempt": r["attempt"],
        "misfired": bool(r["misfired"]),
        "lag_ms": None if began is None else int(began) - int(r["scheduled_at"]),
        "message": r["message"] or "",
        "executor": r["executor"],
        "executor_name": names.get(r["executor"] or ""),
    }


@exits(*STORE)
@runs.command("log")
@click.argument("fired_id")
@click.option("--item", type=click.IntRange(0), default=None, help="Only this sharding item's lines.")
@store_url
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def log_lines(fired_id: str, item: int | None, url: str, as_json: bool) -> None:
    """The handler's own log lines of a run (FIRED_ID: the run's command id, as `runs`
    shows it), per sharding item and attempt, as the SDK kept them (64 KiB per run)."""
    store = open_existing_store(url)
    try:
        record = run_log.one(store, fired_id)
        if record is None:
            raise CliFailure(f"bad input: fired id: no fired record {fired_id!r}", exitcodes.USAGE)
        lines = run_log.logs(store, fired_id, item)
        names = executor_registry(store).names([record["executor"]])
    finally:
        store.engine.dispose()
    out = [{**r, "logged_at": _iso(r["logged_at"])} for r in lines]
    if as_json:
        click.echo(json.dumps({"run": _row(record, names), "logs": out}))
        return
    run = _row(record, names)
    if run["executor"]:
        click.echo(f"{fired_id}: {run['result']}, run by executor {run['executor_name'] or run['executor']}")
    if not out:
        click.echo(f"no log lines kept for {fired_id}" + (f" item {item}" if item is not None else ""))
    for r in out:
        cut = " (truncated)" if r["truncated"] else ""
        click.echo(f"--- item {r['item_index']} attempt {r['attempt']} at {r['logged_at']}{cut}")
        click.echo(r["lines"])


@exits(*STORE)
@runs.command("purge")
@click.option(
    "--older-than",
    "older_than",
    type=Duration(minimum=MIN_RETENTION),
    required=True,
    help="Delete final runs scheduled longer ago than this (e.g. 30d; at least 1h).",
)
@click.option(
    "--batch", type=click.IntRange(1, MAX_BATCH), default=5000, show_default=True, help="Fired records per batch."
)
@click.option(
    "--pause",
    type=Duration(maximum=timedelta(minutes=1)),
    default="50ms",
    show_default=True,
    help="Pause between batches, so the scheduler's own transactions go first.",
)
@click.option("--business", "biz_code", default=None, help="Only this business's runs (its biz_code).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@store_url
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def purge(
    older_than: timedelta,
    batch: int,
    pause: timedelta,
    biz_code: str | None,
    dry_run: bool,
    url: str,
    as_json: bool,
) -> None:
    """The run log's retention: delete the fired records scheduled before now minus
    --older-than that are final (never one pending, published, received, or skipped only
    provisionally by a stop or fence), with their log lines, follow-up claims and kill
    requests, in batches by primary key with a pause between them."""
    store = open_existing_store(url)
    try:
        if biz_code is not None:
            try:
                Jobs(store, migrator_store(store), StopService(SqlStops(store)), "").check_business(biz_code)
            except UnknownName as exc:
                raise CliFailure(str(exc.args[0]), exitcodes.USAGE) from None
        cutoff = store.clock.now() - older_than
        verb = "would delete" if dry_run else "deleted"

        def progress(p: PurgeProgress) -> None:
            if not as_json:
                click.echo(
                    f"batch {p.batches}: {verb} {p.fired:,} fired record(s), {p.run_logs:,} log(s) so far "
                    f"(up to {_iso(p.newest_ms)})",
                    err=True,
                )

        done = SqlPurge(store).run(
            to_ms(cutoff),
            batch=batch,
            biz_code=biz_code,
            dry_run=dry_run,
            pause_s=pause.total_seconds(),
            on_batch=progress,
        )
    finally:
        store.engine.dispose()
    body = {**done.as_dict(), "cutoff": cutoff.isoformat(timespec="seconds"), "business": biz_code}
    if as_json:
        click.echo(json.dumps(body))
        return
    click.echo(
        f"{verb} {done.fired:,} fired record(s) scheduled before {body['cutoff']}"
        + (f" of {biz_code}" if biz_code else "")
        + f", {done.run_logs:,} run log(s), {done.followup_claims:,} follow-up claim(s), "
        f"{done.kill_requests:,} kill request(s), in {done.batches} batch(es)"
    )


__all__ = ["runs"]
