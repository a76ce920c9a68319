"""The comparator's parts: consumer lag, expected occurrences, watch mode, layering."""

from __future__ import annotations

import ast
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dualrun.expected import build_expected
from dualrun.frames import MANUAL, MISFIRE, RETRY, SCHEDULE, JobIndex, row_kind
from dualrun.model import Verdict, Window
from dualrun.watch import Watch
from readers.records import LegacyDefinition, ScheduleKind, SourceSystem
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.codec import command_topic
from scheduler_core.executor.sdk import SUBSCRIPTION
from scheduler_core.ports import BusMessage
from switchyard.wiring import dualrun_store
from tests.unit.test_dualrun_support import identical

UTC = timezone.utc
REPO = Path(__file__).resolve().parents[2]


def test_consumer_lag_counts_due_commands_not_delayed_ones(tmp_path: Path) -> None:
    s, _ = identical(tmp_path)
    bus = InProcessBus(s.store.clock)
    bus.subscribe(command_topic("reminder"), SUBSCRIPTION)
    now_ms = s.store.clock.now_ms()
    due = [BusMessage(command_topic("reminder"), b"x", deliver_at_ms=now_ms - 1000) for _ in range(1500)]
    later = [BusMessage(command_topic("reminder"), b"x", deliver_at_ms=now_ms + 60_000) for _ in range(40)]
    bus.publish(due + later)
    s.flush()
    from dualrun.collect import CompareRequest, compare_business
    from dualrun.settings import CompareSettings

    c = compare_business(
        s.store,
        dualrun_store(s.store),
        s.reader(),
        CompareRequest(biz_code="reminder", window=s.current, source=SourceSystem.XXL_JOB),
        settings=CompareSettings(),
        now=s.now,
        probe=bus,
    )
    assert c.consumer_lag is not None and (c.consumer_lag.due, c.consumer_lag.delayed) == (1500, 40)
    assert c.verdict is Verdict.NOT_READY
    assert any(
        r.startswith("consumer lag: 1,500 due command(s) waiting in subscription 'executor' of cmd.reminder")
        and r.endswith("> 1,000")
        for r in c.reasons
    )


def _defn(**kw: object) -> LegacyDefinition:
    base: dict[str, object] = {
        "source": SourceSystem.BATCH_CENTER,
        "source_key": "1",
        "biz_code": "b",
        "name": "n",
        "schedule": ScheduleKind.CRON,
        "cron": "0 0 * * * ?",
        "time_zone": "Asia/Shanghai",
    }
    base.update(kw)
    return LegacyDefinition(**base)  # type: ignore[arg-type]


def test_expected_occurrences_for_every_schedule_kind() -> None:
    w = Window(start=datetime(2026, 12, 2, 0, 0, tzinfo=UTC), end=datetime(2026, 12, 2, 6, 0, tzinfo=UTC))
    anchor = datetime(2026, 12, 1, 23, 59, 50, tzinfo=UTC)
    defs = [
        ("cron", _defn()),
        ("rate", _defn(schedule=ScheduleKind.FIXED_RATE, cron=None, interval_seconds=900, next_fire_at=anchor)),
        ("once", _defn(schedule=ScheduleKind.ONCE, cron=None, next_fire_at=datetime(2026, 12, 2, 3, tzinfo=UTC))),
        ("off", _defn(enabled=False)),
        ("bad", _defn(cron="0 0 * * * * * *")),
    ]
    jobs = JobIndex()
    exp = build_expected(defs, w, jobs)
    per_job = exp.frame.groupby("job")["sched"].agg(["count", "min"])
    assert per_job.loc[jobs.id("cron"), "count"] == 6
    assert per_job.loc[jobs.id("rate"), "count"] == 24  # every 15 min, phase from the anchor
    first_rate = datetime.fromtimestamp(per_job.loc[jobs.id("rate"), "min"] / 1000, tz=UTC)
    assert first_rate == datetime(2026, 12, 2, 0, 14, 50, tzinfo=UTC)
    assert per_job.loc[jobs.id("once"), "count"] == 1
    assert jobs.id("off") not in per_job.index
    assert any(n.startswith("job bad: schedule") for n in exp.notes)


@pytest.mark.parametrize(
    ("message", "attempt", "kind"),
    [
        ("任务触发类型：失败重试触发<br>", 0, RETRY),
        ("任务触发类型：Cron触发<br><br><span>>>>>>>>>>>>失败重试触发<<<<<<<<<<<</span>", 0, SCHEDULE),
        ("Trigger type：Fail retry trigger<br>", 0, RETRY),
        ("", 2, RETRY),
        ("[RETRY] ok", 0, RETRY),  # the xxl-job reader's prefix
        ("[MANUAL] ", 0, MANUAL),
        ("[MISFIRE] late", 0, MISFIRE),
        ("[CRON] done", 0, SCHEDULE),
        ("Job trigger type：Api trigger<br>", 0, MANUAL),
        ("", 0, SCHEDULE),
    ],
)
def test_xxl_row_kind_reads_the_trigger_type_line(message: str, attempt: int, kind: int) -> None:
    assert row_kind(message, attempt) == kind


def test_watch_runs_each_business_until_max_runs(tmp_path: Path) -> None:
    s, _ = identical(tmp_path)
    comparison = s.compare()
    seen: list[str] = []

    def compare_one(biz_code: str):  # type: ignore[no-untyped-def]
        seen.append(biz_code)
        if biz_code == "broken":
            raise RuntimeError("legacy database down")
        return comparison

    watch = Watch(compare_one, ["reminder", "broken"], timedelta(milliseconds=200), max_runs=2)
    stop = threading.Event()
    summary = watch.run(stop)
    assert stop.is_set()
    assert seen.count("reminder") >= 2 and seen.count("broken") >= 2
    assert summary.runs >= 2 and summary.ready == summary.runs and summary.errors >= 2
    assert summary.last_error["broken"] == "legacy database down" and summary.abandoned == 0


def test_watch_shutdown_is_bounded_when_a_run_hangs(tmp_path: Path) -> None:
    release = threading.Event()
    started = threading.Event()

    def hang(_business: str):  # type: ignore[no-untyped-def]
        started.set()
        release.wait(10)
        raise RuntimeError("released")

    watch = Watch(hang, ["reminder"], timedelta(seconds=30), grace=timedelta(milliseconds=200))
    stop = threading.Event()
    threading.Thread(target=lambda: (started.wait(10), stop.set()), daemon=True).start()  # type: ignore[func-returns-value]
    summary = watch.run(stop)
    assert summary.abandoned == 1
    release.set()


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_dualrun_and_reports_keep_the_dependency_rule() -> None:
    rules = {"dualrun": {"migrator", "reports", "switchyard", "click"}, "reports": {"migrator", "switchyard", "click"}}
    bad = {
        str(p.relative_to(REPO)): sorted(_imports(p) & forbidden)
        for pkg, forbidden in rules.items()
        for p in (REPO / pkg).rglob("*.py")
    }
    assert {k: v for k, v in bad.items() if v} == {}
    model = REPO / "dualrun" / "model.py"
    pure = _imports(model) - {"__future__", "enum", "dataclasses", "datetime", "typing", "scheduler_core"}
    assert pure == set(), "dualrun.model is pure domain"
    # of the core, only the stdlib-only owner of `require_aware` (issue 20 item 5)
    tree = ast.parse(model.read_text())
    core = {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("scheduler")
    }
    assert core <= {"scheduler_core.times"}
