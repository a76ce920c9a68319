"""`python -m bench [--quick] [--only NAME,...] [--fired-mode item|page]`

Brings the stack up (`scripts/stack up`, idempotent), runs the sections in order,
prints a Markdown table per section as it finishes, a goals summary at the end, and
writes every raw figure with the machine, versions and date to bench/results/<UTC
timestamp>.json.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from typing import Any

from bench.harness import REPO, Row, Section, machine, markdown_table, stack_up, versions, write_results

SECTIONS = (
    "admission",
    "shards",
    "publication",
    "fanout",
    "hot_minute",
    "vs_apscheduler",
    "vs_legacy",
    "scale",
    "migration",
    "compare",
    "stops",
    "lanes",
    "admin",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, a few minutes (CI; figures not asserted)")
    p.add_argument("--only", default="", help=f"comma-separated sections out of: {', '.join(SECTIONS)}")
    p.add_argument(
        "--fired-mode",
        choices=("item", "page"),
        default=None,
        help="fan-out fired records: one row per item or per envelope (when the core offers the "
        "switch; default: measure every mode it offers)",
    )
    p.add_argument(
        "--migration-rows",
        type=int,
        default=None,
        help="xxl-job rows for the migration section's full profile (default 100,000)",
    )
    p.add_argument("--no-json", action="store_true", help="do not write bench/results/<timestamp>.json")
    args = p.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        p.error(f"unknown section(s): {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    args.sections = only or list(SECTIONS)
    return args


def goals_summary(sections: list[Section]) -> str:
    lines = [
        "### goals",
        "",
        "| section | figure | measured | ratio | goal | met? |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    from bench.harness import fmt_value

    for s in sections:
        if s.skipped:
            lines.append(f"| {s.name} | _skipped: {s.skipped}_ | — | — | — | — |")
            continue
        if s.error and not s.rows:
            lines.append(f"| {s.name} | _error: {s.error[:120]}_ | — | — | — | — |")
        for r in s.rows:
            if r.goal is None:
                continue
            met = {True: "yes", False: "**no**", None: "—"}[r.met]
            ratio = "—" if r.ratio is None else f"{r.ratio:.2f}x"
            lines.append(
                f"| {s.name} | {r.figure} | {fmt_value(r.switchyard, r.unit)} | {ratio} | {r.goal.text()} | {met} |"
            )
    return "\n".join(lines) + "\n"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    env = stack_up()
    profile: dict[str, Any] = {"quick": args.quick, "shared": {}}
    options: dict[str, Any] = {"fired_mode": args.fired_mode, "migration_rows": args.migration_rows}
    meta: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "profile": "quick" if args.quick else "full",
        "sections": args.sections,
        "options": options,
        "cpu_count": os.cpu_count(),
        "machine": machine(),
        "versions": versions(env),
        "git_commit": _git_commit(),
        "argv": sys.argv[1:] if argv is None else argv,
        "loadavg_start": os.getloadavg(),
    }
    v = meta["versions"]
    print(
        f"# Switchyard bench ({meta['profile']}) {meta['date']}, {meta['cpu_count']} cores; python {v['python']}, "
        f"SQLAlchemy {v['SQLAlchemy']}, pulsar-client {v['pulsar-client']}, APScheduler {v['APScheduler']}, "
        f"MariaDB {v['mariadb']}, Pulsar {v['pulsar_broker']}\n",
        flush=True,
    )
    results: list[Section] = []
    for name in args.sections:
        mod = importlib.import_module(f"bench.{name}")
        t0 = time.monotonic()
        load0 = os.getloadavg()
        retried = None
        for attempt in (1, 2):
            try:
                sec = mod.run(env, profile, options)
                break
            except Exception as exc:  # noqa: BLE001 - one section's failure must not lose the others
                sec = Section(name, getattr(mod, "TITLE", name), error=f"{type(exc).__name__}: {exc}")
                sec.raw["traceback"] = traceback.format_exc()
                if attempt == 2 or not _server_went_away(exc):
                    break
                # the stack is shared: another session restarted a server under us
                retried = sec.error
                print(
                    f"_{name}: a server went away ({(sec.error or '')[:100]}); `scripts/stack up` and one retry_",
                    flush=True,
                )
                time.sleep(5)
                env = stack_up()
        if retried:
            sec.raw["retried_after"] = retried
            sec.notes.append(
                "retried once after a server went away mid-section: "
                + " ".join(retried.split("(Background on")[0].split())[:160]
            )
        sec.seconds = time.monotonic() - t0
        sec.raw["loadavg_before"] = load0
        sec.raw["loadavg_after"] = os.getloadavg()
        if name == "admission":
            _share_admission(sec, profile)
        results.append(sec)
        print(
            markdown_table(sec) + f"\n_{sec.seconds:.0f} s; load average {load0[0]:.1f} -> "
            f"{sec.raw['loadavg_after'][0]:.1f}_\n",
            flush=True,
        )
    meta["loadavg_end"] = os.getloadavg()
    meta["seconds"] = round(time.monotonic() - started, 1)
    print(goals_summary(results), flush=True)
    if not args.no_json:
        path = write_results(results, meta)
        print(f"raw figures: {path.relative_to(REPO)}  ({meta['seconds']:.0f} s in all)", flush=True)
    return 0


_GONE = (
    "can't connect",
    "connection refused",
    "lost connection",
    "server has gone away",
    "connecterror",
    "connection reset",
    "broken pipe",
    "alreadyclosed",
    "not connected",
)


def _server_went_away(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(s in text for s in _GONE)


def _share_admission(sec: Section, profile: dict[str, Any]) -> None:
    """The hot-minute section sizes its lead time from the measured admission rate."""
    for r in sec.rows:
        if isinstance(r, Row) and r.figure.startswith("end to end with Pulsar, threaded") and r.switchyard:
            profile["shared"]["admission_rate_threaded_pulsar"] = r.switchyard


if __name__ == "__main__":
    sys.exit(main())
