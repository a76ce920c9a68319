"""The alerter: each tick, for every job with an alert target, scan its fired records from
its checkpoint and its triggers (switchyard.alerts.detect), count the new events into the
job's incident of their kind (de-duplicated by event), resolve what recovered, and tell
what is due, grouped as alertmanager groups:

- an incident's first message waits `group_wait` after it opened, so a burst of failures
  is one message with their count;
- later events of the same open incident are told at most every `group_interval`, one
  message with the new total;
- a recovery sends one `resolved` message (carrying the count when events were not told
  yet); an incident with no event for `lookback` is closed unsent, a later event opens a
  new one.

Each message is recorded `sending` with the count it tells before it is sent (exactly
once: a restart or a second alerter finds it told, never sends it again; a crash in the
send leaves it `sending`), then `delivered` or `error`. The checkpoint of a job is the
scheduled time of its oldest run that may still change (or just past its newest), never
older than `lookback`: a restart rescans from there, and the event keys make the rescan
count nothing twice."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import quote

from scheduler_core.alert_rule import AlertRule
from scheduler_core.model import JobCode
from scheduler_core.ports import Clocked, RunRecordReads, TriggerStore
from scheduler_core.times import from_ms
from switchyard.alerts.detect import Scan, scan_runs, scan_triggers
from switchyard.alerts.send import Delivery, Sender
from switchyard.alerts.store import DELIVERED, ERROR, OPEN, AlertStore, Incident

log = logging.getLogger(__name__)
PAGE = 1000
# a job's scan reads at most this many pages a tick; the rest on the next
MAX_PAGES = 50
# how often the events no scan reads again are forgotten
PRUNE_EVERY_MS = 600_000


@dataclass(frozen=True, slots=True)
class AlertSettings:
    interval: timedelta = timedelta(seconds=5)
    group_wait: timedelta = timedelta(seconds=30)
    group_interval: timedelta = timedelta(minutes=5)
    grace: timedelta = timedelta(seconds=60)
    lookback: timedelta = timedelta(hours=24)
    send_resolved: bool = True


@dataclass
class TickReport:
    events: int = 0
    resolved: int = 0
    pruned: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)


def _ms(d: timedelta) -> int:
    return int(d.total_seconds() * 1000)


def link(biz_code: str, job_code: str) -> str:
    """The console path of the job (its business's page, the job named)."""
    return f"/business/{quote(biz_code, safe='')}?job={quote(job_code, safe='')}"


class WatchedRuns(RunRecordReads, TriggerStore, Clocked, Protocol):
    """What the alerter reads of the trigger store: a job's runs oldest first, its
    triggers, and the store's clock."""


class Alerter:
    def __init__(self, store: WatchedRuns, alerts: AlertStore, sender: Sender, settings: AlertSettings) -> None:
        self.store = store
        self.alerts = alerts
        self.sender = sender
        self.settings = settings
        self._pruned_at = 0

    # -- one pass ------------------------------------------------------------------------

    def tick(self) -> TickReport:
        report = TickReport()
        rules = self.alerts.rules()
        for job_code, (biz_code, rule) in rules.items():
            try:
                self._scan(job_code, biz_code, rule, report)
            except Exception:  # noqa: BLE001 - one job's trouble must not stop the others' alerts
                log.exception("alerts: scanning job %s failed", job_code)
        self._tell(rules, report)
        now = self.store.clock.now_ms()
        if now - self._pruned_at >= PRUNE_EVERY_MS:
            # a scan never reads before now - lookback: twice that is kept, with room to spare
            report.pruned = self.alerts.prune_events(now - 2 * _ms(self.settings.lookback))
            self._pruned_at = now
        return report

    def _scan(self, job_code: str, biz_code: str, rule: AlertRule, report: TickReport) -> None:
        s = self.settings
        now = self.store.clock.now_ms()
        floor = now - _ms(s.lookback)
        since = max(self.alerts.scan_from(job_code) or floor, floor)
        scan = Scan()
        after: tuple[int, str] | None = None
        truncated_at: int | None = None
        for _ in range(MAX_PAGES):
            rows = self.store.runs_oldest_first(
                biz_code=biz_code, job_code=job_code, since_ms=since, after=after, limit=PAGE
            )
            part = scan_runs(rows, now, _ms(s.grace))
            scan.events += part.events
            for kind, at in part.recovered.items():
                scan.recovered[kind] = max(scan.recovered.get(kind, at), at)
            if part.next_from is not None:
                scan.next_from = part.next_from if scan.next_from is None else min(scan.next_from, part.next_from)
            if len(rows) < PAGE:
                break
            after = (int(rows[-1]["scheduled_at"]), str(rows[-1]["command_id"]))
        else:
            truncated_at = after[0] if after is not None else None
        scan.events += scan_triggers(self.store.triggers_of(job_code=JobCode(job_code)), now, _ms(s.grace))
        wanted = [e for e in scan.events if e.kind in rule.kinds]
        report.events += self.alerts.count_events(job_code, biz_code, wanted, _ms(s.lookback))
        for kind, at in scan.recovered.items():
            if kind in rule.kinds and self.alerts.resolve(job_code, kind, at):
                report.resolved += 1
        nxt = scan.next_from
        if truncated_at is not None:
            nxt = truncated_at if nxt is None else min(nxt, truncated_at)
        if nxt is not None:
            self.alerts.set_scan_from(job_code, max(nxt, floor))

    def _tell(self, rules: dict[str, tuple[str, AlertRule]], report: TickReport) -> None:
        s = self.settings
        now = self.store.clock.now_ms()
        for inc in self.alerts.to_tell():
            if inc.state == OPEN:
                waited = now - (inc.opened_at if inc.sent_count == 0 else (inc.last_sent_at or inc.opened_at))
                if waited < _ms(s.group_wait if inc.sent_count == 0 else s.group_interval):
                    continue
                status = "firing"
            else:
                status = "resolved"
            rule = rules.get(inc.job_code, ("", AlertRule()))[1]
            targets = rule.targets if inc.kind in rule.kinds else ()
            if status == "resolved" and not s.send_resolved and inc.sent_count == inc.count:
                targets = ()  # marked told, nothing sent
            payload = self.payload(inc, status)
            for sent_id, target in zip(self.alerts.claim(inc, status, payload, targets), targets, strict=False):
                report.sent.append(self._deliver(sent_id, target, payload))

    def _deliver(self, sent_id: int, target: str, payload: dict[str, Any]) -> dict[str, Any]:
        d: Delivery = self.sender.send(target, payload)
        self.alerts.finish(sent_id, DELIVERED if d.ok else ERROR, d.attempts, d.error)
        if not d.ok:
            log.warning(
                "alert %s %s:%s %s to %s not delivered after %d attempt(s): %s",
                payload["status"],
                payload["business"],
                payload["job"],
                payload["kind"],
                target,
                d.attempts,
                d.error,
            )
        return {"target": target, "ok": d.ok, "attempts": d.attempts, "error": d.error, **payload}

    def payload(self, inc: Incident, status: str) -> dict[str, Any]:
        return {
            "business": inc.biz_code,
            "job": inc.job_code,
            "kind": inc.kind,
            "status": status,
            "count": inc.count,
            "new": inc.count - inc.sent_count,
            "incident": inc.id,
            "fired_ids": self.alerts.event_ids(inc.id),
            "first_scheduled_at": from_ms(inc.first_scheduled_at).isoformat(timespec="milliseconds"),
            "last_scheduled_at": from_ms(inc.last_scheduled_at).isoformat(timespec="milliseconds"),
            "message": inc.last_message,
            "link": link(inc.biz_code, inc.job_code),
            "sent_at": self.store.clock.now().isoformat(timespec="milliseconds"),
        }

    # -- a test message --------------------------------------------------------------------

    def test(self, job_code: str, biz_code: str) -> list[dict[str, Any]]:
        """Send a test message to every target of the job, recorded as any other."""
        rule = self.alerts.rule(job_code)
        payload = {
            "business": biz_code,
            "job": job_code,
            "kind": "test",
            "status": "test",
            "count": 0,
            "new": 0,
            "incident": None,
            "fired_ids": [],
            "message": f"a test alert; this job alerts on {', '.join(rule.kinds) or 'nothing'}",
            "link": link(biz_code, job_code),
            "sent_at": self.store.clock.now().isoformat(timespec="milliseconds"),
        }
        ids = self.alerts.claim_test(job_code, biz_code, payload, rule.targets)
        return [self._deliver(i, t, payload) for i, t in zip(ids, rule.targets, strict=True)]

    # -- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Tick every `interval` until `stop`; a failed tick is logged and tried again."""
        log.info(
            "alerter running: every %s, grace %s, group wait %s, group interval %s",
            self.settings.interval,
            self.settings.grace,
            self.settings.group_wait,
            self.settings.group_interval,
        )
        while not stop.is_set():
            try:
                r = self.tick()
                if r.events or r.sent:
                    log.info(
                        "alerts: %d new event(s), %d resolved, %d message(s) sent", r.events, r.resolved, len(r.sent)
                    )
            except Exception:  # noqa: BLE001 - a store hiccup: the next tick tries again
                log.exception("alerts: tick failed")
            stop.wait(self.settings.interval.total_seconds())


__all__ = ["AlertSettings", "Alerter", "TickReport", "link"]
