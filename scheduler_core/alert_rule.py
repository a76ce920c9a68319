"""Where a job's alerts go and on what (issue 28): part of a job's definition as an
operator writes it (`JobSpec.alerts`), checked here; stored and acted on by
`switchyard.alerts` (the core sends no alert itself).

A target is `webhook:URL` (an http or https URL that parses, with a host) or
`mail:ADDRESS`. The kinds are `failure` (a run's result was failed), `timeout` (its
handler overran the job's timeout), `missed` (a run that should have started and did not,
see `switchyard.alerts.detect`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

KINDS = ("failure", "timeout", "missed")
SCHEMES = ("webhook", "mail")
# the stored column's width (switchyard.alerts.tables: one target per entry of a JSON list)
TARGET_MAX = 1000
# a mail address as mail servers take it: something, one @, a domain of labels
_MAIL = re.compile(
    r"[^@\s<>,;]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
)


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str  # webhook | mail
    address: str  # the URL or the mail address

    def __str__(self) -> str:
        return f"{self.scheme}:{self.address}"


def parse_target(text: str) -> Target:
    """`webhook:URL` or `mail:ADDRESS`; ValueError naming what is wrong."""
    scheme, sep, rest = text.strip().partition(":")
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"{text!r}: give webhook:URL or mail:ADDRESS")
    if len(text) > TARGET_MAX:
        raise ValueError(f"{text[:40]!r}...: longer than {TARGET_MAX} characters")
    if scheme == "mail":
        if not _MAIL.fullmatch(rest):
            raise ValueError(f"{text!r}: {rest!r} is not a mail address (name@domain)")
        return Target("mail", rest)
    parts = urlsplit(rest)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{text!r}: a webhook is an http:// or https:// URL")
    try:
        port = parts.port  # a port that is no number is refused here, not at the first send
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    if not parts.hostname or any(c.isspace() for c in rest):
        raise ValueError(f"{text!r}: the URL has no host")
    del port
    return Target("webhook", rest)


@dataclass(frozen=True, slots=True)
class AlertRule:
    """A job's alert targets and the kinds that alert; no target: no alert."""

    targets: tuple[str, ...] = ()
    kinds: tuple[str, ...] = KINDS

    def check(self) -> None:
        """ValueError naming the bad target or kind."""
        for t in self.targets:
            parse_target(t)
        if len(set(self.targets)) != len(self.targets):
            raise ValueError("a target is given twice")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad:
            raise ValueError(f"unknown alert kind {', '.join(map(repr, bad))} (one of {', '.join(KINDS)})")
        if self.targets and not self.kinds:
            raise ValueError(f"no kind to alert on (give some of {', '.join(KINDS)})")

    def parsed(self) -> tuple[Target, ...]:
        return tuple(parse_target(t) for t in self.targets)


def parse_kinds(text: str) -> tuple[str, ...]:
    """`failure,timeout` -> ("failure", "timeout") in KINDS' order; ValueError on an unknown one."""
    given = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in given if k not in KINDS]
    if bad:
        raise ValueError(f"unknown alert kind {', '.join(map(repr, bad))} (one of {', '.join(KINDS)})")
    return tuple(k for k in KINDS if k in given)


__all__ = ["KINDS", "AlertRule", "Target", "parse_kinds", "parse_target"]
