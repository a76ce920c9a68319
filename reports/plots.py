"""The report's plots, drawn with matplotlib's Agg canvas (no display, no global pyplot
state, safe in threads) and embedded as base64 PNG data URIs."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import matplotlib.dates as mdates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dualrun.model import from_iso

LEGACY, NEW = "#d9822b", "#2b6cb0"
_STYLE = {"p99": "-", "p95": "--", "p50": ":"}


def _figure(width: float = 7.6, height: float = 2.9) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _legend_below(fig: Figure, ax: Any) -> None:
    """The legend under the plot, outside its axes: inside them it covered bars and lines
    wherever matplotlib found the least data, which is still data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), fontsize=7, frameon=False)


def fitted_range(values: Sequence[float], *, floor: float, ceil: float, pad: float = 5.0) -> tuple[float, float]:
    """Axis limits that hold every finite value (padded, clipped to [floor, ceil]): a
    regression far below the usual band must be on its chart, not under its bottom edge."""
    finite = [v for v in values if v == v]
    if not finite:
        return floor, ceil
    lo, hi = min(finite), max(finite)
    return max(floor, lo - pad), min(ceil, hi + pad)


def _data_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _times(points: Sequence[dict[str, Any]], key: str) -> list[datetime]:
    return [from_iso(p[key]) for p in points]


def _values(points: Sequence[dict[str, Any]], key: str, scale: float = 1.0) -> list[float]:
    return [float("nan") if p.get(key) is None else float(p[key]) * scale for p in points]


def _dates(ax: Any) -> None:
    loc = mdates.AutoDateLocator(maxticks=8)
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))


def lag_figure(series: Sequence[dict[str, Any]]) -> Figure:
    fig, ax = _figure()
    t = _times(series, "start")
    for side, color in (("legacy", LEGACY), ("new", NEW)):
        for q, style in _STYLE.items():
            ax.plot(
                t,
                _values(series, f"{side}_{q}"),
                style,
                color=color,
                linewidth=1.6,
                marker=".",
                markersize=3,
                label=f"{side} {q}",
            )
    ax.set_ylabel("fire-time lag (s)")
    ax.set_title("Fire-time lag percentiles per interval", loc="left", fontsize=10)
    _legend_below(fig, ax)
    _dates(ax)
    return fig


def volume_figure(series: Sequence[dict[str, Any]]) -> Figure:
    fig, ax = _figure()
    t = mdates.date2num(_times(series, "start"))
    width = (t[1] - t[0]) * 0.4 if len(t) > 1 else 0.01
    ax.bar(t - width / 2, _values(series, "legacy_fires"), width, color=LEGACY, label="legacy fires")
    ax.bar(t + width / 2, _values(series, "new_fires"), width, color=NEW, label="new fires")
    ax.xaxis_date()
    ax.set_ylabel("fires")
    ax.set_title("Call volume per interval", loc="left", fontsize=10)
    _legend_below(fig, ax)
    _dates(ax)
    return fig


def success_figure(series: Sequence[dict[str, Any]], shadow: bool) -> Figure:
    fig, ax = _figure()
    t = _times(series, "start")
    ax.plot(t, _values(series, "legacy_success", 100), "-o", color=LEGACY, markersize=3, label="legacy")
    if not shadow:
        ax.plot(t, _values(series, "new_success", 100), "-o", color=NEW, markersize=3, label="new")
    else:
        ax.text(
            0.5,
            0.5,
            "new side in shadow mode: handlers not invoked, success not compared",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="#6b7280",
        )
    ax.set_ylabel("success rate (%)")
    shown = _values(series, "legacy_success", 100) + ([] if shadow else _values(series, "new_success", 100))
    lo, hi = fitted_range(shown, floor=0.0, ceil=100.5)
    ax.set_ylim(bottom=min(lo, 90.0), top=max(hi, 100.5))  # a healthy 99.9 % still reads as near the top
    ax.set_title("Success rate per interval", loc="left", fontsize=10)
    _legend_below(fig, ax)
    _dates(ax)
    return fig


def history_figure(history: Sequence[dict[str, Any]]) -> Figure:
    fig, ax = _figure()
    t = _times(history, "computed_at")
    ax.plot(t, _values(history, "legacy_p99"), "-o", color=LEGACY, markersize=3, label="legacy p99")
    ax.plot(t, _values(history, "new_p99"), "-o", color=NEW, markersize=3, label="new p99")
    bad = [(x, y) for x, y, p in zip(t, _values(history, "new_p99"), history, strict=True) if p["verdict"] != "ready"]
    if bad:
        ax.scatter([b[0] for b in bad], [b[1] for b in bad], marker="x", color="#c53030", zorder=3, label="not ready")
    ax.set_ylabel("p99 lag (s)")
    ax.set_title("Stored comparisons over time (watch series)", loc="left", fontsize=10)
    _legend_below(fig, ax)
    _dates(ax)
    return fig


def report_plots(content: dict[str, Any]) -> dict[str, str]:
    """name -> data URI of every plot the business report shows."""
    series = content.get("series") or []
    plots: dict[str, str] = {}
    if series:
        plots["lag"] = _data_uri(lag_figure(series))
        plots["volume"] = _data_uri(volume_figure(series))
        plots["success"] = _data_uri(success_figure(series, content.get("mode") == "shadow"))
    if len(content.get("history") or []) >= 2:
        plots["history"] = _data_uri(history_figure(content["history"]))
    return plots
