"""Issue 17: the switch waits for the stream. On the real MariaDB (ROW binlog): a business
whose change stream is stopped while legacy is edited is refused a cutover, saying how far
behind the stream is; once the stream has applied the edit the same cutover passes, and
its report carries the stream's catch-up state. A stream idle at the head is caught up even
though its checkpoint trails the server's head by foreign transactions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from legacy_sim.seed import seed_xxljob
from migrator.business import BusinessRegistry, TransitionRefused
from migrator.catchup import StreamCatchup
from migrator.cutover import BusinessSwitch
from migrator.legacy_control import XxlJobControl
from migrator.stream import StreamMigrator
from readers.records import ChangeBatch, StreamPosition
from readers.streams import current_position
from tests.backends import mariadb_database
from tests.integration.legacy_binlog import legacy_binlog
from tests.integration.procs import forced_cutover_args
from tests.migration_env import make_env, ready_switch
from tests.servers import server_url

pytestmark = pytest.mark.mariadb
UTC = timezone.utc


def _up_to(batches: Iterator[ChangeBatch], head: StreamPosition) -> Iterator[ChangeBatch]:
    for batch in batches:
        yield batch
        if (batch.position.log_file, batch.position.log_pos) >= (head.log_file, head.log_pos):
            return


def test_a_stopped_stream_refuses_the_cutover_until_it_has_caught_up() -> None:
    cdc = server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")
    with mariadb_database("legacy") as legacy_url, mariadb_database("target") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", "3.4")
        seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=4, bad_rows=0, malformed_crons=0, rng_seed=5)
        env.migrator.run()
        biz = BusinessRegistry(env.own).all()[0].biz_code
        stream_id = f"xxl-job@{make_url(legacy_url).render_as_string(hide_password=True)}"
        sm = StreamMigrator(env.reader, env.migrator.writer, env.migrator, stream_id)
        start = current_position(env.legacy)
        sm.snapshot(env.reader, start)  # the stream's checkpoint: everything up to here is on the target
        catchup = StreamCatchup(env.own, env.legacy, wait=timedelta(seconds=1), now=lambda: datetime.now(UTC))
        # idle at the head: the target's own writes (the checkpoint) are after it in the
        # binlog, foreign to the stream: nothing pending
        idle = catchup.check(biz, "xxl-job")
        assert idle is not None and idle.caught_up, idle
        assert idle.pending == 0 and idle.head != idle.checkpoint

        # the stream is stopped; an operator edits a job on legacy
        with env.legacy.begin() as conn:
            (job_id,) = conn.execute(text("SELECT MIN(id) FROM xxl_job_info")).one()
            conn.execute(
                text("UPDATE xxl_job_info SET job_desc = 'edited while the stream was down' WHERE id = :i"),
                {"i": job_id},
            )
        behind = catchup.check(biz, "xxl-job")
        assert behind is not None and not behind.caught_up
        assert behind.pending == 1 and behind.waited_s >= 1.0
        assert behind.sentence.startswith(
            f"change stream {stream_id} is behind: 1 pending change(s) of the legacy "
            "tables not yet on the new side after waiting"
        )
        assert f"checkpoint {start.log_file}:{start.log_pos}" in behind.sentence

        switch = ready_switch(env, max_verdict_age=timedelta(days=9999), catchup=catchup)
        switch.start_dual_run(biz, shadow=False, actor="ops")
        with pytest.raises(
            TransitionRefused,
            match=r"cutover of .* refused: change stream .* is behind: "
            r"1 pending change\(s\)",
        ):
            switch.cutover(biz, actor="ops")

        # the stream runs again and applies the edit: the same cutover passes
        checkpoint = sm.checkpoint()
        assert checkpoint is not None
        binlog = legacy_binlog(cdc, legacy_url, checkpoint, stall_timeout_s=5.0)
        head = current_position(env.legacy)  # the edit is before it
        try:
            # read up to the head, not until 2 s without a batch: the idle time counts from
            # before the connection, which took longer than that on a loaded machine
            sm.follow(_up_to(binlog.batches(idle_timeout_s=60.0), head))
        finally:
            binlog.close()
        report = switch.cutover(biz, actor="ops")
        assert report.to_state == "cutover"
        assert report.stream is not None and report.stream["caught_up"] is True and report.stream["pending"] == 0
        env.legacy.dispose()
        env.store.engine.dispose()


def test_the_cli_bounds_how_far_behind_the_stream_may_be() -> None:
    """`switchyard cutover --stream-max-pending N --stream-wait S`: the bound is the
    operator's. Behind by one change: with the default (0 pending) the stream is reported
    behind (forced past here, so the note says so), with a bound above what is pending it is not."""
    import json

    from click.testing import CliRunner

    from switchyard.cli import cli

    with mariadb_database("legacy") as legacy_url, mariadb_database("target") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", "3.4")
        try:
            seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=2, bad_rows=0, malformed_crons=0, rng_seed=6)
            env.migrator.run()
            biz = BusinessRegistry(env.own).all()[0].biz_code
            stream_id = f"xxl-job@{make_url(legacy_url).render_as_string(hide_password=True)}"
            sm = StreamMigrator(env.reader, env.migrator.writer, env.migrator, stream_id)
            sm.snapshot(env.reader, current_position(env.legacy))
            with env.legacy.begin() as conn:  # edited while the stream is stopped
                conn.execute(
                    text(
                        "UPDATE xxl_job_info SET job_desc = 'edited' WHERE id = (SELECT MIN(id) FROM "
                        "(SELECT id FROM xxl_job_info) AS j)"
                    )
                )
            clock = env.migrator.clock
            BusinessSwitch(env.store, env.own, XxlJobControl(env.legacy, clock), clock, None).start_dual_run(
                biz, shadow=False, actor="ops"
            )
            runner = CliRunner()
            base = forced_cutover_args(biz, target_url, legacy_url, "drill", "--stream-wait", "0")
            strict = runner.invoke(cli, [*base])
            assert strict.exit_code == 0, strict.output
            first = json.loads(strict.output.strip().splitlines()[-1])
            assert first["stream"]["caught_up"] is False and first["stream"]["pending"] == 1
            assert any("change stream" in n and "1 pending change(s)" in n for n in first["notes"]), first["notes"]
            assert runner.invoke(
                cli,
                ["rollback", "--business", biz, "--url", target_url, "--legacy-url", legacy_url, "--reason", "drill"],
            ).exit_code in (0, 1)
            BusinessSwitch(env.store, env.own, XxlJobControl(env.legacy, clock), clock, None).start_dual_run(
                biz, shadow=False, actor="ops"
            )
            lenient = runner.invoke(
                cli, [*base, "--stream-max-pending", "1000"]
            )  # the switch's own stops and starts are edits too
            assert lenient.exit_code == 0, lenient.output
            second = json.loads(lenient.output.strip().splitlines()[-1])
            assert second["stream"]["caught_up"] is True and second["stream"]["pending"] > 1
            assert not any("change stream" in n for n in second["notes"]), second["notes"]
        finally:  # a pooled connection left open holds the DROP DATABASE back
            env.legacy.dispose()
            env.store.engine.dispose()
