"""Issue 17: the cutover waits for the change stream, polling flavour (the binlog flavour is
tests/integration/test_cutover_waits_for_stream.py on the real MariaDB). A polling stream's
checkpoint is its high water (the latest legacy update time it applied): definition rows
updated after it are pending, and the gate refuses until the stream has passed them. Only
the streams that follow the business count; no stream at all: nothing to wait for."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from migrator.business import TransitionRefused
from migrator.catchup import StreamCatchup, checkpoints_of
from migrator.target import TargetWriter
from readers.records import StreamPosition
from tests.migration_env import migrated_xxljob, ready_switch

SHANGHAI = ZoneInfo("Asia/Shanghai")


def _high_water(env) -> int:  # type: ignore[no-untyped-def]
    """The latest update_time of the legacy definitions, in epoch ms (a poller's high water)."""
    with env.legacy.connect() as conn:
        latest = conn.execute(text("SELECT MAX(update_time) FROM xxl_job_info")).scalar_one()
    latest = datetime.fromisoformat(str(latest)) if not isinstance(latest, datetime) else latest
    return round(latest.replace(tzinfo=SHANGHAI).timestamp() * 1000)


def _poll_checkpoint(env, stream_id: str, hw: int) -> None:  # type: ignore[no-untyped-def]
    TargetWriter(env.store, env.own).apply([], checkpoint=(stream_id, StreamPosition("poll", hw)))


def test_a_polling_stream_behind_an_edit_refuses_the_cutover_until_it_passes_it(tmp_path: Path) -> None:
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    stream_id = "xxl-job@legacy-db"
    hw = _high_water(env)
    _poll_checkpoint(env, stream_id, hw)
    catchup = StreamCatchup(
        env.own, env.legacy, wait=timedelta(milliseconds=300), poll_every=timedelta(milliseconds=100)
    )
    caught = catchup.check(biz, "xxl-job")
    assert caught is not None and caught.caught_up and caught.pending == 0, caught

    edited = datetime.fromtimestamp(hw / 1000, tz=SHANGHAI).replace(tzinfo=None) + timedelta(seconds=30)
    with env.legacy.begin() as conn:  # an operator's edit the (stopped) poller has not seen
        conn.execute(
            text(
                "UPDATE xxl_job_info SET job_desc = 'edited', update_time = :t "
                "WHERE id = (SELECT MIN(id) FROM xxl_job_info)"
            ),
            {"t": edited},
        )
    behind = catchup.check(biz, "xxl-job")
    assert behind is not None and not behind.caught_up and behind.pending == 1
    assert behind.sentence.startswith("change stream xxl-job@legacy-db is behind: 1 pending change(s)")

    sw = ready_switch(env, max_verdict_age=timedelta(days=9999), catchup=catchup)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    with pytest.raises(TransitionRefused, match="1 pending change"):
        sw.cutover(biz, actor="ops")
    # a forced cutover says what it was forced past, and carries the stream's state
    forced = sw.cutover(biz, actor="ops", force=True, reason="drill")
    assert forced.forced and any("is behind: 1 pending change" in n for n in forced.notes)
    assert forced.stream is not None and forced.stream["caught_up"] is False


def test_the_poller_passing_the_edit_lets_the_cutover_through(tmp_path: Path) -> None:
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    hw = _high_water(env)
    edited = datetime.fromtimestamp(hw / 1000, tz=SHANGHAI).replace(tzinfo=None) + timedelta(seconds=30)
    with env.legacy.begin() as conn:
        conn.execute(
            text("UPDATE xxl_job_info SET update_time = :t WHERE id = (SELECT MIN(id) FROM xxl_job_info)"),
            {"t": edited},
        )
    _poll_checkpoint(env, "xxl-job@legacy-db", hw + 30_000)  # the poller applied it
    sw = ready_switch(
        env, max_verdict_age=timedelta(days=9999), catchup=StreamCatchup(env.own, env.legacy, wait=timedelta(0))
    )
    sw.start_dual_run(biz, shadow=False, actor="ops")
    report = sw.cutover(biz, actor="ops")
    assert report.stream is not None and report.stream["caught_up"] is True and report.stream["pending"] == 0


def test_only_the_streams_that_follow_the_business_count(tmp_path: Path) -> None:
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    assert StreamCatchup(env.own, env.legacy).check(biz, "xxl-job") is None  # no stream: nothing to wait for
    _poll_checkpoint(env, "xxl-job@db#other-business", 1)
    _poll_checkpoint(env, "batch-center@db", 1)
    assert checkpoints_of(env.own, "xxl-job", biz) == []
    _poll_checkpoint(env, f"xxl-job@db#other-business,{biz}", 2)
    (ck,) = checkpoints_of(env.own, "xxl-job", biz)
    assert ck.stream_id == f"xxl-job@db#other-business,{biz}" and ck.position.log_pos == 2
