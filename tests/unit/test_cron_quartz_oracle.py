"""Differential test: scheduler_core.cron against Quartz's own org.quartz.CronExpression.

The oracle is tools/quartz/QuartzOracle.java run on Quartz's jar from Maven (resolved by
scripts/install-servers into tools/quartz/target/jars/): one JVM per Quartz version for the
whole session, one request per line. Hypothesis generates expressions (the documented
grammar, plus the odd shapes Quartz accepts: ``*/0``, ``5/0``, ``0-59/60``, ``1-5W``,
``MON/2``, ``8#1``, years outside 1970-2199, ``L``/``LW``/``L-n``/``W``/``#`` and lists of
them), DST zones and start instants near their clock changes; both sides compute the next
fire times from the same start, and must agree on validity and on every fire time.

Quartz 2.3.2 is compared with ``dialect="2.3"`` (xxl-job 2.1-3.0 carry its copy) and 2.5.2
with ``dialect="2.5"`` (xxl-job 3.4.x). Each run prints its case counts.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core.cron import CronExpression, CronSyntaxError, Dialect
from tests.servers import missing

REPO = Path(__file__).resolve().parent.parent.parent
# where the oracle's source and its target/ (jars, classes) are; a test points it elsewhere
QUARTZ = Path(os.environ.get("SWITCHYARD_QUARTZ_DIR", REPO / "tools" / "quartz"))
VERSIONS: dict[str, Dialect] = {"2.3.2": "2.3", "2.5.2": "2.5"}
ZONES = ("America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Shanghai", "UTC")
FIRES = 5  # successive fire times compared per case
EXAMPLES = int(os.environ.get("SWITCHYARD_CRON_ORACLE_EXAMPLES", "1000"))  # Hypothesis cases per version
# Quartz 2.3.2 never returns for some expressions it accepts ("0 0 0 0W * ?" loops forever):
# the oracle answers "hangs" after 2 s of CPU time on one request and halts (QuartzOracle.java),
# the JVM is replaced, and ours must reject the expression. The wall-clock timeout is a backstop
# for a JVM that stops answering at all.
REPLY_TIMEOUT_S = 60.0


class Oracle:
    """One JVM running QuartzOracle with one Quartz jar; requests are answered in order."""

    def __init__(self, version: str, jar: Path) -> None:
        self.version, self._jar = version, jar
        self._start()
        self.max_year = int(self._ask("max-year")[1])

    def _start(self) -> None:
        jar = self._jar
        self._proc = subprocess.Popen(
            ["java", "-Xshare:auto", "-cp", f"{QUARTZ / 'target' / 'classes'}{os.pathsep}{jar}", "QuartzOracle"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(self._proc, self._lines), daemon=True).start()

    @staticmethod
    def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def _ask(self, line: str) -> list[str]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        try:
            reply = self._lines.get(timeout=REPLY_TIMEOUT_S)
        except queue.Empty:
            self.close(kill=True)
            self._start()
            return ["hangs"]
        if reply is None:
            raise AssertionError(f"Quartz {self.version} oracle exited (code {self._proc.poll()}) on {line!r}")
        fields = reply.split("\t")
        if fields[0] == "hangs":  # it halted after answering: the next request needs another JVM
            self.close()
            self._start()
        return fields

    def ask(self, expression: str, zone: str, start_ms: int, count: int) -> tuple[str, ...]:
        """("ok", ms, ms, ...) or ("invalid",) — Quartz's ParseException, and a Quartz that
        accepts the expression but throws or never returns computing the next time, all
        read as invalid: the legacy scheduler cannot run such a job."""
        reply = self._ask(f"{expression}\t{zone}\t{start_ms}\t{count}")
        if reply[0] == "ok":
            return ("ok", *reply[1:])
        assert reply[0] in ("invalid", "error", "hangs"), reply
        return ("invalid",)

    def close(self, kill: bool = False) -> None:
        if kill:
            self._proc.kill()  # our own child, by its handle
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _compile_harness() -> None:
    """javac the oracle into target/classes when the class is missing or older than its source."""
    source, out = QUARTZ / "QuartzOracle.java", QUARTZ / "target" / "classes"
    compiled = out / "QuartzOracle.class"
    if compiled.exists() and compiled.stat().st_mtime >= source.stat().st_mtime:
        return
    jar = QUARTZ / "target" / "jars" / "quartz-2.5.2.jar"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-d", str(out), "-cp", str(jar), str(source)], check=True, timeout=300)


@pytest.fixture(scope="module")
def oracles() -> Iterator[dict[str, Oracle]]:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            missing(f"{tool} is not installed: run scripts/install-servers")
    jars = {v: QUARTZ / "target" / "jars" / f"quartz-{v}.jar" for v in VERSIONS}
    absent = [str(j) for j in jars.values() if not j.exists()]
    if absent:
        missing(f"Quartz jars not resolved ({', '.join(absent)}): run scripts/install-servers")
    _compile_harness()
    started: dict[str, Oracle] = {}
    try:
        for version, jar in jars.items():
            started[version] = Oracle(version, jar)
        yield started
    finally:
        for oracle in started.values():
            oracle.close()


def ours(expression: str, zone: str, start_ms: int, count: int, dialect: Dialect, last_year: int) -> tuple[str, ...]:
    try:
        cron = CronExpression(expression, zone, dialect=dialect, last_year=last_year)
    except CronSyntaxError:
        return ("invalid",)
    start = datetime.fromtimestamp(start_ms / 1000, UTC)
    return ("ok", *(str(int(t.timestamp() * 1000)) for t in cron.iter_after(start, count)))


# ---------- expression generation ----------


def _num(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.integers(lo, hi).map(str)


def _common(lo: int, hi: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Items of the common grammar for a field of range lo..hi; one item in four is one of
    Quartz's odd edges (a value one past an end, step 0, a step past the range...)."""
    value = st.one_of(_num(lo, hi), *([st.sampled_from(names)] if names else []))
    step = _num(1, max(1, (hi - lo) // 2))
    good = st.one_of(
        value,
        st.just("*"),
        st.builds(lambda a, b: f"{a}-{b}", value, value),  # wrapping ranges too (b < a)
        st.builds(lambda a, s: f"{a}/{s}", value, step),
        st.builds(lambda s: f"*/{s}", step),
        st.builds(lambda a, b, s: f"{a}-{b}/{s}", _num(lo, hi), _num(lo, hi), step),
    )
    edge = _num(max(lo - 1, 0), hi + 1)
    odd = st.one_of(
        st.builds(lambda a, b: f"{a}-{b}", edge, edge),
        st.builds(lambda a, s: f"{a}/{s}", edge, _num(0, hi - lo + 2)),
        st.builds(lambda s: f"/{s}", _num(0, hi - lo + 2)),
        st.builds(lambda a, b, s: f"{a}-{b}/{s}", edge, edge, _num(0, hi - lo + 2)),
        st.sampled_from(("*/0", f"{lo}/0", f"{lo}-{hi}/{hi - lo + 1}", f"{lo}-{hi}/0")),
    )
    item = st.one_of(good, good, good, odd)
    return st.lists(item, min_size=1, max_size=3).map(",".join)


SECONDS = st.one_of(_common(0, 59), st.just("0"), st.just("0"), st.just("L"))
HOURS = st.one_of(_common(0, 23), st.sampled_from(("0", "9-17", "22-2")))
MONTHS = st.one_of(
    st.just("*"),
    _common(1, 12, ("JAN", "MAR", "FEB", "NOV", "DEC")),
    st.sampled_from(("NOV-FEB", "JAN/2", "FEB", "2", "L")),
)
_DOM_SPECIAL = st.one_of(
    st.sampled_from(
        (
            "L",
            "LW",
            "L-0",
            "L-1",
            "L-3W",
            "L-30",
            "L-31",
            "1W",
            "15W",
            "31W",
            "30W",
            "1-5W",
            "L,15",
            "15,L",
            "1,15W",
            "15W,1",
            "LW,1",
            "0W",
            "32W",
        )
    ),
    st.builds(lambda n: f"L-{n}", st.integers(0, 31)),
    st.builds(lambda n: f"{n}W", st.integers(0, 32)),
)
DAYS_OF_MONTH = st.one_of(
    _common(1, 31), _DOM_SPECIAL, st.lists(st.one_of(_DOM_SPECIAL, _num(1, 31)), min_size=2, max_size=3).map(",".join)
)
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DAY = st.one_of(_num(0, 8), st.sampled_from(_DOW_NAMES))
DAYS_OF_WEEK = st.one_of(
    _common(1, 7, _DOW_NAMES),
    st.sampled_from(("MON-FRI", "FRI-MON", "MON/2", "2/2", "L", "MON,WED#2", "1-7/0", "MON#5", "8#1", "SAT#5")),
    st.builds(lambda d: f"{d}L", _DAY),
    st.builds(lambda d, k: f"{d}#{k}", _DAY, st.integers(0, 6)),
)
YEARS = st.one_of(
    st.just(""),
    st.just("*"),
    _num(1960, 2310).map(str),
    st.sampled_from(("2026-2030", "2030-2026", "2026/3", "2300", "1969", "2026,2028", "2199", "2126", "2127")),
    st.builds(lambda a, b: f"{a}-{b}", st.integers(2020, 2040), st.integers(2020, 2040)),
)


@st.composite
def expressions(draw: st.DrawFn) -> str:
    sec, minute = draw(SECONDS), draw(SECONDS)
    hour = draw(HOURS)
    month = draw(MONTHS)
    year = draw(YEARS)
    shape = draw(st.sampled_from(("dom", "dom", "dom", "dow", "dow", "dow", "both", "neither")))
    dom = draw(DAYS_OF_MONTH) if shape in ("dom", "both") else "?"
    dow = draw(DAYS_OF_WEEK) if shape in ("dow", "both") else "?"
    expression = " ".join(f for f in (sec, minute, hour, dom, month, dow, year) if f)
    return expression.lower() if draw(st.integers(0, 9)) == 0 else expression


@cache
def _transitions(zone: str) -> tuple[int, ...]:
    """Epoch seconds of the zone's clock changes in 2025-2031 (hourly scan: close enough
    for a start instant near one)."""
    tz = ZoneInfo(zone)
    t, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2032, 1, 1, tzinfo=UTC)
    out: list[int] = []
    prev = t.astimezone(tz).utcoffset()
    while t < end:
        t += timedelta(hours=1)
        off = t.astimezone(tz).utcoffset()
        if off != prev:
            out.append(int(t.timestamp()))
        prev = off
    return tuple(out)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, int]:
    expression = draw(expressions())
    zone = draw(st.sampled_from(ZONES))
    near = _transitions(zone)
    if near and bool(draw(st.booleans())):
        start_s = draw(st.sampled_from(near)) + draw(st.integers(-3 * 86400, 86400))
    else:
        start_s = draw(
            st.integers(
                int(datetime(2024, 1, 1, tzinfo=UTC).timestamp()), int(datetime(2032, 12, 31, tzinfo=UTC).timestamp())
            )
        )
    return expression, zone, start_s * 1000  # whole seconds, as a scheduler's cursor is


# The shapes the issue found rejected here and accepted by xxl-job's copy, and the long horizon.
NAMED_CASES = (
    "*/0 * * * * ?",
    "5/0 * * * * ?",
    "0-59/60 * * * * ?",
    "0 0 0 1-5W * ?",
    "0 0 12 ? * MON/2",
    "0 0 12 ? * 8#1",
    "0 0 0 1 1 ? 2300",
    "0 0 0 1 1 ? 1969",
    "0 0 0 ? 2 MON#5",
    "0 0 0 ? * MON#5",
    "0 15 10 ? * 6L",
    "0 0 0 L-3 * ?",
    "0 0 0 LW * ?",
    "0 0 0 15W * ?",
    "0 0 0 L,15 * ?",
    "0 0 0 1,15W * ?",
    "0 30 2 * * ?",
    "0 * 1 * * ?",
    "0 0 0 * * *",
    "0 0 0 ? * MON-FRI/2",
    "0 0 0 ? * MONDAY",
    "L * * * * ?",
    "0 0 0 * * ? 2026 extra",
    "0 0 0 ? L 8#1",
    "0 0 0 1 L ?",
)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("expression", NAMED_CASES)
def test_named_shapes_agree_with_quartz(oracles: dict[str, Oracle], version: str, expression: str) -> None:
    oracle = oracles[version]
    for zone in ZONES:
        for start in (datetime(2026, 3, 7, 12, tzinfo=UTC), datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC)):
            start_ms = int(start.timestamp() * 1000)
            expected = oracle.ask(expression, zone, start_ms, FIRES)
            got = ours(expression, zone, start_ms, FIRES, VERSIONS[version], oracle.max_year)
            assert got == expected, (expression, zone, start.isoformat())


def test_zero_w_hangs_quartz_23_and_never_fires_in_25(oracles: dict[str, Oracle]) -> None:
    # one request only: each Quartz 2.3 answer to it costs 2 s of CPU time and a new JVM
    start_ms = int(datetime(2026, 3, 7, 12, tzinfo=UTC).timestamp() * 1000)
    for version, expected in (("2.3.2", ("invalid",)), ("2.5.2", ("ok",))):
        assert oracles[version].ask("0 0 0 0W * ?", "UTC", start_ms, FIRES) == expected, version
        assert ours("0 0 0 0W * ?", "UTC", start_ms, FIRES, VERSIONS[version], oracles[version].max_year) == expected
    # with an empty month set ('L'), Quartz 2.5 never reaches its month step: never fires
    assert oracles["2.5.2"].ask("0 0 0 0W L ?", "UTC", start_ms, FIRES) == ("ok",)
    assert ours("0 0 0 0W L ?", "UTC", start_ms, FIRES, "2.5", oracles["2.5.2"].max_year) == ("ok",)


@pytest.mark.parametrize("version", VERSIONS)
def test_generated_expressions_agree_with_quartz(
    oracles: dict[str, Oracle], version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    oracle, dialect = oracles[version], VERSIONS[version]
    kinds: Counter[str] = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(cases())
    def agree(case: tuple[str, str, int]) -> None:
        expression, zone, start_ms = case
        expected = oracle.ask(expression, zone, start_ms, FIRES)
        got = ours(expression, zone, start_ms, FIRES, dialect, oracle.max_year)
        kinds["invalid" if expected[0] == "invalid" else "never fires" if len(expected) == 1 else "fires"] += 1
        assert got == expected, f"{expression!r} in {zone} after {start_ms} ms: ours {got}, Quartz {expected}"

    agree()
    total = sum(kinds.values())
    with capsys.disabled():
        print(
            f"\n[cron differential] Quartz {version}: {total} cases agree "
            f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}), {FIRES} fire times each"
        )
    # Hypothesis runs every example it generated unless it stops early; it must have tried
    # a real sample of each kind, or the comparison proved little.
    assert total >= min(EXAMPLES, 200)
    assert kinds["fires"] >= total // 5 and kinds["invalid"] >= total // 20, kinds
