"""Secrets never reach a report: URL passwords, tokens and bearer credentials are masked
in every string of the report data before any renderer sees it."""

from __future__ import annotations

import re
from typing import Any

_PATTERNS = (
    (re.compile(r"(?P<pre>[a-z][a-z0-9+.\-]*://[^:/@\s]+:)[^@\s/]+@", re.IGNORECASE), r"\g<pre>***@"),
    (re.compile(r"(?P<pre>\bbearer\s+)[A-Za-z0-9._~+/=\-]+", re.IGNORECASE), r"\g<pre>***"),
    (
        re.compile(
            r"(?P<pre>\b(?:access[_-]?token|token|password|passwd|pwd|secret|api[_-]?key|x-bc-token)"
            r"\s*[=:]\s*[\"']?)[^\s\"'&,;]+",
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
