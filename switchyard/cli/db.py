"""`switchyard db init|check`."""

from __future__ import annotations

import json

import click

from dbkit.engine import make_engine, missing_sqlite_file
from dbkit.redact import safe_url
from switchyard import exitcodes
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.options import store_url
from switchyard.exitcodes import SCHEMA
from switchyard.schema import check_schema, init_schema

_url = store_url


@exits(*STORE)
@click.group()
def db() -> None:
    """Create and inspect the trigger store."""


@exits(*STORE)
@db.command("init")
@_url
@click.option(
    "--partitions",
    type=click.IntRange(1, 1024),
    default=None,
    help="Partitions of the trigger table (first init only; default 16).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def init_cmd(url: str, partitions: int | None, as_json: bool) -> None:
    """Create the schema (idempotent: a second run changes nothing)."""
    engine = make_engine(url)
    try:
        report = init_schema(engine, partitions)
    finally:
        engine.dispose()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "url": safe_url(url),
                    "created": report.created,
                    "upgraded": report.upgraded,
                    "partitions": report.partitions,
                    "schema_version": report.schema_version,
                }
            )
        )
        return
    click.echo(f"store {safe_url(url)} ({report.dialect}), schema version {report.schema_version}")
    click.echo(f"created: {', '.join(report.created) if report.created else 'nothing (already initialised)'}")
    if report.upgraded:
        click.echo(f"upgraded existing tables: {', '.join(report.upgraded)}")
    click.echo(f"trigger partitions: {len(report.partitions)}")


@exits_as({**dict.fromkeys(STORE), SCHEMA: "the schema is missing or incomplete"})
@db.command("check")
@_url
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def check_cmd(url: str, as_json: bool) -> None:
    """Report what the store holds; exit 4 if the schema is missing or incomplete."""
    missing_file = missing_sqlite_file(url)
    if missing_file is not None:
        # opening it would create an empty database: a check must not leave one behind
        raise CliFailure(f"no store at {missing_file}: run `switchyard db init`", exitcodes.SCHEMA)
    engine = make_engine(url)
    try:
        report = check_schema(engine)
    finally:
        engine.dispose()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "url": safe_url(url),
                    "dialect": report.dialect,
                    "ok": report.ok,
                    "schema_version": report.schema_version,
                    "tables": report.tables,
                    "missing": report.missing,
                    "partitions": report.partitions,
                    "not_utf8mb4": [str(f) for f in report.not_utf8mb4],
                }
            )
        )
    else:
        click.echo(f"store {safe_url(url)} ({report.dialect}), schema version {report.schema_version}")
        for name, rows in report.tables.items():
            click.echo(f"  {name:<24} {rows:>10} rows")
        for name in report.missing:
            click.echo(f"  {name:<24}    MISSING")
        for finding in report.not_utf8mb4:
            click.echo(f"  {finding}")
        click.echo(f"trigger partitions: {len(report.partitions)}")
    if not report.ok:
        raise CliFailure("the schema is missing or incomplete: run `switchyard db init`", exitcodes.SCHEMA)
