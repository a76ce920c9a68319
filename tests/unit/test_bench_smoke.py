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
    "bench.cpu",
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
    if name not in ("bench.harness", "bench.workload", "bench.executors", "bench.cpu", "bench.__main__"):
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


# bench/cpu.py: the /proc parsers on fake text, and a window's arithmetic on fake readings

_PID_STAT = (
    "9601 (maria db) (x)) S 1 9601 9601 0 -1 4194560 122524 0 6 0 18456 6196 0 0 20 0 80 0 "
    "4579088 8797587976192 126859 18446744073709551615 0 0 0 0 0 0 552967 4102 26345 0 0 0 17 1 0 0 0 0 0"
)
_MACHINE_STAT = (
    "cpu  5280320 4099 475074 3825213 34254 0 42118 2766 0 0\n"
    "cpu0 2537834 2205 219281 2043592 8435 0 15046 1347 0 0\n"
    "intr 1 2 3\n"
)


def test_cpu_parsers() -> None:
    from bench.cpu import busy_share, parse_machine_stat, parse_pid_stat

    # a command name holding a space and a ')' is cut at the last ')'
    assert parse_pid_stat(_PID_STAT) == ("maria db) (x)", "S", 18456 + 6196)
    assert parse_pid_stat("7 (python) Z 1 " + " ".join(["0"] * 9) + " 5 6 0 0")[1:] == ("Z", 11)
    everything = 5280320 + 4099 + 475074 + 3825213 + 34254 + 0 + 42118 + 2766
    assert parse_machine_stat(_MACHINE_STAT) == (everything, 3825213 + 34254, 2766, 0 + 42118)
    with pytest.raises(ValueError):
        parse_machine_stat("cpu0 1 2 3 4 5\n")
    assert busy_share((1000, 400, 0), (1200, 450, 0)) == pytest.approx(0.75)
    assert busy_share((1000, 400, 0), (1000, 400, 0)) is None


def test_cpu_window_figures() -> None:
    from bench import cpu

    w = cpu.CpuWindow({"scheduler": [1], "executor": [2], "db": [3]}, watch={"broker": [4]})
    # fake readings: 2,000 triggers in 2 s; the scheduler 1.0 s of CPU, the executor 0.4 s
    # (reported by itself at its end), the server 0.6 s, the idle broker 0.02 s; the
    # machine (2 cores, 100 ticks/s) 360 of 400 jiffies busy
    w._t0, w._t1 = 10.0, 12.0
    w._cpu0 = {"scheduler": 5.0, "executor": 1.0, "db": 100.0, "broker": 50.0}
    w._cpu1 = {"scheduler": 6.0, "executor": None, "db": 100.6, "broker": 50.02}
    w.fill_missing({"executor": 1.4, "db": 999.0})  # only a missing reading is filled
    w.fill_missing({"scheduler": 6.0}, replace=True)  # or one the process read closer to the end
    w._m0, w._m1 = (0, 0, 0, 0), (400, 40, 4, 10)
    w._every0 = {1: ("python", 500), 9: ("etcd", 100), 10: ("pytest", 7), 11: ("gone", 1)}
    w._every1 = {1: ("python", 600), 9: ("etcd", 130), 10: ("pytest", 57), 12: ("new", 40)}
    w.cores = 2
    f = w.figures(2000)
    assert f["cpu_s"]["executor"] == pytest.approx(0.4) and f["cpu_s"]["db"] == pytest.approx(0.6)
    assert f["cpu_ms_per_item"]["scheduler"] == pytest.approx(0.5)
    assert f["total_cpu_ms_per_item"] == pytest.approx(1.0)  # the watched broker is not counted
    assert f["ceiling_per_s"] == pytest.approx(2000.0)  # 2 cores x 1000 ms / 1.0 ms
    assert f["machine_busy"] == pytest.approx(0.9) and f["steal_share"] == pytest.approx(0.01)
    assert f["pipeline_cores_used"] == pytest.approx(1.0) and f["cores_used"]["scheduler"] == pytest.approx(0.5)
    # the rest: 3.6 s busy - 2.0 s of the pipeline; by name, the processes seen at both
    # readings outside the roles, largest first (ticks of 10 ms)
    assert f["rest_cpu_s"] == pytest.approx(1.6) and f["irq_cpu_s"] == pytest.approx(0.1)
    assert list(f["rest_by_name_cpu_s"]) == ["pytest", "etcd"]
    assert f["rest_by_name_cpu_s"]["pytest"] == pytest.approx(0.5)
    text = cpu.describe(f, 500.0, "APScheduler")
    assert "scheduler 0.500 (0.50 cores)" in text and "not counted: broker 0.010" in text
    assert "the rest 0.80: pytest 0.25, etcd 0.15)" in text
    assert "tops out at 2,000/s = 4.00x APScheduler" in text and "machine busy 90%" in text
    # a role that could not be read leaves the total and the ceiling unknown, not wrong
    w._cpu1["db"] = None
    assert w.figures(2000)["ceiling_per_s"] is None


def test_cpu_live_readers() -> None:
    """This process and the machine, read from the real /proc (no servers needed)."""
    import os

    from bench import cpu

    assert cpu.pid_cpu_s(os.getpid()) is not None
    assert cpu.pid_cpu_s(os.getppid()) is not None  # another process, read from /proc
    all_, idle, steal, irq = cpu.machine_jiffies()
    assert all_ >= idle >= 0 and steal >= 0 and irq >= 0
    assert os.getpid() in cpu.every_process()
    w = cpu.CpuWindow.pipeline().start()
    sum(range(100_000))
    f = w.stop().figures(10)
    assert f["cpu_s"][cpu.SCHEDULER] is not None and f["cpu_s"][cpu.SCHEDULER] > 0
