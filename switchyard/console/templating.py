"""The console's jinja2 environment over its packaged templates (as reports/templating.py:
found through importlib.resources, so they load from a wheel as from the work tree)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from urllib.parse import quote

import jinja2

from reports.templating import packaged_environment, secs


def _load(name: str) -> str:
    return (resources.files("switchyard.console") / "templates" / name).read_text(encoding="utf-8")


def _when(value: str | None) -> str:
    return "" if not value else value.replace("T", " ").replace("+00:00", " UTC")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = abs(seconds)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def business_url(code: str) -> str:
    return "/business/" + quote(code, safe="")


def job_url(code: str) -> str:
    return "/jobs/" + quote(code, safe=":")


def _as_json(value: object) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str)


def report_url(code: str) -> str:
    return "/report/" + quote(code, safe="")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = packaged_environment(_load, autoescape=True)
    env.filters.update(
        when=_when, age=_age, secs=secs, biz_url=business_url, report_url=report_url, job_url=job_url, as_json=_as_json
    )
    return env


def render(name: str, **context: object) -> str:
    return environment().get_template(name).render(**context)
