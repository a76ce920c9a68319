"""A live trigger's schedule edit on the real servers: MariaDB store, Pulsar bus, etcd
election; `switchyard scheduler run` (the leader relays the edit) and `switchyard executor
run` as processes; the edit written by the migrator's target writer (what `migrate
stream` does with an edited legacy row, without a bus), from every 10 s to every 7 s while
the old schedule is published 60 s ahead. From E = edit + 5 s only the new schedule's
occurrences run, each once; the superseded commands are never invoked and their records
say why."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from migrator.mapping import Mapped
from migrator.model import Action
from migrator.target import TargetWriter, Write
from scheduler_core.clock import SystemClock
from scheduler_core.model import FiredState, Job, JobCode, Trigger, TriggerKind
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms, to_ms
from tests.backends import mariadb_database
from tests.integration.procs import start_scheduler, stop_process
from tests.servers import REPO, server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

BIZ = "edited"
UTC = timezone.utc


def _write(cron: str, action: Action, first: datetime) -> Write:
    job = Job(job_code=JobCode("quick"), biz_code=BIZ, handler="quick", timeout=timedelta(0))
    trig = Trigger(job_code=job.job_code, biz_code=BIZ, kind=TriggerKind.CRON, cron=cron, next_fire_at=first)
    return Write(action=action, source="xxl-job", source_key="1", business=BIZ,
                 mapped=Mapped(job, trig, (), f"hash-{cron}"), content_hash=f"hash-{cron}")


def _until(check: Callable[[], bool], within_s: float) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.2)
    return check()


@pytest.fixture
def store() -> Iterator[tuple[SqlTriggerStore, str]]:
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        try:
            yield SqlTriggerStore(engine, SystemClock()), url
        finally:
            engine.dispose()


def test_an_edit_on_the_real_servers_runs_only_the_new_schedule_from_e(store: tuple[SqlTriggerStore, str],
                                                                      tmp_path: Path) -> None:
    st, url = store
    pulsar, etcd = server_url("pulsar"), server_url("etcd")
    prefix = f"edit{uuid.uuid4().hex[:6]}"
    now = datetime.now(UTC)
    first = now.replace(microsecond=0) + timedelta(seconds=10 - now.second % 10)
    writer = TargetWriter(st)
    writer.apply([_write("0/10 * * * * ?", Action.CREATE, first)])
    invocations = tmp_path / "invocations.txt"
    invocations.touch()
    sched = start_scheduler("edit-sched", tmp_path, url=url, bus=pulsar, etcd=etcd,
                            key=f"/switchyard-test/{prefix}/leader", prefix=prefix, extra=["--lookahead", "60"])
    ex_log = tmp_path / "executor.log"
    with ex_log.open("wb") as out:
        executor = subprocess.Popen(
            [sys.executable, "-m", "switchyard", "executor", "run", "--handlers", "tests.integration.fence_handlers",
             "--domain", BIZ, "--bus", pulsar, "--topic-prefix", prefix, "--concurrency", "4"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
            env={**os.environ, "FENCE_INVOCATIONS": str(invocations), "PYTHONPATH": str(REPO)})

    def records() -> dict[int, tuple[FiredState, str]]:
        recs = st.fired_between(BIZ, first - timedelta(minutes=1), first + timedelta(minutes=10))
        return {to_ms(r.scheduled_at): (r.state, r.message) for r in recs}

    def ran() -> list[tuple[str, int]]:
        return [(p[0], int(p[1])) for line in invocations.read_text().splitlines() if len(p := line.split()) == 3]

    try:
        assert _until(lambda: len(records()) >= 5, 60), f"the old schedule was not published ahead:\n{sched.log_text()}"
        writer.apply([_write("0/7 * * * * ?", Action.UPDATE, first)])  # the operator's edit, read by the stream
        e_ms = to_ms(datetime.now(UTC)) + int(writer.supersede_margin.total_seconds() * 1000)
        old_ahead = {t for t in records() if t >= e_ms + 1000}
        end_ms = e_ms + 35_000
        assert _until(lambda: to_ms(datetime.now(UTC)) > end_ms + 3000 and
                      all(s is not FiredState.PUBLISHED for t, (s, _m) in records().items() if t < end_ms), 90), \
            f"results missing:\n{sched.log_text()[-3000:]}\n{ex_log.read_text(errors='replace')[-3000:]}"
    finally:
        stop_process(executor)
        sched.stop()

    invoked = ran()
    counts = Counter(cid for cid, _t in invoked)
    assert all(n == 1 for n in counts.values()), f"a command invoked twice: {counts}"
    after = sorted(t for _c, t in invoked if e_ms + 1000 <= t < end_ms)
    assert after and all(from_ms(t).second % 7 == 0 for t in after), \
        f"an old-schedule command ran after E: {[from_ms(t).isoformat() for t in after]}"
    expected = [t for t in range(e_ms - e_ms % 1000 + 1000, end_ms, 1000) if from_ms(t).second % 7 == 0]
    assert after == expected, "an occurrence of the new schedule did not run"
    recs = records()
    superseded = [t for t in old_ahead if from_ms(t).second % 7 != 0]
    assert len(superseded) >= 3
    for t in superseded:
        state, message = recs[t]
        assert state is FiredState.SKIPPED and message.startswith("superseded by a schedule edit at "), (t, state, message)
    assert "broadcast the schedule edit" in sched.log_text()
