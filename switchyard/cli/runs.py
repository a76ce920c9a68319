"""`switchyard runs` (issue 28): the run log, one row per fire and sharding item, read from
the fired records: when it was scheduled, published, received, started and finished, its
result, attempt, lag and message."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from scheduler_core.model import FiredState, JobCode
from scheduler_core.stops import StopService
from scheduler_core.store.job_admin import SqlJobAdmin
from scheduler_core.store.stops import SqlStops
from switchyard import exitcodes
from switchyard.cli.durations import parse_duration
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits
from switchyard.cli.options import store_url
from switchyard.jobs import Jobs, UnknownName
from switchyard.wiring import migrator_store, open_existing_store

STATES = [s.value for s in FiredState]
_TIMES = ("scheduled_at", "fired_at", "published_at", "received_at", "started_at", "result_at")


@exits(*STORE)
@click.command("runs")
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
@cli_errors
def runs(
    job_name: str | None,
    biz_code: str | None,
    states: tuple[str, ...],
    since: str,
    before: str | None,
    limit: int,
    url: str,
    as_json: bool,
) -> None:
    """The run log, newest first: one row per fire and sharding item."""
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
    finally:
        store.engine.dispose()
    out = [_row(r) for r in rows]
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
            + (f"  {r['message']}" if r["message"] else "")
        )


def _iso(ms: int | None) -> str | None:
    return (
        None if ms is None else datetime.fromtimestamp(int(ms) / 1000).astimezone().isoformat(timespec="milliseconds")
    )


def _row(r: dict[str, Any]) -> dict[str, Any]:
    """A fired record as a run: the lag is the executor's start (else its receipt) after the
    scheduled time, what an operator means by "late"."""
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
        # the fired record does not name the executor that ran it (yet): left out, not guessed
        "executor": None,
    }


__all__ = ["runs"]
