"""`switchyard migrate plan|run|quarantine|stream`."""
from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence

import click
from sqlalchemy.engine import Engine

from migrator.apply import Migrator
from migrator.mapping import MappingOptions
from migrator.model import Action, MigrationSummary
from migrator.target import TargetWriter, Write
from readers.ports import LegacyReader
from readers.records import SourceSystem
from scheduler_core.store.engine import make_engine
from switchyard.cli.errors import cli_errors
from switchyard.settings import default_store_url
from switchyard.wiring import open_store

log = logging.getLogger(__name__)

source_opt = click.option("--source", type=click.Choice([s.value for s in SourceSystem]), required=True)
legacy_url = click.option("--legacy-url", required=True, help="URL of the legacy database (read only).")
target_url = click.option("--target-url", default=default_store_url, show_default="$SWITCHYARD_URL",
                          help="URL of the Switchyard store.")
business_opt = click.option("--business", "businesses", multiple=True, help="Business code (repeatable; default all).")
tz_opt = click.option("--legacy-tz", default="Asia/Shanghai", show_default=True,
                      help="Zone of the legacy DATETIME columns and cron expressions.")
glue_opt = click.option("--bridge-glue", is_flag=True, help="Migrate xxl-job GLUE jobs through the bridge.")
api_only_opt = click.option("--api-only", "api_only", multiple=True,
                            help="Business whose xxl-job NONE jobs become API-only jobs (repeatable).")


def open_reader(source: str, engine: Engine, tz: str) -> LegacyReader:
    if source == SourceSystem.XXL_JOB.value:
        from readers.xxljob.reader import XxlJobReader

        return XxlJobReader(engine, admin_tz=tz)
    from readers.batchcenter.reader import BatchCenterReader

    return BatchCenterReader(engine, tz=tz)


def _print_summary(summary: MigrationSummary, as_json: bool, title: str) -> None:
    if as_json:
        click.echo(json.dumps(summary.as_dict(), ensure_ascii=False))
        return
    c = summary.counts
    click.echo(f"{title}: {c['create']} to create, {c['update']} to update, {c['unchanged']} unchanged, "
               f"{c['quarantine']} quarantined, {c['delete']} deleted at the source"
               + (f"; {summary.rows_written} rows written in {summary.seconds:.1f}s" if summary.rows_written else ""))
    for row in summary.rows:
        if row.action is Action.QUARANTINE:
            click.echo(f"  quarantine {row.source}:{row.source_key} ({row.business}) field {row.field}: {row.reason}")
        elif row.action is not Action.UNCHANGED:
            click.echo(f"  {row.action.value:<9} {row.source}:{row.source_key} -> {row.job_code}")


@click.group()
def migrate() -> None:
    """Migrate legacy definitions onto the trigger model, per business."""


@migrate.command("plan")
@source_opt
@legacy_url
@target_url
@business_opt
@tz_opt
@glue_opt
@api_only_opt
@click.option("--json", "as_json", is_flag=True)
@cli_errors
def plan_cmd(source: str, legacy_url: str, target_url: str, businesses: Sequence[str], legacy_tz: str,
             bridge_glue: bool, api_only: Sequence[str], as_json: bool) -> None:
    """What a run would create, update, leave and quarantine. Writes nothing."""
    legacy = make_engine(legacy_url)
    store = open_store(target_url)
    try:
        m = Migrator(open_reader(source, legacy, legacy_tz), TargetWriter(store), store.clock,
                     MappingOptions(api_only_businesses=tuple(api_only), bridge_glue=bridge_glue))
        summary = m.plan(businesses or None)
    finally:
        legacy.dispose()
        store.engine.dispose()
    _print_summary(summary, as_json, "plan")


@migrate.command("run")
@source_opt
@legacy_url
@target_url
@business_opt
@tz_opt
@glue_opt
@api_only_opt
@click.option("--json", "as_json", is_flag=True)
@cli_errors
def run_cmd(source: str, legacy_url: str, target_url: str, businesses: Sequence[str], legacy_tz: str,
            bridge_glue: bool, api_only: Sequence[str], as_json: bool) -> None:
    """Migrate: idempotent (an unchanged re-run writes nothing); bad rows are quarantined."""
    legacy = make_engine(legacy_url)
    store = open_store(target_url)
    try:
        reader = open_reader(source, legacy, legacy_tz)
        after = _mark_migrated(legacy) if source == SourceSystem.BATCH_CENTER.value else None
        m = Migrator(reader, TargetWriter(store), store.clock,
                     MappingOptions(api_only_businesses=tuple(api_only), bridge_glue=bridge_glue))
        summary = _with_progress(lambda progress: m.run(businesses or None, progress=progress, after_commit=after,
                                                        keep_rows=True), quiet=as_json)
    finally:
        legacy.dispose()
        store.engine.dispose()
    _print_summary(summary, as_json, "migrated")


def _mark_migrated(legacy: Engine):  # type: ignore[no-untyped-def]
    from readers.batchcenter.flag import set_migrated

    def after(writes: Sequence[Write]) -> None:
        # only after the target commit: a crash in between is repaired by the next run
        ids = [int(w.source_key) for w in writes if w.action in (Action.CREATE, Action.UPDATE)]
        if ids:
            set_migrated(legacy, ids, True)

    return after


def _with_progress(run, quiet: bool) -> MigrationSummary:  # type: ignore[no-untyped-def]
    if quiet or not sys.stderr.isatty():
        return run(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("migrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True) as bar:
        task = bar.add_task("rows", total=None)
        return run(lambda n: bar.advance(task, n))


@migrate.command("quarantine")
@target_url
@business_opt
@click.option("--json", "as_json", is_flag=True)
@cli_errors
def quarantine_cmd(target_url: str, businesses: Sequence[str], as_json: bool) -> None:
    """Rows that could not be migrated, with the field and the reason."""
    store = open_store(target_url)
    try:
        writer = TargetWriter(store)
        rows = [r for b in (businesses or [None]) for r in writer.quarantined(b)]
    finally:
        store.engine.dispose()
    if as_json:
        click.echo(json.dumps([{k: r[k] for k in ("source_system", "source_key", "business", "field", "reason")}
                               for r in rows], ensure_ascii=False))
        return
    if not rows:
        click.echo("no quarantined rows")
    for r in rows:
        click.echo(f"{r['source_system']}:{r['source_key']} ({r['business']}) field {r['field']}: {r['reason']}")


