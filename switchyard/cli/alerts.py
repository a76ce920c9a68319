"""`switchyard alerts [--job] [--json]`, `alerts run`, `alerts test --job J` (issue 28): the
alerts sent (what, when, to whom, delivered or the error), the alerter as a process of its
own, and a test message to a job's targets. A job's targets are set with `switchyard job
add|edit --alert ... --alert-on ...`."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from scheduler_core.stops import StopService
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from switchyard import exitcodes
from switchyard.alerts.loop import Alerter, AlertSettings
from switchyard.alerts.send import Sender, SmtpSettings
from switchyard.alerts.store import recent_alerts
from switchyard.cli.durations import parse_duration
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.options import log_format, log_level, store_url
from switchyard.cli.signals import stop_event
from switchyard.jobs import Jobs, UnknownName
from switchyard.logs import configure_logging
from switchyard.wiring import alert_store, migrator_store, open_existing_store

json_opt = click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")


def _job(store: SqlTriggerStore, name: str, biz_code: str | None) -> tuple[str, str]:
    jobs = Jobs(store, migrator_store(store), StopService(SqlStops(store)), "")  # reads only
    try:
        found = jobs.resolve(name, biz_code)
    except UnknownName as exc:
        raise CliFailure(str(exc.args[0]), exitcodes.USAGE) from None
    return found.job_code, found.biz_code


def smtp_settings() -> SmtpSettings | None:
    try:
        return SmtpSettings.from_env()
    except ValueError as exc:
        raise CliFailure(f"bad input: {exc}", exitcodes.USAGE) from None


@exits(*STORE)
@click.group("alerts", invoke_without_command=True)
@click.option("--job", "job_name", default=None, help="Only this job's alerts (its code, or business:job).")
@click.option("--business", "biz_code", default=None, help="Only this business's alerts.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="At most this many.")
@store_url
@json_opt
@click.pass_context
@cli_errors
def alerts(ctx: click.Context, job_name: str | None, biz_code: str | None, limit: int, url: str, as_json: bool) -> None:
    """The alerts sent, newest first: what (kind, firing / resolved / test, count), when, to
    whom, delivered or the error. `alerts run` is the alerter; `serve` runs one inside."""
    if ctx.invoked_subcommand is not None:
        return
    store = open_existing_store(url)
    try:
        job_code = None
        if job_name is not None:
            job_code, biz_code = _job(store, job_name, biz_code)
        elif biz_code is not None:
            Jobs(store, migrator_store(store), StopService(SqlStops(store)), "").check_business(biz_code)
        rows = recent_alerts(alert_store(store), job_code=job_code, biz_code=biz_code, limit=limit)
    except UnknownName as exc:
        raise CliFailure(str(exc.args[0]), exitcodes.USAGE) from None
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no alerts sent" + (f" for {job_name}" if job_name else ""))
    for r in rows:
        told = "test" if r["status"] == "test" else f"{r['kind']} {r['status']} x{r['count']}"
        outcome = r["outcome"] + (f" ({r['error']})" if r["error"] else "")
        click.echo(f"{r['at']}  {r['business']}:{r['job']}  {told:<22} to {r['target']}  {outcome}")


def _dur(name: str, text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise CliFailure(f"bad input: {name}: {exc}", exitcodes.USAGE) from None


def alert_options(prefix: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The alerter's settings as options (`--grace`, ...; in `serve`, `--alert-grace`, ...),
    handed to the command as one `alert_settings` (an AlertSettings)."""
    d = AlertSettings()
    opts = (
        ("interval", "5s", "How often the alerter looks."),
        ("grace", "60s", "A run not started this long after its time is a missed fire."),
        ("group-wait", "30s", "An incident's first message waits this long, grouping what follows."),
        ("group-interval", "5m", "Later events of an open incident are told at most this often."),
        ("lookback", "24h", "How far back runs are scanned; an incident quiet this long is closed."),
    )
    assert d.interval == _dur("", opts[0][1]) and d.group_interval == _dur("", opts[3][1])  # one set of defaults

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kw: Any) -> Any:
            vals = {name: _dur(f"{prefix}{name}", kw.pop(f"{prefix}{name}".replace("-", "_"))) for name, _, _ in opts}
            kw["alert_settings"] = AlertSettings(
                interval=vals["interval"],
                grace=vals["grace"],
                group_wait=vals["group-wait"],
                group_interval=vals["group-interval"],
                lookback=vals["lookback"],
                send_resolved=not kw.pop(f"{prefix}no-resolved".replace("-", "_")),
            )
            return fn(*args, **kw)

        out: Callable[..., Any] = click.option(
            f"--{prefix}no-resolved", is_flag=True, help="Send no message when a job recovers."
        )(wrapped)
        for name, default, what in reversed(opts):
            out = click.option(f"--{prefix}{name}", default=default, show_default=True, help=what)(out)
        return out

    return deco


@exits_as({**dict.fromkeys(STORE), exitcodes.OK: "stopped by SIGTERM or SIGINT (or one pass done, --once)"})
@alerts.command("run")
@store_url
@alert_options()
@click.option("--once", is_flag=True, help="One pass, then exit (from cron, or to test).")
@json_opt
@log_level
@log_format
@cli_errors
def run_alerter(
    url: str,
    alert_settings: AlertSettings,
    once: bool,
    as_json: bool,
    log_level: str,
    log_format: str,
) -> None:
    """The alerter: looks at the runs of every job with an alert target and sends what is
    due (mail through SWITCHYARD_SMTP_HOST, _PORT, _FROM, _USER, _PASSWORD, _STARTTLS)."""
    configure_logging(log_level, log_format)
    smtp = smtp_settings()
    store = open_existing_store(url)
    try:
        store.current_epoch()  # a store without the schema is a clear error now
        alerter = Alerter(store, alert_store(store), Sender(smtp), alert_settings)
        if once:
            r = alerter.tick()
            if as_json:
                click.echo(json.dumps({"events": r.events, "resolved": r.resolved, "sent": r.sent}))
            else:
                click.echo(f"{r.events} new event(s), {r.resolved} resolved, {len(r.sent)} message(s) sent")
            return
        alerter.run(stop_event())
    finally:
        store.close()


@exits_as({**dict.fromkeys(STORE), exitcodes.FAILED: "a target did not take the test alert (each is listed)"})
@alerts.command("test")
@click.option("--job", "job_name", required=True, help="The job (its code, or business:job).")
@click.option("--business", "biz_code", default=None, help="The job's business.")
@store_url
@json_opt
@cli_errors
def test_alert(job_name: str, biz_code: str | None, url: str, as_json: bool) -> None:
    """Send a test alert to every target of a job (recorded as any alert)."""
    smtp = smtp_settings()
    store = open_existing_store(url)
    try:
        job_code, biz = _job(store, job_name, biz_code)
        alerter = Alerter(store, alert_store(store), Sender(smtp), AlertSettings())
        if not alerter.alerts.rule(job_code).targets:
            raise CliFailure(
                f"job {job_code} has no alert target: `switchyard job edit {job_name} --alert webhook:URL`",
                exitcodes.USAGE,
            )
        sent = alerter.test(job_code, biz)
    finally:
        store.close()
    out = [{"target": s["target"], "ok": s["ok"], "attempts": s["attempts"], "error": s["error"]} for s in sent]
    if as_json:
        click.echo(json.dumps(out))
    else:
        for s in out:
            click.echo(f"{s['target']}: " + ("delivered" if s["ok"] else f"not delivered: {s['error']}"))
    if not all(s["ok"] for s in out):
        raise SystemExit(exitcodes.FAILED)


__all__ = ["alert_options", "alerts", "smtp_settings"]
