"""The run log's store side (issue 28) on SQLite and MariaDB: the purge deletes only
final records older than the cutoff, with their log lines, follow-up claims and kill
requests, a batch at a time with a pause between; a dry run counts the same and deletes
nothing. The page reads newest first by keyset (no row twice, none left out), filtered;
the daily chart data counts runs by result."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, func, insert, select, text, update

from scheduler_core.clock import ManualClock
from scheduler_core.errors import SchemaError
from scheduler_core.model import SHADOW_NOTE, CommandId, FiredRecord, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import FiredUpdate
from scheduler_core.store import run_log
from scheduler_core.store.admin import tables_for
from scheduler_core.store.purge import SqlPurge
from scheduler_core.store.rows import PROVISIONAL_SKIP_RANK
from scheduler_core.store.run_log_writes import write_logs
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from switchyard.schema import check_schema, init_schema
from tests.backends import sql_store

KINDS = [pytest.param("sqlite"), pytest.param("mariadb", marks=pytest.mark.mariadb)]
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=40)
CUTOFF = NOW - timedelta(days=30)


def _rec(tid: int, at: datetime, state: FiredState, biz: str = "billing", *, count: int = 1) -> FiredRecord:
    return FiredRecord(
        command_id=command_id(tid, at, 0),
        trigger_id=TriggerId(tid),
        job_code=JobCode(f"{biz}-job{tid}"),
        biz_code=biz,
        scheduled_at=at,
        item_total=count,
        item_count=count,
        state=state,
        started_at=at + timedelta(milliseconds=40 * tid) if state is FiredState.SUCCEEDED else None,
        result_at=at + timedelta(seconds=1) if state.is_final else None,
    )


def _count(store: SqlTriggerStore, table: object) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def _ids(store: SqlTriggerStore) -> set[str]:
    fr = store.t.fired
    with store.engine.connect() as conn:
        return {str(c) for (c,) in conn.execute(select(fr.c.command_id))}


def _fill(store: SqlTriggerStore) -> tuple[set[str], set[str]]:
    """Old final records (to go), and the records that must stay: old ones not final (each
    way a record is not final), and final ones newer than the cutoff. Dependents of the
    old final ones: log lines, follow-up claims (of a page's items too), kill requests."""
    gone: list[FiredRecord] = []
    for i, state in enumerate(
        [FiredState.SUCCEEDED, FiredState.FAILED, FiredState.TIMED_OUT, FiredState.SKIPPED, FiredState.KILLED] * 3
    ):
        gone.append(_rec(100 + i, OLD + timedelta(minutes=i), state))
    page = _rec(200, OLD + timedelta(hours=1), FiredState.SUCCEEDED, count=3)
    gone.append(page)
    # a shadow run's record: received, the shadow executor's note its last word
    gone.append(replace(_rec(201, OLD + timedelta(hours=2), FiredState.RECEIVED), message=SHADOW_NOTE))
    stay = [
        _rec(300, OLD, FiredState.PENDING),
        _rec(301, OLD, FiredState.RECEIVED),
        _rec(302, OLD, FiredState.PUBLISHED),
        _rec(303, OLD, FiredState.SKIPPED),  # made a stop's provisional skip below
        _rec(304, NOW - timedelta(days=2), FiredState.SUCCEEDED),
        _rec(305, CUTOFF + timedelta(seconds=1), FiredState.FAILED),
    ]
    store.put_fired(gone + stay)
    fr = store.t.fired
    with store.engine.begin() as conn:
        conn.execute(update(fr).where(fr.c.command_id == stay[3].command_id).values(state_rank=PROVISIONAL_SKIP_RANK))
        for r in gone[:4] + stay[:2]:
            conn.execute(
                insert(store.t.followup_fired).values(
                    parent_command_id=r.command_id, child_trigger_id=9, child_command_id=f"9-{r.trigger_id}-0", at=1
                )
            )
        conn.execute(  # a page's item (not its first) names the parent of a follow-up
            insert(store.t.followup_fired).values(
                parent_command_id=command_id(200, page.scheduled_at, 2),
                child_trigger_id=9,
                child_command_id="9-2-0",
                at=1,
            )
        )
        for r in (gone[0], stay[0]):
            conn.execute(
                insert(store.t.kill_request).values(
                    biz_code="billing", command_id=r.command_id, requested_at=1, requested_by="t"
                )
            )
    logs = [
        FiredUpdate(
            command_id=r.command_id, state=FiredState.SUCCEEDED, at=NOW, logs=((0, f"line of {r.command_id}", False),)
        )
        for r in gone[:5] + stay
    ]
    logs += [  # the page's items: their lines belong to the page record
        FiredUpdate(
            command_id=command_id(200, page.scheduled_at, i),
            state=FiredState.SUCCEEDED,
            at=NOW,
            page_id=page.command_id,
            logs=((0, f"item {i}", False), (1, f"item {i} again", True)),
        )
        for i in range(3)
    ]
    write_logs(store.engine, store.t, logs)
    return {r.command_id for r in gone}, {r.command_id for r in stay}


@pytest.mark.parametrize("kind", KINDS)
def test_purge_deletes_only_old_final_records_with_their_dependents_in_batches(kind: str, tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    with sql_store(kind, tmp_path, clock) as store:
        gone, stay = _fill(store)
        t = store.t
        dry = SqlPurge(store).run(to_ms(CUTOFF), batch=4, dry_run=True)
        assert _ids(store) == gone | stay  # nothing deleted
        assert (dry.fired, dry.run_logs, dry.followup_claims, dry.kill_requests) == (17, 5 + 6, 5, 1)

        pauses: list[float] = []
        seen: list[int] = []
        events: list[str] = []

        def committed(_conn: object) -> None:
            events.append("commit")

        event.listen(store.engine, "commit", committed)

        def pause(s: float) -> None:
            pauses.append(s)
            events.append("pause")

        done = SqlPurge(store).run(
            to_ms(CUTOFF), batch=4, chunk=2, pause_s=0.25, sleep=pause, on_batch=lambda p: seen.append(p.fired)
        )
        event.remove(store.engine, "commit", committed)
        assert _ids(store) == stay
        assert done.as_dict() | {"slowest_batch_ms": None} == dry.as_dict() | {
            "dry_run": False,
            "slowest_batch_ms": None,
        }
        # 21 old rows (16 final and a shadow one, 4 kept) at 4 a batch: every batch at most 4 deleted, a pause after each full one
        assert len(seen) >= 4 and all(b - a <= 4 for a, b in zip([0, *seen], seen, strict=False))
        # at least pause_s between batches, and a pause after every transaction (two to a
        # batch here): never two deleting transactions back to back
        assert sum(1 for p in pauses if p >= 0.25) >= 4
        assert events.count("commit") >= 2 * 4 and "commit" not in [
            b for a, b in itertools.pairwise(events) if a == "commit"
        ]
        assert _count(store, t.run_log) == len(stay)  # the kept records' lines stay
        assert _count(store, t.followup_fired) == 2
        assert _count(store, t.kill_request) == 1
        # a second run finds nothing: the kept ones are not final or not old
        assert SqlPurge(store).run(to_ms(CUTOFF), batch=4, sleep=pauses.append).fired == 0


@pytest.mark.parametrize("kind", KINDS)
def test_purge_of_one_business_leaves_the_others(kind: str, tmp_path: Path) -> None:
    with sql_store(kind, tmp_path, ManualClock(NOW)) as store:
        store.put_fired([_rec(1, OLD, FiredState.SUCCEEDED, "a"), _rec(2, OLD, FiredState.SUCCEEDED, "b")])
        done = SqlPurge(store).run(to_ms(CUTOFF), biz_code="a", sleep=lambda _s: None)
        assert done.fired == 1
        assert _ids(store) == {command_id(2, OLD, 0)}
        with pytest.raises(ValueError, match="batch must be"):
            SqlPurge(store).run(to_ms(CUTOFF), batch=0)


@pytest.mark.parametrize("kind", KINDS)
def test_run_log_pages_by_keyset_newest_first_with_filters(kind: str, tmp_path: Path) -> None:
    with sql_store(kind, tmp_path, ManualClock(NOW)) as store:
        base = NOW - timedelta(hours=1)
        recs = []
        for i in range(23):
            # several runs share one scheduled time: the keyset must still list each once
            at = base + timedelta(seconds=i // 3)
            state = FiredState.FAILED if i % 4 == 0 else FiredState.SUCCEEDED
            recs.append(_rec(10 + i, at, state, "a" if i % 2 else "b"))
        store.put_fired(recs)
        flt = run_log.RunFilter()
        got: list[str] = []
        before = None
        for _ in range(10):  # bounded: 23 rows at 5 a page
            rows, before = run_log.page(store, flt, before=before, limit=5)
            got += [r["command_id"] for r in rows]
            if before is None:
                break
        assert len(got) == len(set(got)) == 23
        want = sorted(recs, key=lambda r: (to_ms(r.scheduled_at), r.command_id), reverse=True)
        assert got == [r.command_id for r in want]

        rows, _ = run_log.page(store, run_log.RunFilter(biz_code="a", states=("failed",)), limit=100)
        assert {r["command_id"] for r in rows} == {
            r.command_id for r in recs if r.biz_code == "a" and r.state is FiredState.FAILED
        }
        rows, _ = run_log.page(store, run_log.RunFilter(job_code="b-job10"), limit=100)
        assert [r["command_id"] for r in rows] == [recs[0].command_id]
        since = to_ms(base + timedelta(seconds=6))
        rows, _ = run_log.page(store, run_log.RunFilter(since_ms=since), limit=100)
        assert {r["command_id"] for r in rows} == {r.command_id for r in recs if to_ms(r.scheduled_at) >= since}

        days = run_log.daily(store, "a", to_ms(NOW - timedelta(days=1)), to_ms(NOW))
        runs_a = [r for r in recs if r.biz_code == "a"]
        assert sum(d["runs"] for d in days) == len(runs_a)
        assert sum(d["by_result"].get("failed", 0) for d in days) == sum(
            1 for r in runs_a if r.state is FiredState.FAILED
        )
        lags = sorted(40 * int(r.trigger_id) for r in runs_a if r.state is FiredState.SUCCEEDED)
        p99 = days[-1]["lag_ms"]["p99"]
        # read from the histogram: the bucket bound at or just above the true p99
        assert p99 is not None and p99 >= lags[-1]
        assert min(b for b in run_log.LAG_BOUNDS_MS if b > lags[-1]) == p99


@pytest.mark.parametrize("kind", KINDS)
def test_log_lines_are_kept_once_per_item_and_attempt(kind: str, tmp_path: Path) -> None:
    with sql_store(kind, tmp_path, ManualClock(NOW)) as store:
        cid = CommandId(command_id(1, NOW, 0))
        store.put_fired([_rec(1, NOW, FiredState.PENDING)])
        u = FiredUpdate(cid, FiredState.SUCCEEDED, NOW, logs=((0, "first", False), (1, "second\nline", True)))
        store.update_fired([u])
        store.update_fired([u])  # a redelivered result: nothing twice
        lines = run_log.logs(store, cid)
        assert [(r["attempt"], r["lines"], r["truncated"]) for r in lines] == [
            (0, "first", False),
            (1, "second\nline", True),
        ]
        assert run_log.logs(store, cid, item=1) == []
        assert store.get_fired([cid])[cid].state is FiredState.SUCCEEDED


@pytest.mark.parametrize("kind", KINDS)
def test_db_init_brings_a_version_3_store_up_to_the_run_log(kind: str, tmp_path: Path) -> None:
    """A store of before the run log (no dus_run_log, no run-log indexes, version 3) is
    refused until `db init`, which adds the table and the indexes and keeps every row."""
    with sql_store(kind, tmp_path, ManualClock(NOW)) as store:
        store.put_fired([_rec(1, OLD, FiredState.SUCCEEDED)])
        engine = store.engine
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE dus_run_log"))
            for ix in ("idx_fired_time", "idx_fired_job_time"):
                conn.execute(text(f"DROP INDEX {ix} ON dus_fired_record" if kind == "mariadb" else f"DROP INDEX {ix}"))
            conn.execute(text("UPDATE dus_meta SET value = '3' WHERE name = 'schema_version'"))
        with pytest.raises(SchemaError, match=r"version 3.*db init"):
            tables_for(engine)
        before = check_schema(engine)
        assert not before.ok
        assert {"dus_run_log", "dus_fired_record.idx_fired_time", "dus_fired_record.idx_fired_job_time"} <= set(
            before.missing
        )
        report = init_schema(engine)
        assert report.ok and report.created == ["dus_run_log"], report
        assert sorted(report.upgraded) == ["dus_fired_record.idx_fired_job_time", "dus_fired_record.idx_fired_time"]
        assert init_schema(engine).upgraded == []  # idempotent
        assert _ids(store) == {command_id(1, OLD, 0)}


def test_the_cli_purges_and_shows_a_runs_log_lines(tmp_path: Path) -> None:
    """`switchyard runs purge` (dry run, then for real, with its progress on stderr) and
    `switchyard runs log` over a SQLite store, as an operator runs them."""
    import json

    from click.testing import CliRunner

    from switchyard.cli import cli

    with sql_store("sqlite", tmp_path, ManualClock(NOW)) as store:
        gone, stay = _fill(store)
        url = str(store.engine.url)
    # the CLI's clock is the real one, months after NOW: the records final at NOW go too
    gone |= {c for c in stay if c.startswith(("304-", "305-"))}
    stay -= gone
    runner = CliRunner()
    kept = sorted(stay)[0]
    shown = runner.invoke(cli, ["runs", "log", kept, "--url", url, "--json"])
    assert shown.exit_code == 0, shown.output
    assert [x["lines"] for x in json.loads(shown.stdout)["logs"]] == [f"line of {kept}"]
    dry = runner.invoke(
        cli, ["runs", "purge", "--older-than", "30d", "--dry-run", "--batch", "4", "--url", url, "--json"]
    )
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["fired_records"] == len(gone)
    done = runner.invoke(cli, ["runs", "purge", "--older-than", "30d", "--batch", "4", "--pause", "0s", "--url", url])
    assert done.exit_code == 0, done.output
    assert f"deleted {len(gone)} fired record(s)" in done.stdout and "batch 1:" in done.stderr
    with sql_store("sqlite", tmp_path, ManualClock(NOW)) as store:
        assert _ids(store) == stay
