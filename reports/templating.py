"""The jinja2 environment over the packaged templates (`reports/templates/`), found
through importlib.resources so they load from a wheel as well as from the work tree."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from importlib import resources

import jinja2

from reports.errors import ReportError


def _load(name: str) -> str:
    try:
        return (resources.files("reports") / "templates" / name).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError) as exc:
        raise ReportError(f"report template {name} is missing from the installed package") from exc


def _when(value: str | None) -> str:
    return "" if not value else value.replace("T", " ").replace("Z", " UTC")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.2f}%"


def secs(value: float | None) -> str:
    """Seconds as the reports and the console print them."""
    return "n/a" if value is None else f"{value:.3f} s"


def packaged_environment(
    load: Callable[[str], str], *, autoescape: bool, keep_trailing_newline: bool = False
) -> jinja2.Environment:
    """A jinja2 environment over templates `load` reads from a package, with the settings
    the reports and the console share (a missing variable is an error, blocks trimmed)."""
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=keep_trailing_newline,
    )


@lru_cache(maxsize=2)
def environment(html: bool) -> jinja2.Environment:
    env = packaged_environment(_load, autoescape=html, keep_trailing_newline=True)
    env.filters.update(when=_when, pct=_pct, secs=secs)
    return env


def render(name: str, *, html: bool, **context: object) -> str:
    return environment(html).get_template(name).render(**context)
