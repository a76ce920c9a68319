"""How long the console's pages take against 20 businesses / 2,000 jobs (a figure, not
an assertion): `python -m bench.console_page [--mariadb] [--repeat 10]`.

The set is built with the project's own APIs (tests/console_state.py: seeded xxl-job
database, migrated, businesses in dual-run, cut over, rolled back, with stored verdicts)
and served by `switchyard console --legacy-url ...` as an operator runs it. Printed per
page: the server's answer time (median and max of --repeat GETs over loopback), and the
time headless Chromium takes to load and render it (`--dump-dom`, median of 3, less the
same browser's start-up on about:blank)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import quote

from tests.console_state import build_state
from tests.integration.console_browser import chromium, console_process, run_chromium


def _get_times(url: str, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as resp:
            resp.read()
        out.append(time.perf_counter() - started)
    return out


def _browser_time(url: str, profile: Path) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        run = run_chromium(url, profile, "--dump-dom")
        assert run.returncode == 0, run.stderr[-1000:]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.console_page", description=__doc__.splitlines()[0])
    p.add_argument("--mariadb", action="store_true", help="on the stack's MariaDB (else SQLite files)")
    p.add_argument("--businesses", type=int, default=20)
    p.add_argument(
        "--jobs-per-business",
        type=int,
        default=118,
        help="seeded per business; some are quarantined or not migrated (118: about 2,000 jobs in all)",
    )
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args(argv)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="console-bench-")))
        if args.mariadb:
            from tests.backends import mariadb_database

            legacy = stack.enter_context(mariadb_database("benchcl"))
            target = stack.enter_context(mariadb_database("benchct"))
        else:
            legacy, target = f"sqlite:///{tmp / 'legacy.db'}", f"sqlite:///{tmp / 'target.db'}"
        started = time.perf_counter()
        st = build_state(legacy, target, groups=args.businesses, jobs_per_group=args.jobs_per_business, bad_rows=20)
        jobs = len(st.env.store.triggers_of())
        st.env.legacy.dispose()
        st.env.store.close()
        print(
            f"built {args.businesses} businesses / {jobs} jobs on {'MariaDB' if args.mariadb else 'SQLite'} "
            f"in {time.perf_counter() - started:.1f} s"
        )
        base = stack.enter_context(console_process(target, [legacy], tmp / "console.log"))
        pages = {
            "businesses (/)": "/",
            "a business (cut over, orphan)": f"/business/{quote(st.cutover, safe='')}",
            "scheduler & lag": "/scheduler",
            "audit": "/audit",
            "API /api/businesses": "/api/businesses",
            "full report (rendered on demand)": f"/report/{quote(st.dual_run, safe='')}",
        }
        browser = chromium()
        blank = _browser_time("about:blank", tmp / "profile") if browser else None
        print("| page | server median | server max | Chromium wall (median of 3) | less start-up |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, path in pages.items():
            _get_times(base + path, 1)  # warm
            t = _get_times(base + path, args.repeat)
            wall = less = "-"
            if browser and blank is not None and not path.startswith("/api/"):
                took = _browser_time(base + path, tmp / "profile")
                wall, less = f"{took * 1000:.0f} ms", f"{max(0.0, took - blank) * 1000:.0f} ms"
            print(f"| {name} | {statistics.median(t) * 1000:.0f} ms | {max(t) * 1000:.0f} ms | {wall} | {less} |")
        if blank is not None:
            print(f"(Chromium start-up on about:blank, subtracted: {blank * 1000:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
