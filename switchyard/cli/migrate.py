"""`switchyard migrate plan|run|quarantine|stream`."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import timedelta, timezone

import click
from sqlalchemy.engine import Connection, Engine

from dbkit.engine import make_engine
from migrator.apply import Migrator
from migrator.fire_preview import FirePreview, preview
from migrator.mapping import MappingOptions
from migrator.model import Action, MigrationSummary
from migrator.target import Write
from readers.ports import LegacyReader
from readers.records import SourceSystem, StreamPosition
from readers.timezones import LegacyZones
from readers.xxljob.cron_lineage import CronLineage, parse_version
from readers.xxljob.reader import XxlJobReader
from switchyard import exitcodes
from switchyard.cli.durations import seconds
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.names import known_business
from switchyard.cli.options import BINLOG_URL_ENV, legacy_url_option, log_format, log_level, store_url_option
from switchyard.cli.passwords import BINLOG_PASSWORD_FILE_ENV, password_file_option, warn_if_typed
from switchyard.exitcodes import FAILED, OK, UNREACHABLE
from switchyard.logs import configure_logging
from switchyard.malloc_arenas import cap_malloc_arenas
from switchyard.settings import legacy_zones
from switchyard.wiring import legacy_reader, open_existing_store, target_writer

log = logging.getLogger(__name__)

source_opt = click.option(
    "--source",
    type=click.Choice([s.value for s in SourceSystem]),
    required=True,
    help="The legacy system --legacy-url is a database of.",
)
legacy_url = legacy_url_option("URL of the legacy database (read only).")
# `--target-url` was migrate's own name for the store: still read, hidden from --help
target_url = store_url_option("--target-url")
business_opt = click.option(
    "--business", "biz_codes", multiple=True, help="Only these businesses (biz_code, repeatable; default all)."
)
tz_opt = click.option(
    "--legacy-tz",
    default=None,
    show_default="Asia/Shanghai",
    help="Zone of the legacy DATETIME columns and cron expressions (both).",
)
db_tz_opt = click.option(
    "--legacy-db-tz",
    default=None,
    help="xxl-job: zone its DATETIME columns are written in (the admin's JDBC serverTimezone); "
    "default: --legacy-cron-tz, else --legacy-tz.",
)
cron_tz_opt = click.option(
    "--legacy-cron-tz",
    default=None,
    help="xxl-job: zone its crons run in (the admin JVM's default zone); the migrated "
    "triggers run in it; default: --legacy-db-tz, else --legacy-tz.",
)
glue_opt = click.option("--bridge-glue", is_flag=True, help="Migrate xxl-job GLUE jobs through the bridge.")
xxl_version_opt = click.option(
    "--xxl-job-version",
    "xxl_job_version",
    default=None,
    metavar="X.Y.Z",
    help="xxl-job: the admin's version, which picks the Quartz dialect its crons follow "
    "(2.1.0-3.0.x: Quartz 2.3; 3.1.0 on: 2.5); default: told from the schema "
    "(docs/cron.md).",
)
api_only_opt = click.option(
    "--api-only", "api_only", multiple=True, help="Business whose xxl-job NONE jobs become API-only jobs (repeatable)."
)


def open_reader(
    source: str, bind: Engine | Connection, tz: LegacyZones, xxl_version: str | None = None
) -> LegacyReader:
    return legacy_reader(source, bind, tz, xxl_version=xxl_version)


@dataclass(frozen=True)
class DefinitionArgs:
    """What plan, run and stream are told about the legacy definitions to read and the
    store to write: their shared options, parsed once (definition_options)."""

    source: str
    legacy_url: str
    url: str
    biz_codes: Sequence[str]
    zones: LegacyZones
    xxl_job_version: str | None
    bridge_glue: bool
    api_only: Sequence[str]

    def mapping_options(self) -> MappingOptions:
        return MappingOptions(api_only_businesses=tuple(self.api_only), bridge_glue=self.bridge_glue)

    def reader(self, legacy: Engine | Connection) -> LegacyReader:
        """The legacy reader; a --business the legacy database does not have is an error
        naming it (exit 2), never a plan or a run of nothing that exits 0."""
        reader = open_reader(self.source, legacy, self.zones, self.xxl_job_version)
        if self.biz_codes:
            there = {b.biz_code for b in reader.businesses()}
            unknown = [b for b in dict.fromkeys(self.biz_codes) if b not in there]
            if unknown:
                raise CliFailure(
                    f"no such business in the {self.source} database: {', '.join(unknown)}"
                    + (f" (businesses: {', '.join(sorted(there)[:20])})" if there else ""),
                    exitcodes.USAGE,
                )
        return reader


def definition_options(fn):  # type: ignore[no-untyped-def]
    """The options plan, run and stream share. They reach the command as one `defs`
    (DefinitionArgs); the three zone options as its `zones` (switchyard.settings.legacy_zones)."""

    @functools.wraps(fn)
    def with_zones(*args, legacy_tz, legacy_db_tz, legacy_cron_tz, **kwargs):  # type: ignore[no-untyped-def]
        source, xxl_job_version = kwargs["source"], kwargs["xxl_job_version"]
        try:
            zones = legacy_zones(source, legacy_tz, legacy_db_tz, legacy_cron_tz)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        if xxl_job_version is not None:
            if source != SourceSystem.XXL_JOB.value:
                raise click.UsageError("--xxl-job-version is for --source xxl-job")
            try:
                parse_version(xxl_job_version)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
        given = {f.name: kwargs.pop(f.name) for f in fields(DefinitionArgs) if f.name != "zones"}
        return fn(*args, defs=DefinitionArgs(zones=zones, **given), **kwargs)

    out = with_zones
    for opt in reversed(
        (
            source_opt,
            legacy_url,
            target_url,
            business_opt,
            tz_opt,
            db_tz_opt,
            cron_tz_opt,
            xxl_version_opt,
            glue_opt,
            api_only_opt,
        )
    ):
        out = opt(out)
    return out


def _print_summary(summary: MigrationSummary, *, as_json: bool, title: str) -> None:
    if as_json:
        click.echo(json.dumps(summary.as_dict(), ensure_ascii=False))
        return
    c = summary.counts
    click.echo(
        f"{title}: {c['create']} to create, {c['update']} to update, {c['unchanged']} unchanged, "
        f"{c['quarantine']} quarantined, {c['delete']} deleted at the source"
        + (f"; {summary.rows_written} rows written in {summary.seconds:.1f}s" if summary.rows_written else "")
    )
    for note in summary.notes:
        click.echo(f"  note: {note}")
    for row in summary.rows:
        if row.action is Action.QUARANTINE:
            click.echo(f"  quarantine {row.source}:{row.source_key} ({row.biz_code}) field {row.field}: {row.reason}")
        elif row.action is not Action.UNCHANGED:
            click.echo(f"  {row.action.value:<9} {row.source}:{row.source_key} -> {row.job_code}")


@exits(*STORE, FAILED)
@click.group()
def migrate() -> None:
    """Migrate legacy definitions onto the trigger model, per business."""


@exits(*STORE)
@migrate.command("plan")
@definition_options
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def plan_cmd(defs: DefinitionArgs, as_json: bool) -> None:
    """What a run would create, update, leave and quarantine, and each cron job's next
    three fire times (UTC and the cron zone) to compare with the legacy admin's. Writes
    nothing."""
    businesses, zones = defs.biz_codes, defs.zones
    legacy = make_engine(defs.legacy_url, must_exist=True)
    store = open_existing_store(defs.url)
    try:
        reader = defs.reader(legacy)
        m = Migrator(reader, target_writer(store), store.clock, defs.mapping_options())
        summary = m.plan(businesses or None)
        now = store.clock.now()
        previews = [p for d in reader.definitions(businesses or None) if (p := preview(d, now)) is not None]
        # xxl-job: the Quartz line its crons follow, and how that was told (the batch
        # center's contract names no Quartz version: the current line, 2.5)
        cron = reader.cron_lineage() if isinstance(reader, XxlJobReader) else CronLineage("2.5", "the batch center")
    finally:
        legacy.dispose()
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    **summary.as_dict(),
                    "zones": {"db": zones.db, "cron": zones.cron},
                    "cron_dialect": {"quartz": cron.dialect, "why": cron.why},
                    "next_fires": [p.as_dict() for p in previews],
                },
                ensure_ascii=False,
            )
        )
        return
    _print_summary(summary, as_json=False, title="plan")
    click.echo(f"crons follow Quartz {cron.dialect} ({cron.why})")
    _print_previews(previews, zones)


def _print_previews(previews: Sequence[FirePreview], zones: LegacyZones) -> None:
    if not previews:
        return
    click.echo(
        f"next fires (DATETIMEs read in {zones.db}; crons run in {zones.cron}); compare with the admin's "
        "next trigger time:"
    )
    for p in previews:
        utc = ", ".join(f.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") for f in p.fires)
        local = ", ".join(f.strftime("%Y-%m-%d %H:%M:%S%z") for f in p.fires)
        click.echo(f"  {p.source_key} ({p.biz_code}) {p.cron!r}: UTC {utc or '(none)'} | {p.zone} {local or '(none)'}")
        if p.legacy_next_matches is False and p.legacy_next is not None:
            legacy = p.legacy_next.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
            click.echo(
                f"    warning: the legacy next trigger time {legacy} is not a fire of {p.cron!r} in {p.zone}: "
                "is --legacy-cron-tz the admin JVM's zone?"
            )


@exits(*STORE, FAILED)
@migrate.command("run")
@definition_options
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def run_cmd(defs: DefinitionArgs, as_json: bool) -> None:
    """Migrate: idempotent (an unchanged re-run writes nothing); bad rows are quarantined."""
    businesses = defs.biz_codes
    legacy = make_engine(defs.legacy_url, must_exist=True)
    store = open_existing_store(defs.url)
    try:
        reader = defs.reader(legacy)
        after = _mark_migrated(legacy) if defs.source == SourceSystem.BATCH_CENTER.value else None
        m = Migrator(reader, target_writer(store), store.clock, defs.mapping_options())
        summary = _with_progress(
            lambda progress: m.run(businesses or None, progress=progress, after_commit=after, keep_rows=True),
            quiet=as_json,
        )
    finally:
        legacy.dispose()
        store.close()
    _print_summary(summary, as_json=as_json, title="migrated")


def _mark_migrated(legacy: Engine):  # type: ignore[no-untyped-def]
    from readers.batchcenter.flag import set_migrated

    def after(writes: Sequence[Write]) -> None:
        # only after the target commit: a crash in between is repaired by the next run
        # and an unchanged row whose flag a crash left unset (flag_pending) gets it now
        ids = [int(w.source_key) for w in writes if w.action in (Action.CREATE, Action.UPDATE) or w.flag_pending]
        if ids:
            set_migrated(legacy, ids, value=True)

    return after


def _with_progress(run, quiet: bool) -> MigrationSummary:  # type: ignore[no-untyped-def]
    if quiet or not sys.stderr.isatty():
        return run(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("migrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
    ) as bar:
        task = bar.add_task("rows", total=None)
        return run(lambda n: bar.advance(task, n))


@exits(*STORE)
@migrate.command("quarantine")
@target_url
@business_opt
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def quarantine_cmd(url: str, biz_codes: Sequence[str], as_json: bool) -> None:
    """Rows that could not be migrated, with the field and the reason."""
    store = open_existing_store(url)
    try:
        writer = target_writer(store)
        wanted: list[str | None] = [*biz_codes] or [None]
        rows = [r for b in wanted for r in writer.quarantined(b)]
        # a business whose every row was quarantined is known by those rows alone
        held = {r["business"] for r in rows}
        unknown = [b for b in biz_codes if b not in held and not known_business(store, writer.own, b)]
        if unknown:
            raise CliFailure(f"no such business: {', '.join(unknown)}", exitcodes.USAGE)
    finally:
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                [{k: r[k] for k in ("source_system", "source_key", "business", "field", "reason")} for r in rows],
                ensure_ascii=False,
            )
        )
        return
    if not rows:
        click.echo("no quarantined rows")
    for r in rows:
        click.echo(f"{r['source_system']}:{r['source_key']} ({r['business']}) field {r['field']}: {r['reason']}")


POLL_FALLBACK_S = 2.0  # the polling interval when the binlog cannot be read and --poll was not given


@exits_as(
    {
        **dict.fromkeys(STORE),
        OK: "stopped by SIGTERM or SIGINT",
        FAILED: None,
        UNREACHABLE: "a database unreachable, or the change stream stalled",
    }
)
@migrate.command("stream")
@definition_options
@click.option(
    "--binlog-url",
    envvar=BINLOG_URL_ENV,
    show_envvar=True,
    default=None,
    callback=warn_if_typed,
    help="URL of a user with SELECT, REPLICATION SLAVE, REPLICATION CLIENT (default: --legacy-url; "
    "config file: binlog_url).",
)
@click.option(
    "--server-id",
    type=click.IntRange(1, 2**32 - 1),
    default=None,
    help="Replica server id of this reader (unique per reader; default from the stream id).",
)
@click.option(
    "--poll",
    "poll",
    type=seconds(0.1),
    default=None,
    help="No binlog: poll update_time at this interval (e.g. 2s). Chosen by itself (every "
    f"{POLL_FALLBACK_S:g} s) when the binlog user lacks the REPLICATION grants.",
)
@click.option(
    "--key-compare-every",
    "compare_every",
    type=seconds(0.1),
    default="10s",
    show_default=True,
    help="Polling: the interval between key compares (how deletes are found).",
)
@click.option(
    "--key-compare-batch",
    "compare_batch",
    type=click.IntRange(1),
    default=1000,
    show_default=True,
    help="Polling: keys compared per pass (the work of one pass is bounded by it).",
)
@click.option(
    "--stall-timeout",
    type=seconds(1),
    default="30s",
    show_default=True,
    help="A change stream silent this long while the legacy database moves on is stalled (exit 3).",
)
@click.option(
    "--progress-every",
    type=seconds(0.1),
    default="10s",
    show_default=True,
    help="Binlog: how often the checkpoint follows the position reached through other databases' "
    "transactions on the same server (a check that the stream has caught up waits for it).",
)
@password_file_option("binlog_url", "--binlog-url", "--binlog-password-file", BINLOG_PASSWORD_FILE_ENV)
@log_level
@log_format
@cli_errors
def stream_cmd(
    defs: DefinitionArgs,
    binlog_url: str | None,
    server_id: int | None,
    poll: timedelta | None,
    compare_every: timedelta,
    compare_batch: int,
    stall_timeout: timedelta,
    progress_every: timedelta,
    log_level: str,
    log_format: str,
) -> None:
    """Snapshot, then apply every legacy change until stopped (SIGTERM), for businesses
    not yet cut over. Restart-safe: the checkpoint is written with each change. Without
    the binlog grants it polls instead (a one-line notice says so)."""
    import zlib

    poll_s = None if poll is None else poll.total_seconds()
    compare_every_s = compare_every.total_seconds()

    from sqlalchemy.engine import make_url

    from migrator.stream import DEFINITION_TABLE, KeyCompare, StreamMigrator, polling_batches
    from readers.streams import (
        BinlogChangeStream,
        PollingChangeStream,
        StreamPermissionError,
        check_binlog_source,
        check_replication_grants,
        consistent_snapshot,
    )
    from switchyard.cli.signals import stop_event

    configure_logging(log_level, log_format)
    cap_malloc_arenas()  # before the threads start (switchyard/malloc_arenas.py)
    source, legacy_url, businesses, zones = defs.source, defs.legacy_url, defs.biz_codes, defs.zones
    legacy = make_engine(legacy_url, must_exist=True)
    store = open_existing_store(defs.url)
    stop = stop_event()
    try:
        reader = defs.reader(legacy)
        stream_id = f"{source}@{make_url(legacy_url).render_as_string(hide_password=True)}" + (
            f"#{','.join(sorted(businesses))}" if businesses else ""
        )
        after = _mark_migrated(legacy) if source == SourceSystem.BATCH_CENTER.value else None
        writer = target_writer(store)
        sm = StreamMigrator(
            reader=reader,
            writer=writer,
            migrator=Migrator(reader, writer, store.clock, defs.mapping_options()),
            stream_id=stream_id,
            biz_codes=set(businesses) or None,
            after_commit=after,
        )
        system = SourceSystem(source)
        conn_settings: dict[str, object] = {}
        if poll_s is None:
            u = make_url(binlog_url or legacy_url)
            conn_settings = {
                "host": u.host or "127.0.0.1",
                "port": u.port or 3306,
                "user": u.username,
                "password": u.password or "",
            }
            check_binlog_source(conn_settings)  # a wrong binlog user fails before the snapshot writes
            try:
                check_replication_grants(conn_settings)
            except StreamPermissionError as exc:
                poll_s = POLL_FALLBACK_S
                _poll_notice(exc, DEFINITION_TABLE[system], poll_s, compare_every_s)
        position = sm.checkpoint()
        if position is None:
            try:
                with consistent_snapshot(legacy) as (conn, pos):
                    sm.snapshot(defs.reader(conn), pos)
            except StreamPermissionError:
                if poll_s is None:
                    raise
                # polling needs no binlog position (MySQL gives one only with REPLICATION
                # CLIENT): a plain read, then the first poll reads every row once more
                pos = StreamPosition("poll", 0)
                sm.snapshot(reader, pos)
            position = pos
            click.echo(f"snapshot applied at {pos.log_file}:{pos.log_pos}", err=True)
        else:
            click.echo(f"resuming at {position.log_file}:{position.log_pos}", err=True)

        def poll_from(at: StreamPosition | None, every: float):  # type: ignore[no-untyped-def]
            start = at if at is not None and at.log_file == "poll" else None  # after a binlog position: poll all once
            poller = PollingChangeStream(
                legacy, table=DEFINITION_TABLE[system], key_columns=("id",), tz=zones.db, start=start
            )
            return polling_batches(
                poller,
                writer,
                system,
                stop,
                interval_s=every,
                compare=KeyCompare(every_s=compare_every_s, keys_per_pass=compare_batch),
                start=at,
            )

        if poll_s is not None:
            batches = poll_from(position, poll_s)
        else:
            schema = make_url(legacy_url).database
            binlog = BinlogChangeStream(
                conn_settings,
                server_id=server_id or (zlib.crc32(stream_id.encode()) % 2**31 + 1000),
                schemas=[schema] if schema else [],
                tables=[DEFINITION_TABLE[system], "xxl_job_group", "bc_biz"],
                start=position,
                stall_timeout_s=stall_timeout.total_seconds(),
                progress_every_s=progress_every.total_seconds(),
            )
            batches = binlog.batches(stop)
        try:
            stats = sm.follow(batches, stop)
        except StreamPermissionError as exc:
            if poll_s is not None:
                raise
            # a grant the preflight could not see (e.g. through a role) is missing after all
            _poll_notice(exc, DEFINITION_TABLE[system], POLL_FALLBACK_S, compare_every_s)
            stats = sm.follow(poll_from(sm.stats.position or position, POLL_FALLBACK_S), stop)
        click.echo(
            f"stopped: {stats.batches} transactions, {stats.changes} row changes, {stats.applied} applied, "
            f"{stats.unchanged} unchanged by digest"
            + (f" at {stats.position.log_file}:{stats.position.log_pos}" if stats.position else ""),
            err=True,
        )
    finally:
        legacy.dispose()
        store.close()


def _poll_notice(exc: Exception, table: str, every_s: float, compare_every_s: float) -> None:
    why = str(exc).split(". A binlog change stream needs", 1)[0]
    click.echo(
        f"notice: {why}; polling {table}.update_time every {every_s:g} s instead (deletes found by a key "
        f"compare every {compare_every_s:g} s; grant REPLICATION SLAVE and REPLICATION CLIENT to read the "
        "binlog)",
        err=True,
    )
