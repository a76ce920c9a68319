"""Sending one alert message to one target: a webhook gets the payload as a JSON POST, a
mail address a mail through the SMTP server of SWITCHYARD_SMTP_* (stdlib smtplib). Each
send is tried `attempts` times with a doubling pause between tries, every try bounded by
a timeout, so a dead receiver holds the alerter for seconds, never for ever (and never the
scheduler: the alerter runs in its own thread or process)."""

from __future__ import annotations

import json
import os
import smtplib
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

from scheduler_core.alert_rule import Target, parse_target

SMTP_ENV = "SWITCHYARD_SMTP_"


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    host: str
    port: int = 25
    sender: str = "switchyard@localhost"
    user: str | None = None
    password: str | None = None
    starttls: bool = False

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> SmtpSettings | None:
        """SWITCHYARD_SMTP_HOST (none: mail is not configured), _PORT, _FROM, _USER,
        _PASSWORD, _STARTTLS (1: upgrade the connection before logging in)."""
        e = os.environ if env is None else env
        host = e.get(SMTP_ENV + "HOST", "").strip()
        if not host:
            return None
        port = e.get(SMTP_ENV + "PORT", "25").strip()
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{SMTP_ENV}PORT: {port!r} is not a port number")
        return SmtpSettings(
            host=host,
            port=int(port),
            sender=e.get(SMTP_ENV + "FROM", "").strip() or f"switchyard@{socket.gethostname()}",
            user=e.get(SMTP_ENV + "USER") or None,
            password=e.get(SMTP_ENV + "PASSWORD") or None,
            starttls=e.get(SMTP_ENV + "STARTTLS", "") in ("1", "true", "yes"),
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    ok: bool
    attempts: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class Sender:
    smtp: SmtpSettings | None = None
    attempts: int = 3
    first_pause_s: float = 0.5
    timeout_s: float = 5.0
    sleep: Callable[[float], None] = time.sleep

    def send(self, target: str, payload: Mapping[str, Any]) -> Delivery:
        """Deliver `payload` to `target`, tried again on failure; the last error if none went."""
        try:
            parsed = parse_target(target)
        except ValueError as exc:
            return Delivery(False, 0, str(exc))
        if parsed.scheme == "mail" and self.smtp is None:
            return Delivery(False, 0, f"mail is not configured: set {SMTP_ENV}HOST (and _PORT, _FROM)")
        error = ""
        pause = self.first_pause_s
        for attempt in range(1, self.attempts + 1):
            try:
                self._once(parsed, payload)
                return Delivery(True, attempt)
            except (OSError, smtplib.SMTPException, ValueError) as exc:
                error = _describe(exc)
            if attempt < self.attempts:
                self.sleep(pause)
                pause *= 2
        return Delivery(False, self.attempts, error)

    def _once(self, target: Target, payload: Mapping[str, Any]) -> None:
        if target.scheme == "webhook":
            req = urllib.request.Request(
                target.address,
                data=json.dumps(payload).encode(),
                headers={"Content-Type": "application/json", "User-Agent": "switchyard-alerts"},
                method="POST",
            )
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - http(s) only (parse_target)
                resp.read(1024)
            return
        assert self.smtp is not None
        msg = EmailMessage()
        msg["Subject"] = subject(payload)
        msg["From"] = self.smtp.sender
        msg["To"] = target.address
        msg.set_content(body(payload))
        with smtplib.SMTP(self.smtp.host, self.smtp.port, timeout=self.timeout_s) as smtp:
            if self.smtp.starttls:
                smtp.starttls()
            if self.smtp.user:
                smtp.login(self.smtp.user, self.smtp.password or "")
            smtp.send_message(msg)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"unreachable: {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def subject(p: Mapping[str, Any]) -> str:
    if p["status"] == "test":
        return f"[switchyard] test alert for {p['business']}:{p['job']}"
    what = {"failure": "failed", "timeout": "timed out", "missed": "missed"}.get(str(p["kind"]), str(p["kind"]))
    head = "RESOLVED " if p["status"] == "resolved" else ""
    return f"[switchyard] {head}{p['business']}:{p['job']} {what} ({p['count']}x)"


def body(p: Mapping[str, Any]) -> str:
    lines = [subject(p), ""]
    for k in ("business", "job", "kind", "status", "count", "first_scheduled_at", "last_scheduled_at", "message"):
        if k in p:
            lines.append(f"{k}: {p[k]}")
    if p.get("fired_ids"):
        lines.append(f"runs: {', '.join(map(str, p['fired_ids']))}")
    lines.append(f"console: {p.get('link', '')}")
    return "\n".join(lines) + "\n"


__all__ = ["Delivery", "Sender", "SmtpSettings", "body", "subject"]
