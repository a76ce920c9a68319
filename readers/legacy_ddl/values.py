"""Decoding stored legacy values, field by field, into Problems rather than exceptions.

The counterpart of the storage formats in `tables.py`: text arrives as bytes (the
readers select text columns as binary), DATETIMEs as datetimes (PyMySQL) or their text
(SQLite, and MySQL zero dates), integers as ints or, on SQLite, whatever was stored.
Each decoder returns the best value it can and records what was wrong with the field.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from readers.records import Problem
from readers.timezones import LegacyTimeError, LegacyTimeZone, from_epoch_ms

MAX_TEXT_BYTES = 64 * 1024  # params / payloads above this are quarantined, not carried
_INT = re.compile(r"[+-]?\d+")
INT32_MAX = 2**31 - 1


def raw_text(value: Any) -> tuple[str | None, str | None]:
    """(text, error): bytes decoded as strict UTF-8; on failure the text has U+FFFD where
    the bad bytes were, and the error names the first bad offset."""
    if type(value) is bytes:  # the common case first: this runs for every text cell
        try:
            return value.decode("utf-8"), None
        except UnicodeDecodeError as exc:
            return value.decode("utf-8", "replace"), f"invalid UTF-8 at byte {exc.start}"
    if value is None or isinstance(value, str):
        return value, None
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8"), None
        except UnicodeDecodeError as exc:
            return bytes(value).decode("utf-8", "replace"), f"invalid UTF-8 at byte {exc.start}"
    return str(value), None


def plain(value: Any) -> Any:
    """A value for `LegacyDefinition.raw`: JSON-friendly (text, ints, wall times as the
    text MySQL prints), so the migrator can hash it the same on every dialect."""
    if value is None or type(value) in (str, int):
        return value
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return raw_text(value)[0]
    return value


class RowDecoder:
    """Decodes one row's fields and collects their Problems."""

    def __init__(self, tz: LegacyTimeZone) -> None:
        self.tz = tz
        self.problems: list[Problem] = []

    def add(self, field: str, reason: str) -> None:
        self.problems.append(Problem(field, reason))

    def text(self, field: str, value: Any, *, max_bytes: int | None = None) -> str | None:
        decoded, error = raw_text(value)
        if error:
            self.add(field, error)
        # a cheap bound first: n characters are at most 4n bytes of UTF-8
        if decoded is not None and max_bytes is not None and len(decoded) * 4 > max_bytes:
            size = len(decoded.encode("utf-8", "replace"))
            if size > max_bytes:
                self.add(field, f"too long: {size} bytes (limit {max_bytes})")
        return decoded

    def integer(
        self, field: str, value: Any, *, minimum: int | None = None, maximum: int | None = None, default: int = 0
    ) -> int:
        """An int, or `default` with a Problem for NULL / non-integers / out of bounds."""
        if value is None:
            self.add(field, "missing: NULL where a value is required")
            return default
        number = parse_int(value)
        if number is None:
            self.add(field, f"not an integer: {plain(value)!r}"[:200])
            return default
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            self.add(field, f"out of range: {number} (expected {_bounds(minimum, maximum)})")
            return default
        return number

    def wall_time(self, field: str, value: Any, *, required: bool = False) -> datetime | None:
        if value is None:
            if required:
                self.add(field, "missing: NULL where a time is required")
            return None
        try:
            return self.tz.to_utc(value)
        except LegacyTimeError as exc:
            self.add(field, str(exc))
            return None

    def epoch_ms(self, field: str, value: Any) -> datetime | None:
        """Epoch milliseconds; 0 means 'none' (xxl-job's convention)."""
        ms = self.integer(field, value)
        if ms == 0:
            return None
        try:
            return from_epoch_ms(ms)
        except LegacyTimeError as exc:
            self.add(field, str(exc))
            return None


def parse_int(value: Any) -> int | None:
    """Java `Integer.valueOf`-strict: an int, or digits with an optional sign, no spaces."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    text = raw_text(value)[0] if not isinstance(value, str) else value
    if text is not None and _INT.fullmatch(text):
        return int(text)
    return None


def _bounds(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{minimum}..{maximum}"
    return f">= {minimum}" if minimum is not None else f"<= {maximum}"
