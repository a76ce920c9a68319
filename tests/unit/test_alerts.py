"""Issue 28, alerts, on the embedded default (SQLite, the in-process bus, a manual clock)
with a real HTTP receiver and a real SMTP server on 127.0.0.1: targets are checked where a
job is written; detection's rules (failure, timeout, missed, recovery); failures of a job
grouped into one message with their count, later ones told at most every group interval,
a recovery resolved; a restarted or second alerter sends nothing twice; a failed delivery
is tried again with a bound and recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler_core.alert_rule import AlertRule, parse_kinds, parse_target
from scheduler_core.clock import ManualClock
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.jobspec import JobInputError, JobSpec, Schedule
from scheduler_core.model import Trigger, TriggerKind, TriggerState
from scheduler_core.stops import StopService
from scheduler_core.store.stops import SqlStops
from scheduler_core.times import to_ms
from switchyard import exitcodes
from switchyard.alerts.detect import scan_runs, scan_triggers
from switchyard.alerts.loop import Alerter, AlertSettings
from switchyard.alerts.send import Sender, SmtpSettings
from switchyard.alerts.store import recent_alerts
from switchyard.cli import cli
from switchyard.jobs import Jobs
from switchyard.wiring import alert_store, migrator_store, open_existing_store
from tests.harness import Harness, make_harness
from tests.receivers import Webhook, smtp_server, webhook

START = datetime(2026, 12, 2, 6, 0, 0, tzinfo=UTC)
T0 = to_ms(START)
GRACE = 60_000


# -- targets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("http://x/y", "give webhook:URL or mail:ADDRESS"),
        ("sms:123", "give webhook:URL or mail:ADDRESS"),
        ("webhook:ftp://h/x", "http:// or https://"),
        ("webhook:http://", "no host"),
        ("webhook:http://h:port/x", "Port could not be cast"),
        ("mail:ops", "not a mail address"),
        ("mail:ops@", "not a mail address"),
        ("mail:a b@c.d", "not a mail address"),
    ],
)
def test_a_bad_target_is_refused_naming_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_target(text)


def test_good_targets_parse() -> None:
    assert str(parse_target("webhook:http://127.0.0.1:8080/x?y=1")) == "webhook:http://127.0.0.1:8080/x?y=1"
    assert parse_target("webhook:https://hooks.example.com/a").scheme == "webhook"
    assert parse_target("mail:ops@example.com").address == "ops@example.com"
    assert parse_kinds("missed, failure") == ("failure", "missed")
    with pytest.raises(ValueError, match="unknown alert kind 'late'"):
        parse_kinds("failure,late")


def test_jobspec_checks_its_alerts_as_a_field() -> None:
    spec = JobSpec(
        job_code="j", biz_code="b", handler="h", schedule=Schedule(kind=TriggerKind.NONE),
        alerts=AlertRule(targets=("mail:nope",)),
    )  # fmt: skip
    with pytest.raises(JobInputError) as err:
        spec.check()
    assert err.value.field == "alert" and "not a mail address" in err.value.reason
    twice = spec.with_changes(alerts=AlertRule(targets=("mail:a@b.c", "mail:a@b.c")))
    with pytest.raises(JobInputError, match="given twice"):
        twice.check()
    none = spec.with_changes(alerts=AlertRule(targets=("mail:a@b.c",), kinds=()))
    with pytest.raises(JobInputError, match="no kind"):
        none.check()


def test_the_cli_sets_shows_edits_and_removes_a_jobs_alerts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    run = CliRunner()
    assert run.invoke(cli, ["db", "init", "--url", url]).exit_code == 0
    monkeypatch.setenv("SWITCHYARD_URL", url)

    def sy(*args: str) -> tuple[int, str]:
        res = run.invoke(cli, list(args))
        return res.exit_code, res.output

    code, out = sy("job", "add", "b:j", "--handler", "h", "--every", "5s", "--alert", "webhook:ftp://x")
    assert code == exitcodes.USAGE and "alert: 'webhook:ftp://x': a webhook is an http" in out
    code, out = sy("job", "add", "b:j", "--handler", "h", "--every", "5s", "--alert-on", "failure")
    assert code == exitcodes.USAGE and "alert-on: the job has no alert target" in out
    code, out = sy("job", "add", "b:j", "--handler", "h", "--every", "5s", "--alert", "mail:a@b.c", "--alert-on", "x")
    assert code == exitcodes.USAGE and "alert-on: unknown alert kind 'x'" in out
    assert sy("job", "list", "--json")[1].strip() == "[]", "nothing half-written"

    code, out = sy(
        "job", "add", "b:j", "--handler", "h", "--every", "5s",
        "--alert", "webhook:http://127.0.0.1:9/x", "--alert", "mail:ops@example.com", "--alert-on", "failure,timeout",
    )  # fmt: skip
    assert code == 0, out
    assert "alerts:    on failure,timeout to webhook:http://127.0.0.1:9/x, mail:ops@example.com" in out
    shown = json.loads(sy("job", "show", "b:j", "--json")[1])
    assert shown["alerts"] == {
        "targets": ["webhook:http://127.0.0.1:9/x", "mail:ops@example.com"],
        "on": ["failure", "timeout"],
    }
    # an edit of the kinds keeps the targets; of the targets, the kinds
    assert json.loads(sy("job", "edit", "b:j", "--alert-on", "missed", "--json")[1])["alerts"]["on"] == ["missed"]
    edited = json.loads(sy("job", "edit", "b:j", "--alert", "mail:x@y.z", "--json")[1])
    assert edited["alerts"] == {"targets": ["mail:x@y.z"], "on": ["missed"]}
    # a copy carries them
    code, out = sy("job", "copy", "b:j", "j2")
    assert code == 0, out
    assert json.loads(sy("job", "show", "b:j2", "--json")[1])["alerts"]["targets"] == ["mail:x@y.z"]
    assert json.loads(sy("job", "edit", "b:j", "--no-alert", "--json")[1])["alerts"] == {"targets": [], "on": []}
    code, out = sy("alerts", "test", "--job", "b:j")
    assert code == exitcodes.USAGE and "has no alert target" in out
    # a deleted job's alerts go with it
    code, out = sy("job", "delete", "b:j2")
    assert code == 0, out
    store = open_existing_store(url)
    try:
        assert alert_store(store).rules() == {}
    finally:
        store.engine.dispose()


# -- detection ---------------------------------------------------------------------------


def _row(at_s: float, state: str, **kw: Any) -> dict[str, Any]:
    at = T0 + int(at_s * 1000)
    return {
        "command_id": f"c{at}-{kw.get('item', 0)}",
        "trigger_id": 7,
        "scheduled_at": at,
        "state": state,
        "received_at": kw.get("received"),
        "started_at": kw.get("started"),
        "result_at": None,
        "misfired": kw.get("misfired", 0),
        "message": kw.get("message", ""),
    }


def test_detection_rules() -> None:
    now = T0 + 600_000
    rows = [
        _row(0, "failed", started=T0 + 10, message="boom"),
        _row(10, "timed_out", started=T0 + 10_010),
        _row(20, "succeeded", started=T0 + 20_010),
        _row(30, "skipped", misfired=1),
        _row(40, "succeeded", started=T0 + 40_000 + GRACE + 1),  # taken more than the grace late
        _row(50, "killed", started=T0 + 50_010),  # an operator's kill: no event
        _row(60, "skipped"),  # a stop's skip: no event
        _row(500, "pending"),  # 100 s past its time, not taken
        _row(560, "pending"),  # 40 s past: within the grace
        _row(700, "pending"),  # still to come
    ]
    scan = scan_runs(rows, now, GRACE)
    got = sorted((e.kind, (e.scheduled_ms - T0) // 1000) for e in scan.events)
    assert got == [("failure", 0), ("missed", 30), ("missed", 40), ("missed", 500), ("timeout", 10)]
    assert next(e for e in scan.events if e.kind == "failure").message == "boom"
    # succeeded at 20 and 40 recovers failure and timeout; taken on time at 0, 10, 20, 50 recovers missed
    assert scan.recovered == {"failure": T0 + 40_000, "timeout": T0 + 40_000, "missed": T0 + 50_000}
    # the next scan starts at the oldest run that can still change
    assert scan.next_from == T0 + 500_000
    assert scan_runs(rows[:7], now, GRACE).next_from == T0 + 60_001
    # one occurrence missed is one key, whichever way it was seen
    trig = Trigger(
        id=7, job_code="j", biz_code="b", kind=TriggerKind.FIXED_RATE, interval=timedelta(seconds=10),  # type: ignore[arg-type]
        next_fire_at=START + timedelta(seconds=500), state=TriggerState.WAITING,
    )  # fmt: skip
    (lag,) = scan_triggers([trig], now, GRACE)
    assert lag.key == next(e.key for e in scan.events if e.scheduled_ms == T0 + 500_000)
    assert scan_triggers([trig], T0 + 500_000 + GRACE, GRACE) == []
    paused = Trigger(**{**{f: getattr(trig, f) for f in trig.__dataclass_fields__}, "state": TriggerState.PAUSED})
    assert scan_triggers([paused], now, GRACE) == []


# -- the alerter on a running center ------------------------------------------------------


class _Center:
    """A scheduler, one executor of biz-a whose handler fails while `failing`, and the result
    consumer, stepped second by second on the manual clock."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.core = h.core(lookahead=timedelta(seconds=5))
        self.consumer = h.results(self.core)
        self.ex = Executor(h.bus, "biz-a", clock=h.clock)
        self.failing = True
        self.ex.handler("h")(self._run)
        self.jobs = Jobs(h.store, migrator_store(h.store), StopService(SqlStops(h.store), h.bus), "tester")

    def _run(self, ctx: ExecutionContext) -> None:
        if self.failing:
            raise RuntimeError(f"no luck at {ctx.scheduled_at:%H:%M:%S}")

    def step(self, seconds: int) -> None:
        for _ in range(seconds):
            self.h.clock.advance(timedelta(seconds=1))
            for _ in range(100):
                if not any(r.acquired for r in self.core.tick_all()):
                    break
            while self.ex.poll_once(timeout=timedelta(0)):
                pass
            while self.consumer.poll(timeout=timedelta(0)):
                pass


@pytest.fixture
def center(tmp_path: Path) -> Iterator[_Center]:
    yield _Center(make_harness(tmp_path, ManualClock(START)))


@pytest.fixture
def hook() -> Iterator[Webhook]:
    with webhook() as h:
        yield h


SETTINGS = AlertSettings(
    group_wait=timedelta(seconds=30), group_interval=timedelta(seconds=120), grace=timedelta(seconds=60)
)


def _alerter(c: _Center, settings: AlertSettings = SETTINGS) -> Alerter:
    return Alerter(c.h.store, alert_store(c.h.store), Sender(sleep=lambda s: None), settings)


def _add(c: _Center, url: str, every_s: int = 10, kinds: tuple[str, ...] = ("failure", "timeout", "missed")) -> None:
    c.jobs.add(
        JobSpec(
            job_code="pay", biz_code="biz-a", handler="h", timeout=timedelta(0) + timedelta(seconds=30),
            schedule=Schedule(kind=TriggerKind.FIXED_RATE, interval=timedelta(seconds=every_s)),
            alerts=AlertRule(targets=(f"webhook:{url}",), kinds=kinds),
        )
    )  # fmt: skip


def test_failures_are_grouped_into_one_message_with_their_count(center: _Center, hook: Webhook) -> None:
    _add(center, hook.url)
    alerter = _alerter(center)
    center.step(12)  # the first run (at +10 s) failed
    assert alerter.tick().events == 1
    assert hook.calls() == [], "the first message waits the group wait, gathering what follows"
    for _ in range(20):  # 20 s more: two more failures
        center.step(1)
        alerter.tick()
    assert hook.calls() == []
    center.step(11)  # 43 s after start: the incident opened at +12 s is 31 s old; 4 failures
    alerter.tick()
    (first,) = hook.calls()
    assert first["status"] == "firing" and first["kind"] == "failure" and first["count"] == 4
    assert first["business"] == "biz-a" and first["job"] == "pay" and first["link"] == "/business/biz-a?job=pay"
    assert len(first["fired_ids"]) == 4 and "no luck at 06:00:40" in first["message"], first
    # a restarted alerter (a new one on the same store) tells nothing twice
    again = _alerter(center)
    assert again.tick().sent == [] and len(hook.calls()) == 1
    # more failures within the group interval: told once it has passed, with the new total
    for _ in range(110):
        center.step(1)
        again.tick()
    assert len(hook.calls()) == 1
    center.step(12)
    again.tick()
    assert [c["count"] for c in hook.calls()] == [4, 16]  # the runs at +10 .. +160 s
    assert hook.calls()[1]["new"] == 12
    # the job recovers: one resolved message
    center.failing = False
    center.step(10)
    again.tick()
    again.tick()
    calls = hook.calls()
    assert [c["status"] for c in calls] == ["firing", "firing", "resolved"]
    assert calls[2]["count"] == 16
    rows = recent_alerts(alert_store(center.h.store), job_code="pay")
    assert [(r["status"], r["outcome"]) for r in rows] == [
        ("resolved", "delivered"),
        ("firing", "delivered"),
        ("firing", "delivered"),
    ]
    # a later failure opens a new incident, counted from one
    center.failing = True
    center.step(10)
    again.tick()
    center.step(31)
    again.tick()
    last = hook.calls()[-1]
    assert (last["status"], last["count"]) == ("firing", 4)  # the 4 runs of the group wait, not 16 + 4
    assert last["incident"] != calls[0]["incident"]


def test_two_alerters_on_one_store_send_one_message(center: _Center, hook: Webhook) -> None:
    _add(center, hook.url)
    a, b = _alerter(center), _alerter(center)
    center.step(12)
    a.tick()
    b.tick()
    center.step(31)
    b.tick()
    a.tick()
    assert len(hook.calls()) == 1 and hook.calls()[0]["count"] == 4


def test_a_missed_fire_is_alerted_once_and_resolved(center: _Center, hook: Webhook) -> None:
    """The scheduler is down for 3 minutes (not ticked): the trigger not admitted past the
    grace is a missed fire; when it runs again on time, resolved."""
    center.failing = False
    _add(center, hook.url, kinds=("missed",))
    alerter = _alerter(center)
    center.step(12)
    assert alerter.tick().events == 0
    center.h.clock.advance(timedelta(seconds=180))  # nothing ticks: the scheduler is down
    assert alerter.tick().events == 1  # the trigger's next fire, 170 s behind
    center.h.clock.advance(timedelta(seconds=31))
    alerter.tick()
    (missed,) = hook.calls()
    assert missed["kind"] == "missed" and missed["count"] == 1 and "behind" in missed["message"]
    center.step(25)  # the scheduler is back: the late fires run (late), then on time
    alerter.tick()
    alerter.tick()
    statuses = [c["status"] for c in hook.calls()]
    assert statuses[-1] == "resolved", hook.calls()
    assert statuses.count("firing") == 1 or hook.calls()[1]["count"] > 1


def test_a_failed_delivery_is_retried_with_a_bound_and_recorded(center: _Center, hook: Webhook) -> None:
    _add(center, hook.url)
    alerter = _alerter(center)
    hook.fail_next = 2  # two 500s, then the third try takes it
    center.step(12)
    alerter.tick()
    center.step(31)
    (sent,) = alerter.tick().sent
    assert sent["ok"] and sent["attempts"] == 3 and len(hook.calls()) == 1
    hook.fail_next = 10  # every try of the next message fails
    center.step(121)
    (failed,) = alerter.tick().sent
    assert not failed["ok"] and failed["attempts"] == 3 and failed["error"] == "HTTP 500 Internal Server Error"
    rows = recent_alerts(alert_store(center.h.store))
    assert (rows[0]["outcome"], rows[0]["attempts"], rows[0]["error"]) == ("error", 3, "HTTP 500 Internal Server Error")
    assert rows[1]["outcome"] == "delivered"
    # not sent again: the message was taken as told before its send
    assert alerter.tick().sent == [] and hook.fail_next == 7


def test_mail_goes_through_a_real_smtp_server(center: _Center) -> None:
    with smtp_server() as box:
        center.jobs.add(
            JobSpec(
                job_code="pay", biz_code="biz-a", handler="h",
                schedule=Schedule(kind=TriggerKind.FIXED_RATE, interval=timedelta(seconds=10)),
                alerts=AlertRule(targets=("mail:ops@example.com",)),
            )
        )  # fmt: skip
        smtp = SmtpSettings.from_env(
            {
                "SWITCHYARD_SMTP_HOST": box.host,
                "SWITCHYARD_SMTP_PORT": str(box.port),
                "SWITCHYARD_SMTP_FROM": "sy@x.org",
            }
        )
        alerter = Alerter(center.h.store, alert_store(center.h.store), Sender(smtp, sleep=lambda s: None), SETTINGS)
        center.step(12)
        alerter.tick()
        center.step(31)
        (sent,) = alerter.tick().sent
        assert sent["ok"], sent
        (mail,) = box.mails
        assert mail["To"] == "ops@example.com" and mail["From"] == "sy@x.org"
        assert mail["Subject"] == "[switchyard] biz-a:pay failed (4x)"
        assert "console: /business/biz-a?job=pay" in mail.get_payload(decode=True).decode()  # type: ignore[union-attr]
        (test,) = alerter.test("pay", "biz-a")
        assert test["ok"] and len(box.mails) == 2 and "test alert" in box.mails[1]["Subject"]


def test_smtp_settings_from_the_environment() -> None:
    assert SmtpSettings.from_env({}) is None
    with pytest.raises(ValueError, match="SWITCHYARD_SMTP_PORT: 'x'"):
        SmtpSettings.from_env({"SWITCHYARD_SMTP_HOST": "h", "SWITCHYARD_SMTP_PORT": "x"})
    s = SmtpSettings.from_env({"SWITCHYARD_SMTP_HOST": "h", "SWITCHYARD_SMTP_STARTTLS": "1"})
    assert s is not None and s.port == 25 and s.starttls


def test_runs_before_a_jobs_first_alert_target_are_not_told(center: _Center, hook: Webhook) -> None:
    center.jobs.add(
        JobSpec(
            job_code="pay", biz_code="biz-a", handler="h",
            schedule=Schedule(kind=TriggerKind.FIXED_RATE, interval=timedelta(seconds=10)),
        )
    )  # fmt: skip
    center.step(35)  # three failures nobody asked to hear of
    job = center.jobs.resolve("pay")
    center.jobs.edit(job, {"alerts": AlertRule(targets=(f"webhook:{hook.url}",))})
    alerter = _alerter(center)
    assert alerter.tick().events == 0
    center.step(10)
    assert alerter.tick().events == 1


def test_events_older_than_any_scan_are_forgotten_and_not_counted_again(center: _Center, hook: Webhook) -> None:
    _add(center, hook.url, kinds=("failure",))
    settings = AlertSettings(
        group_wait=timedelta(0), group_interval=timedelta(seconds=120), lookback=timedelta(minutes=1)
    )  # fmt: skip
    alerter = _alerter(center, settings)
    center.step(12)
    assert alerter.tick().events == 1
    store = alert_store(center.h.store)
    (told,) = hook.calls()
    assert store.event_ids(told["incident"]) != []
    center.failing = False
    center.step(20)
    assert alerter.tick().pruned == 0
    center.h.clock.advance(timedelta(seconds=600))  # past twice the lookback and the prune interval
    r = alerter.tick()
    assert r.pruned == 1 and store.event_ids(told["incident"]) == []
    assert alerter.tick().events == 0, "a pruned event's run is older than any scan: not counted again"
