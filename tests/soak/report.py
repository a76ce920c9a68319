"""The soak's report: what was injected, what the operator did, what the checker found;
a table to read and a JSON file to compare runs by."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dualrun.model import Window
from tests.soak.checker import BusinessCheck, Duplicates, MemorySeries, StatusSample, memory_growth
from tests.soak.nemesis import Fault

WARM_UP_S = 60.0  # memory is judged from this long after a process started
MIN_LIFE_S = 90.0  # and only for a process that lived this long (shorter ones: too few samples)
FLAT = 0.20  # RSS after warm-up within this of its first sample after warm-up


@dataclass
class Report:
    seed: int
    minutes: float
    scheduler_mode: str
    window: str
    faults: dict[str, int]
    operator: dict[str, int]
    switches: int
    stops: int
    occurrences_checked: int
    both_in_dual_run: int
    stopped_occurrences: int
    paired_across: int
    missing: list[str]
    doubled: list[str]
    stray: list[str]
    ran_after_stop: list[str]
    ran_while_stop_went_out: list[str]
    stopped_not_skipped: list[str]
    skipped_without_reason: list[str]
    redelivered: int
    invoked_twice_in_one_process: list[str]
    split_command_ids: list[str]
    status_samples: int
    orphaned_samples: list[str]
    status_errors: list[str]
    status_check_end: int
    status_check_output: str
    recovery_s: dict[str, dict[str, float | int | None]]
    peak_rss_mib: dict[str, float]
    memory_growth: dict[str, float]
    memory_not_flat: list[str]
    crashes: list[str]
    legacy_errors: list[str]
    refused_at_start: list[str] = field(default_factory=list)  # exits 3 while a server restarted
    legacy_lost_in_restart: list[str] = field(default_factory=list)  # legacy's own, its database down
    not_run: list[str] = field(default_factory=list)
    databases: dict[str, str] = field(default_factory=dict)  # --keep: where to look afterwards
    self_test: dict[str, int] = field(default_factory=dict)  # the checker shown able to fail (run.self_test)

    @property
    def failures(self) -> list[str]:
        out = []
        for name in (
            "missing",
            "doubled",
            "stray",
            "ran_after_stop",
            "stopped_not_skipped",
            "skipped_without_reason",
            "invoked_twice_in_one_process",
            "split_command_ids",
            "orphaned_samples",
            "memory_not_flat",
            "crashes",
        ):
            if getattr(self, name):
                out.append(f"{name}: {len(getattr(self, name))}")
        unrecovered = {k: r["unrecovered"] for k, r in self.recovery_s.items() if r["unrecovered"]}
        if unrecovered:
            out.append(f"components not working again within the bound after a fault: {unrecovered}")
        if self.status_check_end != 0:
            out.append(f"status --check at the end exited {self.status_check_end}")
        st = self.self_test
        if st and not (st.get("legacy_fires_deleted") and st.get("found_missing") and st.get("found_invoked_twice")):
            out.append(f"the checker's self-test did not find what it planted: {st}")
        if self.occurrences_checked == 0:
            out.append("no occurrence was checked")
        return out

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed, "failures": self.failures}

    def table(self) -> str:
        rows = [
            ("seed", str(self.seed)),
            ("minutes", f"{self.minutes:g} ({self.scheduler_mode})"),
            ("window checked", self.window),
            ("faults", ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())) or "none"),
            ("not run", ", ".join(self.not_run) or "-"),
            ("operator steps", ", ".join(f"{k} {n}" for k, n in sorted(self.operator.items())) or "none"),
            ("switches (audited)", str(self.switches)),
            ("stops (pause, freeze, fence)", str(self.stops)),
            ("occurrences checked", str(self.occurrences_checked)),
            ("  fired by both in a live dual-run", str(self.both_in_dual_run)),
            ("  stopped on purpose", str(self.stopped_occurrences)),
            ("  two fires paired across a handover", str(self.paired_across)),
            ("missing", str(len(self.missing))),
            ("  legacy's own, lost while its database restarted", str(len(self.legacy_lost_in_restart))),
            ("doubled", str(len(self.doubled))),
            ("stray", str(len(self.stray))),
            ("ran at/after a stop", str(len(self.ran_after_stop))),
            ("  (ran before its stop's command returned)", str(len(self.ran_while_stop_went_out))),
            ("stopped, not recorded skipped", str(len(self.stopped_not_skipped) + len(self.skipped_without_reason))),
            ("redelivered (another process)", str(self.redelivered)),
            ("invoked twice in one process", str(len(self.invoked_twice_in_one_process))),
            ("one occurrence, two command ids", str(len(self.split_command_ids))),
            ("status samples (orphaned/double)", f"{self.status_samples} ({len(self.orphaned_samples)})"),
            ("status --check at the end", "clean" if self.status_check_end == 0 else f"exit {self.status_check_end}"),
        ]
        for kind, r in sorted(self.recovery_s.items()):
            rows.append(
                (
                    f"recovery {kind}",
                    f"p50 {_s(r['p50'])}, max {_s(r['max'])} (n={r['n']}, unrecovered {r['unrecovered']})",
                )
            )
        for role, mib in sorted(self.peak_rss_mib.items()):
            growth = self.memory_growth.get(role)
            rows.append(
                (
                    f"peak RSS {role}",
                    f"{mib:.0f} MiB" + (f", +{growth * 100:.0f}% after warm-up" if growth is not None else ""),
                )
            )
        rows.append(("crashes (not the nemesis's)", str(len(self.crashes))))
        rows.append(("exits 3 in a server restart (restarted)", str(len(self.refused_at_start))))
        st = self.self_test
        rows.append(
            (
                "checker self-test",
                f"{st.get('legacy_fires_deleted')} legacy fires deleted -> {st.get('found_missing')} missing; a repeat -> {st.get('found_invoked_twice')} twice"
                if st
                else "-",
            )
        )
        rows.append(("result", "PASS" if self.passed else "FAIL: " + "; ".join(self.failures)))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _s(v: float | int | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def _recovery(faults: Sequence[Fault]) -> dict[str, dict[str, float | int | None]]:
    by: defaultdict[str, list[Fault]] = defaultdict(list)
    for f in faults:
        if f.kind != "cpu-hogs":
            by[f.kind].append(f)
    out: dict[str, dict[str, float | int | None]] = {}
    for kind, fs in by.items():
        took = sorted(f.recovery_s for f in fs if f.recovery_s is not None)
        out[kind] = {
            "n": len(fs),
            "p50": statistics.median(took) if took else None,
            "max": took[-1] if took else None,
            "unrecovered": sum(1 for f in fs if f.recovery_s is None),
        }
    return out


def build_report(
    *,
    seed: int,
    minutes: float,
    shards: bool,
    window: Window,
    businesses: Sequence[BusinessCheck],
    duplicates: Duplicates,
    faults: Sequence[Fault],
    actions: Sequence[Any],
    status: Sequence[StatusSample],
    status_end: tuple[int, str],
    memory: Sequence[MemorySeries],
    crashes: list[str],
    refused_at_start: list[str] | None = None,
    legacy_errors: list[str],
    private_stack: bool,
) -> Report:
    peak: dict[str, float] = {}
    growth: dict[str, float] = {}
    not_flat: list[str] = []
    for s in memory:
        if s.samples:
            peak[s.role] = max(peak.get(s.role, 0.0), max(kb for _t, kb in s.samples) / 1024)
        g = memory_growth(s, WARM_UP_S, MIN_LIFE_S)
        if g is not None:
            growth[s.role] = max(growth.get(s.role, g), g)
            if g > FLAT:
                not_flat.append(f"{s.role} pid {s.pid}: +{g * 100:.0f}%")
    ok_actions = [a for a in actions if a.code == 0]
    stops = sum(1 for a in ok_actions if a.what in ("pause", "freeze")) + sum(
        1 for a in ok_actions if a.what == "rollback"
    )
    return Report(
        seed=seed,
        minutes=minutes,
        scheduler_mode="two --shards members" if shards else "single leader + standby",
        window=f"{window.start:%H:%M:%S}..{window.end:%H:%M:%S} UTC",
        faults=dict(Counter(f.kind for f in faults)),
        operator=dict(Counter(a.what.split(" (")[0] + ("" if a.code == 0 else " refused/failed") for a in actions)),
        switches=sum(b.switches for b in businesses),
        stops=stops,
        occurrences_checked=sum(b.owned for b in businesses),
        both_in_dual_run=sum(b.both for b in businesses),
        stopped_occurrences=sum(b.stopped for b in businesses),
        paired_across=sum(b.across for b in businesses),
        missing=[f"{b.biz_code} {i}" for b in businesses for i in b.missing],
        legacy_lost_in_restart=[f"{b.biz_code} {i}" for b in businesses for i in b.legacy_lost_in_restart],
        doubled=[f"{b.biz_code} {i}" for b in businesses for i in b.doubled],
        stray=[f"{b.biz_code} {i}" for b in businesses for i in b.stray],
        ran_after_stop=[x for b in businesses for x in b.ran_after_stop],
        ran_while_stop_went_out=[x for b in businesses for x in b.ran_while_stop_went_out],
        stopped_not_skipped=[x for b in businesses for x in b.stopped_not_skipped],
        skipped_without_reason=[x for b in businesses for x in b.skipped_without_reason],
        redelivered=duplicates.redelivered,
        invoked_twice_in_one_process=duplicates.twice_in_one_process,
        split_command_ids=duplicates.split_ids,
        status_samples=len(status),
        orphaned_samples=[f"{s.at:%H:%M:%S} {p}" for s in status for p in s.problems],
        status_errors=[f"{s.at:%H:%M:%S} {s.error}" for s in status if s.error],
        status_check_end=status_end[0],
        status_check_output=status_end[1],
        recovery_s=_recovery(faults),
        peak_rss_mib=peak,
        memory_growth=growth,
        memory_not_flat=not_flat,
        crashes=crashes,
        refused_at_start=refused_at_start or [],
        legacy_errors=legacy_errors[:50],
        not_run=[] if private_stack else ["server restarts (no private stack: SWITCHYARD_SOAK_STACK_DIR)"],
    )
