"""The run log's charts, per business and per day (matplotlib's Agg canvas, as data URIs:
the console's CSP allows only data: images): runs by result, stacked (the xxl-job
admin's run report), and the fire-time lag p50/p95/p99. Axes fitted to the data: the
lag axis is logarithmic when the values span more than two decades (a 5 ms p50 and a
40 s p99 both readable), linear from 0 otherwise."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import matplotlib.dates as mdates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# one colour per result, in stacking order (final outcomes first, open ones on top)
RESULT_COLOURS = {
    "succeeded": "#2f855a",
    "failed": "#c53030",
    "timed_out": "#dd6b20",
    "killed": "#6b46c1",
    "skipped": "#a0aec0",
    "received": "#3182ce",
    "published": "#90cdf4",
    "pending": "#e2e8f0",
}
_QUANTILES = {"p50": ":", "p95": "--", "p99": "-"}


def _figure() -> tuple[Figure, Any]:
    fig = Figure(figsize=(7.2, 2.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _days(days: Sequence[dict[str, Any]]) -> list[float]:
    return [float(mdates.date2num(datetime.fromtimestamp(d["day_ms"] / 1000, UTC))) for d in days]


def _date_axis(ax: Any) -> None:
    loc = mdates.AutoDateLocator(maxticks=8)
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))


def results_chart(days: Sequence[dict[str, Any]]) -> str:
    fig, ax = _figure()
    x = _days(days)
    bottom = [0.0] * len(days)
    for result, colour in RESULT_COLOURS.items():
        n = [float(d["by_result"].get(result, 0)) for d in days]
        if any(n):
            ax.bar(x, n, 0.7, bottom=bottom, color=colour, label=result)
            bottom = [b + v for b, v in zip(bottom, n, strict=True)]
    ax.set_ylim(0, max([*bottom, 1.0]) * 1.08)
    if len(x) == 1:
        ax.set_xlim(x[0] - 1, x[0] + 1)
    ax.set_ylabel("runs")
    ax.set_title("Runs per day by result", loc="left", fontsize=10)
    _date_axis(ax)
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside lower center", ncol=6, fontsize=7, frameon=False)
    return _uri(fig)


def lag_chart(days: Sequence[dict[str, Any]]) -> str:
    fig, ax = _figure()
    x = _days(days)
    seen: list[float] = []
    for q, style in _QUANTILES.items():
        ys = [float("nan") if d["lag_ms"][q] is None else float(d["lag_ms"][q]) for d in days]
        seen += [y for y in ys if y == y]
        ax.plot(x, ys, style, color="#2b6cb0", marker=".", markersize=4, linewidth=1.5, label=q)
    if seen and min(seen) > 0 and max(seen) / min(seen) > 100:
        ax.set_yscale("log")
        ax.set_ylim(min(seen) / 1.5, max(seen) * 1.5)
    else:
        ax.set_ylim(0, max([*seen, 1.0]) * 1.1)
    if len(x) == 1:
        ax.set_xlim(x[0] - 1, x[0] + 1)
    ax.set_ylabel("fire-time lag (ms)")
    ax.set_title("Fire-time lag per day (start after the scheduled time)", loc="left", fontsize=10)
    _date_axis(ax)
    fig.legend(loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    return _uri(fig)


__all__ = ["lag_chart", "results_chart"]
