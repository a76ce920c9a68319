"""Write a report in one of its three forms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.errors import UnknownFormat
from reports.render_html import render_html
from reports.render_json import render_json
from reports.render_md import render_md

FORMATS = {"html": render_html, "md": render_md, "json": render_json}


SUFFIXES = {"html": "html", "htm": "html", "md": "md", "markdown": "md", "json": "json"}


def format_for(path: Path, fmt: str | None) -> str:
    """The form to write: `fmt` if given, else the one the file's suffix names (html when it
    has none). A suffix of no form is refused (UnknownFormat), not written as HTML: a
    `report.pdf` holding HTML would surprise whoever opens it."""
    if fmt:
        return fmt
    suffix = path.suffix.lower().lstrip(".")
    if not suffix:
        return "html"
    if suffix not in SUFFIXES:
        raise UnknownFormat(suffix, f"unknown report suffix .{suffix}: use {', '.join('.' + s for s in SUFFIXES)}")
    return SUFFIXES[suffix]


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
