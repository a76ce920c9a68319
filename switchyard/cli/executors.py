"""`switchyard executors` (issue 28): the executor registry. Every executor process
(`executor run`, `serve`) heartbeats into the store; each is shown live, lost (3
heartbeats missed: killed, hung or cut off) or stopped (a clean stop, with --all). With
--legacy-url, the executors the xxl-job admin has registered are listed beside them,
marked legacy, live or lost by xxl-job's own rule (90 s without a registration)."""

from __future__ import annotations

import json
from typing import Any

import click

from switchyard.cli.errors import cli_errors
from switchyard.cli.exits import STORE, exits
from switchyard.cli.options import legacy_url_option, store_url
from switchyard.executors import dash, format_age, legacy_executors, native_executors, sorted_rows
from switchyard.wiring import executor_registry, open_existing_store

_COLUMNS = ("BUSINESS", "HOST", "PID", "VERSION", "CONCURRENCY", "IN FLIGHT", "LAST SEEN", "STATE")


@exits(*STORE)
@click.command("executors")
@click.option("--business", "biz_code", default=None, help="Only the executors serving this business (biz_code).")
@click.option("--all", "include_stopped", is_flag=True, help="Also the executors that stopped cleanly (kept 7 days).")
@store_url
@legacy_url_option(
    "An xxl-job admin database whose registered executors (xxl_job_registry) to list beside ours (repeatable).",
    required=False,
    multiple=True,
    dest="legacy_urls",
)
@click.option(
    "--legacy-db-tz",
    default="Asia/Shanghai",
    show_default=True,
    help="Zone the xxl-job admin writes its DATETIME columns in (its JDBC serverTimezone).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def executors(
    biz_code: str | None,
    include_stopped: bool,
    url: str,
    legacy_urls: tuple[str, ...],
    legacy_db_tz: str,
    as_json: bool,
) -> None:
    """The executor processes, live first: business, host, pid, version, concurrency,
    runs in flight, last heartbeat and state."""
    store = open_existing_store(url)
    try:
        rows = native_executors(executor_registry(store), biz_code=biz_code, include_stopped=include_stopped)
    finally:
        store.close()
    for legacy in legacy_urls:
        rows += legacy_executors(legacy, biz_code=biz_code, db_tz=legacy_db_tz)
    rows = sorted_rows(rows)
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no executors" + (f" of {biz_code}" if biz_code else "") + " in the registry")
        return
    click.echo(_table(rows))


def _cells(r: dict[str, Any]) -> tuple[str, ...]:
    state = r["state"] + (" (legacy xxl-job)" if r["legacy"] else "")
    return (
        ",".join(r["businesses"]),
        r["host"],
        dash(r["pid"]),
        dash(r["version"]),
        dash(r["concurrency"]),
        dash(r["in_flight"]),
        format_age(r["age_s"]),
        state,
    )


def _table(rows: list[dict[str, Any]]) -> str:
    cells = [_COLUMNS, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


__all__ = ["executors"]
