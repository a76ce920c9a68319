"""The Markdown form of a report."""

from __future__ import annotations

from typing import Any

from reports.templating import render


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_md(content: dict[str, Any]) -> str:
    name = "overview.md.j2" if content.get("kind") == "overview" else "report.md.j2"
    return render(name, html=False, c=content, cell=_cell)
