"""The bench modules import, and the table / JSON writers produce well-formed output for
fake figures. No timing is asserted here (the bench itself is `python -m bench`)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from bench.harness import (
    Goal,
    Row,
    Section,
    fmt_value,
    lag_summary,
    markdown_table,
    parse_env_file,
    percentile,
    results_payload,
    write_results,
)

MODULES = [
    "bench.harness",
    "bench.workload",
    "bench.executors",
    "bench.admission",
    "bench.publication",
    "bench.fanout",
    "bench.hot_minute",
    "bench.vs_apscheduler",
    "bench.vs_legacy",
    "bench.scale",
    "bench.migration",
    "bench.compare",
    "bench.__main__",
]


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name: str) -> None:
    mod = importlib.import_module(name)
    if name not in ("bench.harness", "bench.workload", "bench.executors", "bench.__main__"):
        assert isinstance(mod.NAME, str) and callable(mod.run)


def test_every_section_is_registered() -> None:
    main = importlib.import_module("bench.__main__")
    for name in main.SECTIONS:
        assert name == importlib.import_module(f"bench.{name}").NAME


def _fake_sections() -> list[Section]:
    s = Section("admission", "fake admission")
    s.rows = [
        Row("met ratio", 800.0, 1000.0, "/s", Goal("ratio_min", 0.7)),
        Row("missed ratio | with a pipe", 100.0, 1000.0, "/s", Goal("ratio_min", 0.7), note="peer: x"),
        Row("absolute", 250_000.0, None, "/s", Goal("value_min", 200_000, "/s")),
        Row("lag", 1.5, None, "s", Goal("value_max", 1.0, "s")),
        Row("flat", 110.0, 100.0, "µs", Goal("ratio_max", 1.5)),
        Row("no figure", None, None, "/s"),
    ]
    s.raw = {"runs": [{"rate": float("nan"), "t": (1, 2)}]}
    s.notes = ["a note"]
    skipped = Section("migration", "fake", skipped="not there yet")
    return [s, skipped]


def test_markdown_table_is_well_formed() -> None:
    sec, skipped = _fake_sections()
    text = markdown_table(sec)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 2 + len(sec.rows)
    assert all(line.count("|") - line.count("\\|") == 7 for line in rows)
    assert "0.80x" in text and "yes" in text and "**no**" in text
    assert "skipped: not there yet" in markdown_table(skipped)


def test_goals() -> None:
    sec = _fake_sections()[0]
    assert [r.met for r in sec.rows] == [True, False, True, False, True, None]


def test_json_writer(tmp_path: Path) -> None:
    sections = _fake_sections()
    path = write_results(sections, {"cpu_count": 2, "versions": {"python": "3.11"}}, tmp_path)
    body = json.loads(path.read_text())
    assert body["meta"]["cpu_count"] == 2
    assert [s["name"] for s in body["sections"]] == ["admission", "migration"]
    assert body["sections"][0]["raw"]["runs"][0]["rate"] is None  # NaN becomes null
    assert body["sections"][0]["rows"][0]["met"] is True
    assert json.loads(json.dumps(results_payload(sections, {})))  # round-trips


def test_small_helpers() -> None:
    assert parse_env_file("# c\nexport A=1\nB='x y'\n") == {"A": "1", "B": "x y"}
    assert percentile([], 50) is None and percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3], 99) == 3
    assert lag_summary([0.1, 0.2])["count"] == 2
    assert fmt_value(None) == "—" and fmt_value(12345.6, "/s") == "12,346 /s"


def test_compare_output_parsing() -> None:
    from bench.compare import parse_output

    rates, body = parse_output("frames: 12,345 rows/s\nmatch 900.5 rows/s\n")
    assert rates == [("frames", 12345.0), ("match", 900.5)] and body is None
    rates, body = parse_output('{"compare_rows_per_s": 10}')
    assert rates == [("compare_rows_per_s", 10.0)] and body == {"compare_rows_per_s": 10}
