"""The compare bench's goal row (issue #5: compare throughput >= 1M log rows/s for 10M
log rows across both sides): built in the bench's table style, from the script's own
output. Figures are never asserted here, only the shape of what is printed."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.compare import GOAL_FIGURE, SCRIPT, goal_row, goal_row_from, parse_output
from bench.harness import REPO, Section, markdown_table


def _table_rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("|")]


def test_goal_row_has_the_goal_the_figure_and_the_ratio_to_the_goal() -> None:
    row = goal_row(2_500_000.0, 10_000_000, cpu_rows_per_s=3_000_000.0)
    assert row.figure == GOAL_FIGURE and row.unit == "rows/s"
    assert row.ratio == 2.5 and row.met is True and row.peer is None
    assert row.goal is not None and row.goal.text() == ">= 1,000,000 rows/s"
    assert "ratio = measured / goal" in row.note and "indicative" not in row.note
    text = markdown_table(Section("compare", "t", rows=[row]))
    (line,) = _table_rows(text)[2:]
    cells = [c.strip() for c in line.strip("|").split(" | ")]
    assert cells[1:] == ["2,500,000 rows/s", "—", "2.50x", ">= 1,000,000 rows/s", "yes"]
    assert all(ln.count("|") - ln.count("\\|") == 7 for ln in _table_rows(text))


def test_goal_row_below_the_goal_or_on_fewer_rows_says_so() -> None:
    row = goal_row(400_000.0, 1_000_000)
    assert row.met is False and abs(row.ratio - 0.4) < 1e-9  # type: ignore[operator]
    assert "indicative" in row.note and "1,000,000 rows" in row.note
    unmeasured = goal_row(None, None)
    assert unmeasured.met is None and unmeasured.ratio is None


def test_goal_row_from_the_scripts_json_or_its_best_line() -> None:
    row = goal_row_from({"compare_rows_per_s": 1_500_000, "rows": 9_942_142}, [])
    assert row is not None and row.switchyard == 1_500_000 and row.ratio == 1.5 and "9,942,142" in row.note
    rates, body = parse_output(
        "run 1: 2.0 s wall  900,000 rows/s\nbest: 9,942,142 log rows compared in 7.37 s = "
        "1,348,661 rows/s (CPU 5.95 s = 1,670,948 rows per CPU-second)\n"
    )
    row = goal_row_from(body, rates)
    assert row is not None and row.switchyard == 1_348_661.0
    assert goal_row_from(None, [("run 1", 5.0)]) is None


def test_a_printed_table_is_not_read_back_as_figures() -> None:
    table = markdown_table(Section("compare", "t", rows=[goal_row(1_234_567.0, 10_000_000)]))
    rates, _ = parse_output("best: 10 log rows compared in 1 s = 1,234,567 rows/s\n" + table)
    assert rates == [("best: 10 log rows compared in 1 s", 1234567.0)]


def test_the_script_prints_the_goal_row_and_closes_with_its_figures() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", "20000", "--repeat", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    goal_lines = [ln for ln in _table_rows(out) if ln.startswith(f"| {GOAL_FIGURE}")]
    assert len(goal_lines) == 1 and ">= 1,000,000 rows/s" in goal_lines[0]
    body = json.loads(out.strip().splitlines()[-1])
    assert body["rows"] > 0 and body["compare_rows_per_s"] > 0 and body["goal_rows_per_s"] == 1_000_000
    rates, parsed = parse_output(out)
    assert parsed == body
    row = goal_row_from(parsed, rates)
    assert row is not None and row.switchyard == body["compare_rows_per_s"]
    assert row.ratio == body["compare_rows_per_s"] / 1_000_000
    assert not any(label.startswith(GOAL_FIGURE[:20]) for label, _ in rates)  # the table is not read twice
