"""Compare: runs `bench/bench_compare.py` (owned by another engineer) when it exists
and includes its rows/s.

Its interface is not fixed here: it is run as a script with the stack's env, bounded in
time (quick profile: its `--quick` if it has one, else `--rows 1000000 --repeat 1` when
it takes those; full: its defaults); a JSON object on its stdout is kept
whole, and every "<number> rows/s" it prints becomes a row (label = the text before the
number on that line; lines of a Markdown table it prints are not re-read).

The goal row: issue #5 asks for compare throughput >= 1M log rows/s for 10M log rows
across both sides. `goal_row` builds it (measured rows/s, the goal, ratio = measured /
goal); the script prints it in the bench's table style and reports its best figure in
its closing JSON line (`compare_rows_per_s`, `rows`), from which this section builds
the same row. A run on fewer rows than the goal's 10M says so in the row's note.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

from bench.harness import REPO, Goal, Row, Section, StackEnv

NAME = "compare"
TITLE = "bench/bench_compare.py (the dual-run comparison's own figures)"
SCRIPT = REPO / "bench" / "bench_compare.py"
GOAL_ROWS_PER_S = 1_000_000.0  # issue #5: compare throughput >= 1M log rows/s ...
GOAL_ROWS = 10_000_000  # ... for 10M log rows across both sides
GOAL_FIGURE = "compare throughput, legacy log rows + new fired records (goal: >= 1M rows/s for 10M rows)"


def goal_row(rows_per_s: float | None, rows: int | None, *, cpu_rows_per_s: float | None = None) -> Row:
    """The goal row: measured rows/s, the goal's 1M rows/s, ratio = measured / goal."""
    notes = ["ratio = measured / goal"]
    if rows is not None:
        notes.append(f"best of the runs on {rows:,} rows")
        if rows < GOAL_ROWS * 0.99:
            notes.append(f"fewer than the goal's {GOAL_ROWS:,}: indicative only")
    if cpu_rows_per_s:
        notes.append(f"{cpu_rows_per_s:,.0f} rows per CPU-second")
    ratio = None if rows_per_s is None else rows_per_s / GOAL_ROWS_PER_S
    return Row(
        GOAL_FIGURE,
        rows_per_s,
        None,
        "rows/s",
        Goal("value_min", GOAL_ROWS_PER_S, "rows/s"),
        ratio=ratio,
        note="; ".join(notes),
    )


def goal_row_from(body: Any, rates: list[tuple[str, float]]) -> Row | None:
    """The goal row from the script's closing JSON, else from its 'best' rows/s line."""
    if isinstance(body, dict) and isinstance(body.get("compare_rows_per_s"), (int, float)):
        rows = body.get("rows")
        cpu = body.get("cpu_rows_per_s")
        return goal_row(
            float(body["compare_rows_per_s"]),
            int(rows) if isinstance(rows, (int, float)) else None,
            cpu_rows_per_s=float(cpu) if isinstance(cpu, (int, float)) else None,
        )
    best = [v for label, v in rates if label.lower().startswith("best")]
    if best:
        return goal_row(best[-1], None)
    return None


_RATE = re.compile(r"([0-9][0-9,._]*(?:\.[0-9]+)?)\s*(?:rows/s|rows per second|rows/sec)", re.I)


def parse_output(text: str) -> tuple[list[tuple[str, float]], Any]:
    """(label, rows/s) pairs and a JSON body, if the output is (or ends with) one."""
    body = None
    stripped = text.strip()
    for candidate in (stripped, stripped.splitlines()[-1] if stripped else ""):
        try:
            body = json.loads(candidate)
            break
        except ValueError:
            continue
    rates: list[tuple[str, float]] = []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            continue  # a Markdown table the script printed: its figures are in its JSON
        for m in _RATE.finditer(line):
            try:
                value = float(m.group(1).replace(",", "").replace("_", ""))
            except ValueError:
                continue
            label = line[: m.start()].strip(" :|-=\t") or "rows/s"
            rates.append((label[-80:], value))
    if not rates and isinstance(body, dict):
        for k, v in body.items():
            if isinstance(v, (int, float)) and ("rows_per_s" in k or "rows/s" in k or k.endswith("_rps")):
                rates.append((k, float(v)))
    return rates, body


QUICK_ROWS = 1_000_000


def script_args(environ: dict[str, str], quick: bool) -> list[str]:
    """The script's own quick profile if it has one, else a smaller --rows and one
    --repeat when it takes those; its defaults for the full profile."""
    if not quick:
        return []
    try:
        help_text = subprocess.run(
            [sys.executable, str(SCRIPT), "--help"], cwd=REPO, env=environ, capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    if "--quick" in help_text:
        return ["--quick"]
    args = []
    if "--rows" in help_text:
        args += ["--rows", str(QUICK_ROWS)]
    if "--repeat" in help_text:
        args += ["--repeat", "1"]
    return args


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    sec = Section(NAME, TITLE)
    if not SCRIPT.exists():
        sec.skipped = "bench/bench_compare.py does not exist yet"
        return sec
    limit = 300 if profile["quick"] else 900
    environ = {**os.environ, **env.as_environ(), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(SCRIPT), *script_args(environ, profile["quick"])]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=environ, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        sec.error = f"bench_compare.py did not finish within {limit} s"
        return sec
    rates, body = parse_output(proc.stdout)
    sec.raw = {
        "command": cmd,
        "returncode": proc.returncode,
        "stdout_tail": proc.stdout[-4000:],
        "stderr_tail": proc.stderr[-2000:],
        "json": body,
    }
    if proc.returncode != 0:
        sec.error = f"bench_compare.py exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
    goal = goal_row_from(body, rates)
    if goal is None:
        sec.notes.append("no best compare figure in bench_compare.py's output: the goal row is not measured.")
        goal = goal_row(None, None)
    sec.rows = [goal] + [Row(label, value, None, "rows/s") for label, value in rates]
    if not rates:
        sec.notes.append("no 'rows/s' figure found in bench_compare.py's output; its stdout is in the JSON.")
    return sec
