"""Write a report in one of its three forms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.errors import UnknownFormat
from reports.render_html import render_html
from reports.render_json import render_json
from reports.render_md import render_md

FORMATS = {"html": render_html, "md": render_md, "json": render_json}


def format_for(path: Path, fmt: str | None) -> str:
    if fmt:
        return fmt
    suffix = path.suffix.lower().lstrip(".")
    return {"htm": "html", "markdown": "md"}.get(suffix, suffix) if suffix in (*FORMATS, "htm", "markdown") else "html"


def render_report(content: dict[str, Any], fmt: str) -> str:
    renderer = FORMATS.get(fmt)
    if renderer is None:
        raise UnknownFormat(fmt)
    return renderer(content)


def write_report(content: dict[str, Any], fmt: str, out: Path) -> Path:
    text = render_report(content, fmt)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
