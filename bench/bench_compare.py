"""Dual-run comparison throughput: log rows compared per second.

Builds synthetic frames in memory (no database): an xxl-job-shaped legacy log without
fire times (so every row goes through nominal-time reconstruction), with ~1 % failures
retried, a few late and a few missing fires; the new side's fired records with a few
dropped, late and failed; the expected occurrences; and an A/A baseline window of the same
size. Then it times `dualrun.compare.compare_frames` (matching, measures, series,
mismatch summaries, verdict) and prints rows/s, where rows = legacy log rows + new
records of the compared window (the baseline's rows are processed too, on top).

    .venv/bin/python bench/bench_compare.py              # 10M rows: 5M legacy + 5M new
    .venv/bin/python bench/bench_compare.py --rows 1000000

It ends with the goal row (issue #5: >= 1M log rows/s for 10M log rows across both
sides) in the bench's table style (`bench.harness.markdown_table`, `bench.compare.goal_row`),
then one JSON line with the figures (`python -m bench` builds its row from that line).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from dualrun.compare import Inputs, compare_frames
from dualrun.frames import FAIL, RETRY, SCHEDULE, SUCCESS, JobIndex
from dualrun.model import Mode, Window
from dualrun.settings import CompareSettings
from scheduler_core.times import to_ms

if __package__ in (None, ""):  # run as a script: the repository root holds `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.compare import GOAL_ROWS, GOAL_ROWS_PER_S, NAME, TITLE, goal_row
from bench.harness import Section, markdown_table

UTC = timezone.utc
NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


def expected(jobs: int, start: int, seconds: int, period_s: int) -> pd.DataFrame:
    per_job = seconds // period_s
    job = np.repeat(np.arange(jobs, dtype=np.int64), per_job)
    phase = (np.arange(jobs, dtype=np.int64) % period_s) * 1000
    sched = start + np.repeat(phase, per_job) + np.tile(np.arange(per_job, dtype=np.int64) * period_s * 1000, jobs)
    return pd.DataFrame(copy=False, data={"job": job, "sched": sched})


def legacy_log(exp: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    n = len(exp)
    keep = rng.random(n) > 0.0005  # the legacy side misses a few fires itself
    sched = exp["sched"].to_numpy()[keep]
    job = exp["job"].to_numpy()[keep]
    lag = rng.integers(0, 2000, len(sched))  # dispatch 0-2 s late, stored without ms
    trig = (sched + lag) // 1000 * 1000
    fail = rng.random(len(sched)) < 0.01
    status = np.where(fail, FAIL, SUCCESS)
    first = pd.DataFrame(
        copy=False,
        data={
            "job": job,
            "shard": 0,
            "total": 1,
            "attempt": 0,
            "kind": SCHEDULE,
            "status": status,
            "trig": trig,
            "sched": -1,
            "fin": trig + 1000,
        },
    )
    retry = first[fail].assign(
        attempt=1, kind=RETRY, status=SUCCESS, trig=lambda f: f["trig"] + 10_000, fin=lambda f: f["trig"] + 11_000
    )
    rows = pd.concat([first, retry], ignore_index=True).astype(np.int64)
    order = np.argsort(rows["trig"].to_numpy(), kind="stable")  # readers yield by trigger_time
    return pd.DataFrame(copy=False, data={c: rows[c].to_numpy()[order] for c in rows.columns})


def new_records(exp: pd.DataFrame, rng: np.random.Generator, n: int) -> pd.DataFrame:
    exp = exp.iloc[:n]
    keep = rng.random(len(exp)) > 0.001
    sched = exp["sched"].to_numpy()[keep]
    lag = rng.gamma(2.0, 40.0, len(sched)).astype(np.int64)
    lag[rng.random(len(sched)) < 0.0005] = 7000
    status = np.where(rng.random(len(sched)) < 0.012, FAIL, SUCCESS)
    return pd.DataFrame(
        copy=False,
        data={
            "job": exp["job"].to_numpy()[keep],
            "item": 0,
            "total": 1,
            "status": status,
            "sched": sched,
            "recv": sched + lag,
            "misfired": 0,
            "attempt": 0,
        },
    ).astype(np.int64)


def build(rows: int, seed: int) -> Inputs:
    rng = np.random.default_rng(seed)
    window = Window(start=NOW - timedelta(hours=1), end=NOW)
    base = window.shifted(timedelta(hours=1))
    per_side = rows // 2
    period = 1
    jobs = max(1, int(per_side / 1.01 / 3600))  # legacy rows = fires + ~1 % retries
    exp = expected(jobs, to_ms(window.start), 3600, period)
    bexp = expected(jobs, to_ms(base.start), 3600, period)
    legacy = legacy_log(exp, rng)
    legacy = legacy.iloc[:per_side] if len(legacy) > per_side else legacy
    index = JobIndex()
    for j in range(jobs):
        index.id(f"xxl:bench:{j}")
    return Inputs(
        biz_code="bench",
        source="xxl-job",
        mode=Mode.BOTH,
        window=window,
        baseline_window=base,
        legacy=legacy,
        baseline_legacy=legacy_log(bexp, rng),
        new=new_records(exp, rng, per_side),
        expected=exp,
        baseline_expected=bexp,
        jobs=index,
        info={},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="legacy + new rows of the compared window")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    t0 = time.perf_counter()
    inputs = build(args.rows, args.seed)
    rows = len(inputs.legacy) + len(inputs.new)
    print(
        f"built {len(inputs.legacy):,} legacy rows + {len(inputs.new):,} new records "
        f"(+ {len(inputs.baseline_legacy):,} baseline rows, {len(inputs.expected):,} expected) "
        f"for {len(inputs.jobs):,} jobs in {time.perf_counter() - t0:.1f} s"
    )
    best, best_cpu = float("inf"), float("inf")
    for i in range(args.repeat):
        t, cpu = time.perf_counter(), time.process_time()
        c = compare_frames(inputs, CompareSettings(), NOW)
        elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
        best, best_cpu = min(best, elapsed), min(best_cpu, cpu)
        print(
            f"run {i + 1}: {elapsed:.2f} s wall ({cpu:.2f} s CPU)  {rows / elapsed:,.0f} rows/s  "
            f"verdict {c.verdict.value}, {sum(v['flagged'] for v in c.mismatch_counts.values()):,} flagged mismatches"
        )
    rate, cpu_rate = rows / best, (rows / best_cpu if best_cpu > 0 else None)
    print(
        f"best: {rows:,} log rows compared in {best:.2f} s = {rate:,.0f} rows/s "
        + (f"(CPU {best_cpu:.2f} s = {cpu_rate:,.0f} rows per CPU-second)" if cpu_rate else "")
    )
    print()
    print(markdown_table(Section(NAME, TITLE, rows=[goal_row(rate, rows, cpu_rows_per_s=cpu_rate)])))
    print(
        json.dumps(
            {
                "compare_rows_per_s": round(rate, 1),
                "rows": rows,
                "best_s": round(best, 3),
                "cpu_rows_per_s": None if cpu_rate is None else round(cpu_rate, 1),
                "repeat": args.repeat,
                "goal_rows_per_s": GOAL_ROWS_PER_S,
                "goal_rows": GOAL_ROWS,
                "goal_ratio": round(rate / GOAL_ROWS_PER_S, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
