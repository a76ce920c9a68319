"""Secrets never reach a message, a log line or a report: URL passwords, tokens and bearer
credentials are masked (`redact`, `redact_tree`), and a database URL is shown with its
password hidden (`safe_url`). The one implementation: the driver's messages
(`dbkit.translate`), the CLI's failures and the reports all pass through it."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.engine.url import URL

_PATTERNS = (
    # a password may hold a "/" (the driver echoes it undecoded): everything up to the "@"
    (re.compile(r"(?P<pre>[a-z][a-z0-9+.\-]*://[^:/@\s]+:)[^@\s]+@", re.IGNORECASE), r"\g<pre>***@"),
    (re.compile(r"(?P<pre>\bbearer\s+)[A-Za-z0-9._~+/=\-]+", re.IGNORECASE), r"\g<pre>***"),
    (
        re.compile(
            r"(?P<pre>\b(?:access[_-]?token|token|password|passwd|pwd|secret|api[_-]?key|x-bc-token)"
            # MySQL's "(using password: YES)" says whether one was sent, not what it is
            r"\s*[=:]\s*[\"']?)(?!(?:YES|NO)\))[^\s\"'&,;]+",
            re.IGNORECASE,
        ),
        r"\g<pre>***",
    ),
)


def redact(text: str) -> str:
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redact_tree(value: Any) -> Any:
    """The same structure with every string redacted (keys included)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_tree(k): redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    return value


def safe_url(url: str | URL) -> str:
    """The URL with its password masked, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL has no password we can find: hide it all
        return "<unparsable url>"
