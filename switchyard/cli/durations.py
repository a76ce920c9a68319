"""One way to write a duration on every command (issue 32): `500ms`, `30s`, `5m`, `2h`,
`7d`, or units run together (`1h30m`, `1m30s`). A bare number is seconds, which is what
every duration option took before it had units, so a script written then means the
same today."""

from __future__ import annotations

from datetime import timedelta

import click

from dualrun.settings import DURATION_EXAMPLES, parse_duration

EXAMPLES = DURATION_EXAMPLES


def format_duration(d: timedelta) -> str:
    """The shortest spelling parse_duration reads back (for defaults shown in --help)."""
    ms = round(d.total_seconds() * 1000)
    if ms % 1000:
        return f"{ms}ms"
    rest, out = ms // 1000, ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out or "0s"


class Duration(click.ParamType):
    """A duration option's type: converts to a timedelta within [minimum, maximum]."""

    name = "duration"

    def __init__(self, minimum: timedelta | None = None, maximum: timedelta | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            d = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            d = timedelta(seconds=float(value))  # a default written as seconds, or a number from a config file
        else:
            try:
                d = parse_duration(str(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if self.minimum is not None and d < self.minimum:
            self.fail(f"{value!r} is shorter than the minimum {format_duration(self.minimum)}", param, ctx)
        if self.maximum is not None and d > self.maximum:
            self.fail(f"{value!r} is longer than the maximum {format_duration(self.maximum)}", param, ctx)
        return d


def seconds(minimum: float | None = None, maximum: float | None = None) -> Duration:
    """A Duration bounded in seconds: how the options that took plain seconds are bounded."""
    return Duration(
        None if minimum is None else timedelta(seconds=minimum),
        None if maximum is None else timedelta(seconds=maximum),
    )


POSITIVE = Duration(minimum=timedelta(microseconds=1))

__all__ = ["EXAMPLES", "POSITIVE", "Duration", "format_duration", "parse_duration", "seconds"]
