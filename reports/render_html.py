"""The HTML form of a report: one self-contained page (inline CSS, plots as data URIs,
no scripts, and a Content-Security-Policy that forbids loading anything else)."""

from __future__ import annotations

from typing import Any

from reports.plots import report_plots
from reports.templating import render


def render_html(content: dict[str, Any]) -> str:
    if content.get("kind") == "overview":
        return render("overview.html.j2", html=True, c=content)
    return render("report.html.j2", html=True, c=content, plots=report_plots(content))
