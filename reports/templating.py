"""The jinja2 environment over the packaged templates (`reports/templates/`), found
through importlib.resources so they load from a wheel as well as from the work tree."""

from __future__ import annotations

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


def _secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


@lru_cache(maxsize=2)
def environment(html: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        autoescape=html,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(when=_when, pct=_pct, secs=_secs)
    return env


def render(name: str, *, html: bool, **context: object) -> str:
    return environment(html).get_template(name).render(**context)
