"""The mutation job (`scripts/mutation`, and `pytest --long` through
tests/unit/test_mutation_job.py): mutmut over the modules that decide who fires an
occurrence at a switch and the instruments that count it, against their unit tests (the
modules, the test files and why: `[tool.mutmut]` in pyproject.toml and docs/mutation.md).

Every mutant must be killed, or be listed as equivalent, with its reason, under
"## Equivalent mutants" in docs/mutation.md. A survivor that is not listed fails the job:
a new test kills it, or the note argues it. Mutant names are mutmut's
(`module.x_function__mutmut_N`, `module.xǁClassǁmethod__mutmut_N`); they stay the same while
the function's text does not change, so an edit of a listed function means reading its
survivors again (the job then names them).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTE = REPO / "docs" / "mutation.md"
MUTMUT = Path(sys.executable).parent / "mutmut"

# the groups, in the order they run (the first two first: they are the switch's own lines),
# each a list of mutmut name patterns
GROUPS: dict[str, list[str]] = {
    "handover": [
        "migrator.cutover.x_first_at_or_after*",
        "migrator.cutover.xǁBusinessSwitchǁ_first_at_or_after*",
        "migrator.cutover.xǁBusinessSwitchǁ_legacy_start*",
        "migrator.cutover.xǁBusinessSwitchǁ_once_fenced*",
        "migrator.cutover.xǁBusinessSwitchǁ_handover_instant*",
        "migrator.cutover.xǁBusinessSwitchǁ_published_after*",
    ],
    "boundary": ["dualrun.boundary.*"],
    "fence": ["scheduler_core.fence.*"],
    "supersede": ["scheduler_core.supersede.*", "migrator.schedule_edits.*"],
    # another engineer's module (issue 27's one stop mechanism): run once it exists
    "stops": ["scheduler_core.stops.*"],
    # the post-cutover watch: issue 27 names it among the modules the --long job covers
    # (its "0 missing, 0 doubled" after the switch rests on these lines)
    "watch": ["dualrun.aftercut.*"],
}
# every default group in full (a fresh mutants/, or a change of the test selection, which
# makes mutmut forget every group's results) took about 80 minutes on the 2-core box
BUDGET_S = 7200.0
DEFAULT_GROUPS = ["handover", "boundary", "fence", "supersede", "stops", "watch"]
# a group whose module may not exist yet runs only once it does
NEEDS = {"stops": REPO / "scheduler_core" / "stops.py"}
_RESULT = re.compile(r"^\s*([\w.ǁ]+__mutmut_\d+): (\w[\w ]*)$")
_LISTED = re.compile(r"^- `([\w.ǁ]+__mutmut_\d+)`")


def equivalent_mutants(note: Path = NOTE) -> set[str]:
    """The mutants docs/mutation.md argues equivalent (its "## Equivalent mutants" list)."""
    names: set[str] = set()
    inside = False
    for line in note.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Equivalent mutants"
        elif inside and (m := _LISTED.match(line)):
            names.add(m.group(1))
    return names


def _matches(name: str, patterns: list[str]) -> bool:
    # mutmut's own globs: only a trailing "*" is used here
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def forget_survivors(patterns: list[str]) -> int:
    """Mark every mutant of `patterns` that was not killed as not checked, so that this run
    tests it again: mutmut keeps a result while the function's text is unchanged, and does
    not always notice that a test was added since. Returns how many."""
    forgotten = 0
    for meta in (REPO / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text(encoding="utf-8"))
        codes = data.get("exit_code_by_key", {})
        # mutmut's exit codes (mutmut.stats): 1 and 3 killed, None not checked, others alive
        alive = [k for k, code in codes.items() if code is not None and code not in (1, 3) and _matches(k, patterns)]
        for k in alive:
            codes[k] = None
        if alive:
            meta.write_text(json.dumps(data), encoding="utf-8")
            forgotten += len(alive)
    return forgotten


def results(patterns: list[str]) -> dict[str, str]:
    """mutant name -> status (killed, survived, timeout, ...) of the last runs."""
    out = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        m = _RESULT.match(line)
        if m and _matches(m.group(1), patterns):
            found[m.group(1)] = m.group(2).strip()
    return found


def run(groups: list[str], budget_s: float) -> int:
    """Run the groups' mutants (one worker: a shared 2-core box), report, and return the
    number of survivors that docs/mutation.md does not argue equivalent."""
    started = time.monotonic()
    patterns = [p for g in groups for p in GROUPS[g]]
    over = False
    again = forget_survivors(patterns)
    if again:
        print(f"mutation: {again} mutant(s) not killed last time are tested again", flush=True)
    for g in groups:
        left = budget_s - (time.monotonic() - started)
        if left <= 0:
            print(f"mutation: over the budget of {budget_s:.0f} s before group {g}; not run", flush=True)
            over = True
            break
        if g in NEEDS and not NEEDS[g].exists():
            print(f"mutation: group {g}: {NEEDS[g].relative_to(REPO)} does not exist yet; skipped", flush=True)
            continue
        print(f"mutation: group {g}", flush=True)
        # mutmut exits 0 whatever survived; a crash of mutmut itself fails the job, and one
        # past the budget ends it (what ran so far is reported, and the job fails)
        try:
            subprocess.run(
                [str(MUTMUT), "run", "--max-children", "1", *GROUPS[g]],
                cwd=REPO,
                check=True,
                timeout=left,
                stdout=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            print(f"mutation: over the budget of {budget_s:.0f} s in group {g}; stopped", flush=True)
            over = True
            break
    found = results(patterns)
    listed = equivalent_mutants()
    by_status = Counter(found.values())
    survivors = sorted(n for n, s in found.items() if s != "killed")
    unexplained = [n for n in survivors if n not in listed]
    print(
        f"mutation: {len(found)} mutants in {', '.join(groups)}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(by_status.items()))
        + f"; {len(survivors) - len(unexplained)} argued equivalent in {NOTE.relative_to(REPO)}; "
        f"{time.monotonic() - started:.0f} s"
    )
    for n in unexplained:
        print(f"  not killed and not argued: {n} ({found[n]}); `mutmut show {n}`")
    return -1 if over else len(unexplained)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/mutation", description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", help=f"of {' '.join(GROUPS)} (default: {' '.join(DEFAULT_GROUPS)})")
    ap.add_argument(
        "--budget", type=float, default=BUDGET_S, help=f"seconds for the whole job (default {BUDGET_S:.0f})"
    )
    args = ap.parse_args(argv)
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        ap.error(f"unknown group(s) {unknown}; groups: {' '.join(GROUPS)}")
    unexplained = run(list(args.groups) or DEFAULT_GROUPS, args.budget)
    return 0 if unexplained == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
