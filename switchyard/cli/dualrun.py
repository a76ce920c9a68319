"""`switchyard dualrun compare|watch`: compare the legacy and the new path per business."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import tomllib
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from dbkit.engine import make_engine
from dualrun.boundary_store import record_cutover_boundary
from dualrun.collect import CompareRequest, compare_business, default_window, fetch_businesses
from dualrun.errors import DualRunError, NoSourceSystem, UnknownBusiness
from dualrun.model import Comparison, StreamState, as_dict, iso
from dualrun.ports import BacklogProbe, NewSide
from dualrun.settings import CompareSettings, Thresholds, override, thresholds_from_mapping
from dualrun.store import DualRunStore
from dualrun.verdict_store import put_comparison
from dualrun.watch import Watch
from readers.errors import MissingTables, ReaderError, SourceUnavailable, UnknownLineage, UnknownSystem
from readers.ports import LegacyReader
from readers.records import SourceSystem
from readers.timezones import LegacyZones
from scheduler_core.ports import CatalogReads, Clocked
from switchyard import exitcodes
from switchyard.cli.durations import POSITIVE, parse_duration
from switchyard.cli.errors import CliFailure, cli_errors, redact
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.names import known_business, refuse_native
from switchyard.cli.options import (
    BUS_ENV,
    legacy_url_option,
    legacy_zone_options,
    log_format,
    log_level,
    pulsar_admin,
    pulsar_token,
    store_url,
    topic_prefix,
)
from switchyard.exitcodes import FAILED, OK
from switchyard.logs import configure_logging
from switchyard.settings import parse_zones
from switchyard.wiring import (
    dualrun_store,
    legacy_reader,
    migrator_store,
    open_bus,
    open_existing_store,
    stream_catchup,
)

if TYPE_CHECKING:
    from migrator.store import MigratorStore

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

EPILOG = """\b
Examples:
  switchyard dualrun compare --business reminder --source xxl-job \\
      --legacy-url mysql+pymysql://ro@db/xxl_job --since 2h
  switchyard dualrun compare --business sop --legacy-url sqlite:///bc.db --json > verdict.json
  switchyard dualrun watch --business reminder --business sop --every 1m --legacy-url ..."""


def open_reader(source: SourceSystem, legacy_url: str, tz: str | LegacyZones) -> LegacyReader:
    """The legacy reader of a source system (the readers package's adapters)."""
    return legacy_reader(source.value, make_engine(legacy_url, must_exist=True), tz)


def domain_errors(fn: F) -> F:
    """Comparator and reader failures as one line and a documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (NoSourceSystem, UnknownBusiness, UnknownSystem) as exc:
            raise CliFailure(str(exc), exitcodes.USAGE) from None
        except SourceUnavailable as exc:
            raise CliFailure(str(exc), exitcodes.UNREACHABLE) from None
        except (MissingTables, UnknownLineage) as exc:
            raise CliFailure(str(exc), exitcodes.SCHEMA) from None
        except (DualRunError, ReaderError) as exc:
            raise CliFailure(str(exc), exitcodes.FAILED) from None
        except ImportError as exc:
            raise CliFailure(f"legacy reader not available: {exc}", exitcodes.FAILED) from None

    return wrapper  # type: ignore[return-value]


def parse_when(text: str | None, now: datetime) -> datetime | None:
    """ISO-8601 (a naive value is UTC), or a duration meaning 'that long ago' ('2h')."""
    if text is None:
        return None
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither an ISO-8601 time nor a duration like 2h or 1h30m") from None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


class ComparedStore(NewSide, CatalogReads, Clocked, Protocol):
    """What a dual-run command reads of the trigger store (the new side, the names it
    knows, its clock) and closes when done."""

    @abstractmethod
    def close(self) -> None: ...


@dataclass(frozen=True)
class ComparisonInputs:
    """What every comparison of a command needs: the store, the legacy side, settings."""

    store: ComparedStore
    own: DualRunStore  # dual-run's store beside it, with the migrator's records (wiring.dualrun_store)
    migrator: MigratorStore  # the migrator's store beside it (wiring.migrator_store): names, stream state
    legacy_url: str
    legacy_tz: LegacyZones  # the DATETIMEs' zone (the log) and the crons' (expected fires)
    source: SourceSystem | None
    settings_file: dict[str, Any]
    base: CompareSettings
    probe: BacklogProbe | None
    readers: dict[SourceSystem, LegacyReader]
    overrides: dict[str, Any] = field(default_factory=dict)  # the command line's thresholds: above the file's

    def reader(self, source: SourceSystem) -> LegacyReader:
        if source not in self.readers:
            self.readers[source] = open_reader(source, self.legacy_url, self.legacy_tz)
        return self.readers[source]

    def settings_for(self, biz_code: str) -> CompareSettings:
        thresholds = override(thresholds_from_mapping(self.settings_file, biz_code), self.overrides)
        return replace(self.base, thresholds=thresholds)

    def compare(
        self,
        biz_code: str,
        *,
        since: str | None = None,
        until: str | None = None,
        legacy_biz_code: str | None = None,
        shadow: bool | None = None,
    ) -> tuple[Comparison, int]:
        now = self.store.clock.now()
        settings = self.settings_for(biz_code)
        window = default_window(now, settings.window, parse_when(since, now), parse_when(until, now))
        request = CompareRequest(
            biz_code=biz_code, window=window, source=self.source, legacy_biz_code=legacy_biz_code, shadow=shadow
        )
        source = self.source or _stored_source(self.own, biz_code)
        result = compare_business(
            self.store, self.own, self.reader(source), request, settings=settings, now=now, probe=self.probe
        )
        result = replace(result, stream=self.stream_state(biz_code, source, now))
        return result, put_comparison(self.own, result)

    def stream_state(self, biz_code: str, source: SourceSystem, now: datetime) -> StreamState | None:
        """The business's change stream now (no waiting), as the cutover gate will judge it;
        None when no stream follows it or the legacy database has no binlog."""
        legacy = make_engine(self.legacy_url, must_exist=True)
        try:
            check = stream_catchup(self.migrator, legacy, self.legacy_tz.db)  # polled update_times: the DATETIMEs' zone
            if check is None:
                return None
            check.wait = timedelta(0)
            state = check.check(biz_code, source.value)
        finally:
            legacy.dispose()
        return (
            None
            if state is None
            else StreamState(
                caught_up=state.caught_up, sentence=state.sentence, checked_at=now, stream_id=state.stream_id
            )
        )


def _stored_source(own: DualRunStore, biz_code: str) -> SourceSystem:
    for info in fetch_businesses(own):
        if info.biz_code == biz_code:
            refuse_native(biz_code, info.source_system, "compare with")
            return SourceSystem(info.source_system)
    raise NoSourceSystem(biz_code)


def _load_thresholds(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"cannot read thresholds file {path}: {exc}") from None


def _probe(bus_url: str | None, admin_url: str | None, token_env: str, prefix: str) -> BacklogProbe | None:
    if not bus_url or not admin_url:
        return None
    return open_bus(bus_url, admin_url=admin_url, token=os.environ.get(token_env), topic_prefix=prefix)  # type: ignore[return-value]


_DEFAULT = Thresholds()


def _minutes(d: timedelta) -> str:
    return f"{d.total_seconds() / 60:g}m"


def sources_options(fn: F) -> F:
    opts = [
        store_url,
        legacy_url_option("URL of the legacy database (read only)."),
        click.option(
            "--source",
            type=click.Choice([s.value for s in SourceSystem]),
            default=None,
            help="Legacy system (default: the business's source system in the store).",
        ),
        click.option(
            "--legacy-tz",
            default=None,
            show_default="Asia/Shanghai",
            help="Zone of the legacy DATETIME columns and cron expressions (both).",
        ),
        click.option(
            "--legacy-db-tz",
            default=None,
            help="xxl-job: zone of its DATETIME columns, the log's trigger times (default: as the cron zone).",
        ),
        click.option(
            "--legacy-cron-tz", default=None, help="xxl-job: zone its crons run in (default: as the database zone)."
        ),
        click.option(
            "--window",
            "window",
            default="1h",
            show_default=True,
            type=POSITIVE,
            help="Length of the compared window when --since is not given.",
        ),
        click.option(
            "--baseline-offset",
            default=None,
            type=POSITIVE,
            help="How far back the A/A baseline window lies (default: one window length).",
        ),
        click.option(
            "--thresholds",
            "thresholds_file",
            default=None,
            type=click.Path(dir_okay=False),
            help="TOML file: [defaults] and [business.<B>] threshold overrides.",
        ),
        click.option(
            "--min-window",
            default=None,
            type=POSITIVE,
            help="Shortest window a verdict may be ready on (overrides the thresholds file; "
            f"default {_minutes(_DEFAULT.min_window)}).",
        ),
        click.option(
            "--min-fires-per-job",
            type=click.IntRange(0),
            default=None,
            help="Expected fires in the window every recurring job needs for a ready verdict (overrides "
            f"the thresholds file; default {_DEFAULT.min_fires_per_job}).",
        ),
        click.option(
            "--bus",
            "bus_url",
            envvar=BUS_ENV,
            show_envvar=True,
            default=None,
            help="pulsar://HOST:PORT, for consumer lag (with --pulsar-admin; config file: bus).",
        ),
        pulsar_admin,
        pulsar_token,
        topic_prefix,
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _sources(
    url: str,
    legacy_url: str,
    source: str | None,
    legacy_tz: str | None,
    legacy_db_tz: str | None,
    legacy_cron_tz: str | None,
    window: timedelta,
    baseline_offset: timedelta | None,
    thresholds_file: str | None,
    min_window: timedelta | None,
    min_fires_per_job: int | None,
    bus_url: str | None,
    pulsar_admin: str | None,
    pulsar_token_env: str,
    topic_prefix: str,
) -> ComparisonInputs:
    overrides = {
        k: v for k, v in (("min_window", min_window), ("min_fires_per_job", min_fires_per_job)) if v is not None
    }
    try:
        zones = parse_zones(legacy_tz, legacy_db_tz, legacy_cron_tz)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return ComparisonInputs(
        store=(store := open_existing_store(url)),
        own=dualrun_store(store),
        migrator=migrator_store(store),
        legacy_url=legacy_url,
        legacy_tz=zones,
        source=SourceSystem(source) if source else None,
        settings_file=_load_thresholds(thresholds_file),
        base=CompareSettings(window=window, baseline_offset=baseline_offset),
        probe=_probe(bus_url, pulsar_admin, pulsar_token_env, topic_prefix),
        readers={},
        overrides=overrides,
    )


def render_text(c: Comparison, comparison_id: int) -> str:
    head = (
        f"{c.biz_code}: {'READY' if c.is_ready else 'NOT READY'} ({c.source}, {c.mode.value}, "
        f"{iso(c.window.start)} .. {iso(c.window.end)}; comparison #{comparison_id})"
    )
    lines = [head, *(f"  - {r}" for r in c.reasons), *(f"  ! {w}" for w in c.warnings)]
    for name, m in (("legacy", c.legacy), ("new", c.new), ("baseline", c.baseline)):
        rate = "n/a" if m.success_rate is None else f"{m.success_rate * 100:.1f}%"
        p99 = "n/a" if m.lag.p99 is None else f"{m.lag.p99:.3g} s"
        lines.append(f"  {name:<8} {m.fires:>8,} fires {m.calls:>8,} calls  p99 lag {p99:<9} success {rate}")
    if c.lag_precision is not None:
        lines.append(f"  {c.lag_precision.sentence}")
    if c.stream is not None:
        lines.append(f"  stream: {c.stream.sentence}")
    lines += [f"  note: {n}" for n in c.notes]
    return "\n".join(lines)


@exits(*STORE, FAILED)
@click.group(epilog=EPILOG)
def dualrun() -> None:
    """Compare the legacy and the new path per business, and store the verdicts."""


@exits_as({**dict.fromkeys(STORE), OK: "ready", FAILED: "not ready (or the comparison failed)"})
@dualrun.command("compare", epilog=EPILOG)
@click.option("--business", "biz_code", required=True, help="The business (its biz_code on the new side).")
@click.option(
    "--legacy-business",
    "legacy_biz_code",
    default=None,
    help="The business's name on the legacy side, when it differs.",
)
@click.option("--since", default=None, help="Window start: ISO-8601 or a duration ago (2h). Default: --window ago.")
@click.option("--until", default=None, help="Window end: ISO-8601 or a duration ago. Default: now.")
@click.option("--shadow/--no-shadow", default=None, help="Override the business's shadow flag in the store.")
@click.option("--json", "as_json", is_flag=True, help="Print the full comparison as JSON.")
@sources_options
@cli_errors
@domain_errors
def compare_cmd(
    biz_code: str,
    legacy_biz_code: str | None,
    since: str | None,
    until: str | None,
    shadow: bool | None,
    as_json: bool,
    **source_kw: Any,
) -> None:
    """Compute, store and print the verdict of one business (exit 0 ready, 1 not ready)."""
    sources = _sources(**source_kw)
    try:
        # a typo'd business would be compared against nothing and the verdict stored for it
        if not known_business(sources.store, sources.migrator, biz_code):
            raise CliFailure(f"no such business: {biz_code}", exitcodes.USAGE)
        result, cid = sources.compare(
            biz_code, since=since, until=until, legacy_biz_code=legacy_biz_code, shadow=shadow
        )
    finally:
        sources.store.close()
    click.echo(
        redact(
            json.dumps({"comparison_id": cid, **as_dict(result)}, ensure_ascii=False)
            if as_json
            else render_text(result, cid)
        )
    )
    sys.exit(exitcodes.OK if result.is_ready else exitcodes.FAILED)


@exits_as(
    {
        **dict.fromkeys(STORE),
        OK: "clean: every occurrence checked fired on the side that owns it, once",
        FAILED: "occurrences missing or doubled, none due yet to check, or never cut over",
    }
)
@dualrun.command("check-boundary", epilog=EPILOG)
@click.option("--business", "biz_code", required=True, help="The business whose latest cutover is checked.")
@click.option(
    "--settle",
    default="1m",
    show_default=True,
    type=POSITIVE,
    help="Occurrences due within this of now are left out (their runs may not have reached an executor yet).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the tally as JSON.")
@sources_options
@cli_errors
@domain_errors
def check_boundary_cmd(biz_code: str, settle: timedelta, as_json: bool, **source_kw: Any) -> None:
    """Check the boundary of the business's latest cutover: from the switch until now, every
    occurrence fired exactly once, by the side that owned it at its time (legacy before its
    job's handover, the new side from it on); store the tally, which the report, the
    overview and the console show beside the switch. Run it some minutes after a cutover,
    and again later: each run replaces the last tally of that switch."""
    sources = _sources(**source_kw)
    try:
        if not known_business(sources.store, sources.migrator, biz_code):
            raise CliFailure(f"no such business: {biz_code}", exitcodes.USAGE)
        source = sources.source or _stored_source(sources.own, biz_code)
        tally = record_cutover_boundary(
            sources.store, sources.own, sources.reader(source), biz_code, now=sources.store.clock.now(), settle=settle
        )
    finally:
        sources.store.close()
    if tally is None:
        raise CliFailure(
            f"{biz_code} was never cut over, or its cutover kept no handover times: no boundary to check",
            exitcodes.FAILED,
        )
    click.echo(json.dumps(tally.as_dict(), ensure_ascii=False) if as_json else f"{biz_code}: {tally.sentence}")
    sys.exit(exitcodes.OK if tally.clean else exitcodes.FAILED)


def _watch_options(business_help: str, every_help: str, max_runs_help: str):  # type: ignore[no-untyped-def]
    """--business, --every and --max-runs: what a watch loop (watch, watch-cutover) is told."""

    def add(fn):  # type: ignore[no-untyped-def]
        for opt in reversed(
            (
                click.option("--business", "biz_codes", multiple=True, help=business_help),
                click.option("--every", default="1m", show_default=True, type=POSITIVE, help=every_help),
                click.option("--max-runs", type=click.IntRange(1), default=None, help=max_runs_help),
            )
        ):
            fn = opt(fn)
        return fn

    return add


@exits_as({**dict.fromkeys(STORE), FAILED: "every comparison failed"})
@dualrun.command("watch", epilog=EPILOG)
@_watch_options(
    "Business to watch (repeatable; default: every business in dual_run).",
    "Interval between comparisons.",
    "Stop after N comparisons per business.",
)
@click.option(
    "--grace",
    default="30s",
    show_default=True,
    type=POSITIVE,
    help="On SIGTERM, how long running comparisons may take to finish.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON line per comparison.")
@sources_options
@cli_errors
@domain_errors
def watch_cmd(
    biz_codes: Sequence[str], every: timedelta, max_runs: int | None, grace: timedelta, as_json: bool, **source_kw: Any
) -> None:
    """Compare on a schedule and store the series, until SIGTERM (or --max-runs)."""
    from switchyard.cli.signals import stop_event

    sources = _sources(**source_kw)
    _known(sources, biz_codes)
    names = list(biz_codes) or [b.biz_code for b in fetch_businesses(sources.own) if b.state == "dual_run"]
    if not names:
        raise CliFailure("nothing to watch: no --business given and no business is in dual_run", exitcodes.USAGE)
    # an unreachable legacy database is a one-line error at start (exit 3), not a series
    # of failed runs; failures after the start are reported run by run
    for name in names:
        source = sources.source or _stored_source(sources.own, name)
        sources.reader(source).businesses()
    stop = stop_event()
    watch = Watch(
        lambda b: _watch_one(sources, b, as_json),
        names,
        every,
        max_runs=max_runs,
        grace=grace,
        on_error=lambda b, e: click.echo(f"{b}: comparison failed: {e}", err=True),
    )
    summary = watch.run(stop)
    click.echo(
        f"watch stopped: {summary.runs} comparison(s), {summary.ready} ready, {summary.not_ready} not ready, "
        f"{summary.errors} failed" + (f", {summary.abandoned} abandoned" if summary.abandoned else ""),
        err=True,
    )
    if summary.abandoned:  # a run still in flight would hold the interpreter: leave now, bounded
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exitcodes.FAILED)
    sources.store.close()
    sys.exit(exitcodes.FAILED if summary.errors and not summary.runs else exitcodes.OK)


def _known(sources: ComparisonInputs, biz_codes: Sequence[str]) -> None:
    """Every business named exists (else exit 2 naming each one that does not)."""
    unknown = [b for b in dict.fromkeys(biz_codes) if not known_business(sources.store, sources.migrator, b)]
    if unknown:
        raise CliFailure(f"no such business: {', '.join(unknown)}", exitcodes.USAGE)


def _watch_one(sources: ComparisonInputs, biz_code: str, as_json: bool) -> Comparison:
    result, cid = sources.compare(biz_code)
    if as_json:
        click.echo(
            redact(
                json.dumps(
                    {
                        "comparison_id": cid,
                        "business": biz_code,
                        "verdict": result.verdict.value,
                        "computed_at": iso(result.computed_at),
                        "reasons": list(result.reasons),
                        "warnings": list(result.warnings),
                    },
                    ensure_ascii=False,
                )
            )
        )
    else:
        click.echo(
            redact(
                f"{iso(result.computed_at)} {biz_code} {result.verdict.value} (comparison #{cid})"
                + "".join(f"\n  - {r}" for r in result.reasons)
                + "".join(f"\n  ! {w}" for w in result.warnings)
            )
        )
    return result


@exits_as(
    {
        **dict.fromkeys(STORE),
        OK: "nothing missing, doubled or late in any check",
        FAILED: "some were (or a check failed)",
    }
)
@dualrun.command(
    "watch-cutover",
    epilog="""\b
Example:
  switchyard dualrun watch-cutover --business reminder --legacy-url mysql+pymysql://ro@db/xxl_job \\
      --every 1m --metrics-port 9464""",
)
@_watch_options(
    "Cut-over business to watch (repeatable; default: every business in cutover).",
    "Interval between checks.",
    "Stop after N checks of each business.",
)
@click.option(
    "--lookback",
    default=None,
    type=POSITIVE,
    help="Check at most this far back (default: everything since the cutover).",
)
@click.option("--late-after", default=None, type=POSITIVE, help="A fire received later than this is late (default 5s).")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve the gauges (switchyard_after_cutover_fires) on 127.0.0.1:PORT/metrics.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON line per check.")
@store_url
@legacy_url_option("URL of the legacy database: the migrated definitions' schedules.")
@click.option(
    "--source",
    type=click.Choice([s.value for s in SourceSystem]),
    default=None,
    help="Legacy system (default: the business's source system in the store).",
)
@legacy_zone_options
@log_level
@log_format
@cli_errors
@domain_errors
def watch_cutover_cmd(
    biz_codes: Sequence[str],
    every: timedelta,
    max_runs: int | None,
    lookback: timedelta | None,
    late_after: timedelta | None,
    metrics_port: int | None,
    as_json: bool,
    url: str,
    legacy_url: str,
    source: str | None,
    legacy_zones: LegacyZones,
    log_level: str,
    log_format: str,
) -> None:
    """After the switch: check cut-over businesses against their expected occurrences (no
    legacy side): missing, doubled (by command id) and late fires, until SIGTERM (or
    --max-runs); a Prometheus gauge per business and kind."""
    configure_logging(log_level, log_format)
    from dualrun.aftercut import AfterCutoverGauges, NotCutOver, check_after_cutover, cutover_time
    from dualrun.settings import MatchSettings
    from switchyard.cli.ports import ensure_free
    from switchyard.cli.signals import stop_event

    ensure_free("--metrics-port", metrics_port)
    sources = ComparisonInputs(
        store=(store := open_existing_store(url)),
        own=dualrun_store(store),
        migrator=migrator_store(store),
        legacy_url=legacy_url,
        legacy_tz=legacy_zones,
        source=SourceSystem(source) if source else None,
        settings_file={},
        base=CompareSettings(),
        probe=None,
        readers={},
    )
    settings = CompareSettings(match=MatchSettings(late_after=late_after) if late_after else MatchSettings())
    try:
        _known(sources, biz_codes)
    except CliFailure:
        sources.store.close()
        raise
    names = list(biz_codes) or [b.biz_code for b in fetch_businesses(sources.own) if b.state == "cutover"]
    if not names:
        raise CliFailure("nothing to watch: no --business given and no business is cut over", exitcodes.USAGE)
    for name in names:  # a business never cut over is a wrong argument, said before the watch starts
        try:
            cutover_time(sources.own, name)
        except NotCutOver as exc:
            sources.store.close()
            raise CliFailure(str(exc), exitcodes.USAGE) from None
    gauges = AfterCutoverGauges()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr="127.0.0.1", registry=gauges.registry)
    stop = stop_event()
    problems = failures = runs = 0
    try:
        while not stop.is_set():
            for name in names:
                src = sources.source or _stored_source(sources.own, name)
                try:
                    result = check_after_cutover(
                        sources.store,
                        sources.own,
                        sources.reader(src),
                        name,
                        source=src,
                        settings=settings,
                        now=sources.store.clock.now(),
                        lookback=lookback,
                    )
                except DualRunError as exc:
                    failures += 1
                    click.echo(f"{name}: check failed: {exc}", err=True)
                    continue
                gauges.record(result)
                problems += int(not result.ok)
                click.echo(
                    redact(
                        json.dumps(result.as_dict(), ensure_ascii=False)
                        if as_json
                        else result.sentence
                        + "".join(
                            f"\n  - {f.kind} {f.job_code} {iso(f.scheduled_at)}: {f.detail}" for f in result.findings
                        )
                    )
                )
            runs += 1
            if max_runs is not None and runs >= max_runs:
                break
            stop.wait(every.total_seconds())
    finally:
        sources.store.close()
    sys.exit(exitcodes.FAILED if problems or failures else exitcodes.OK)
