"""The trigger store's contract, run on SQLite and on the real MariaDB."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from scheduler_core.clock import ManualClock
from scheduler_core.errors import IllegalTransition
from scheduler_core.model import (
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    MisfirePolicy,
    ShardingItem,
    Trigger,
    TriggerId,
    TriggerKind,
    TriggerState,
    command_id,
)
from scheduler_core.occurrences import next_after
from scheduler_core.ports import FiredUpdate, Transition
from scheduler_core.store.admin import check_schema, init_schema
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from tests.backends import sql_store
from tests.harness import stored_id

KINDS = [pytest.param("sqlite"), pytest.param("mariadb", marks=pytest.mark.mariadb)]
W, A = TriggerState.WAITING, TriggerState.ACQUIRED


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Iterator[SqlTriggerStore]:
    with sql_store(request.param, tmp_path, clock, partitions=4) as s:
        yield s


def _seed(store: SqlTriggerStore, clock: ManualClock, n: int, *, biz: str = "biz-a", step_s: int = 1) -> list[Trigger]:
    job = store.put_job(Job(job_code=JobCode(f"job-{biz}"), biz_code=biz, handler="h"))
    return store.add_triggers(
        [
            Trigger(
                job_code=job.job_code,
                biz_code=biz,
                kind=TriggerKind.ONCE,
                next_fire_at=clock.now() + timedelta(seconds=i * step_s),
            )
            for i in range(n)
        ]
    )


def _fenced_acquire(trig: Trigger, clock: ManualClock, epoch: int, fence: str | None = None) -> Transition:
    """WAITING -> ACQUIRED of one trigger by `epoch`, fenced by that epoch (on `fence`)."""
    assert trig.id is not None
    return Transition(
        ids=[trig.id],
        from_state=W,
        to_state=A,
        epoch=Epoch(epoch),
        deadline=clock.now(),
        fence_epoch=Epoch(epoch),
        fence=fence,
    )


def test_init_is_idempotent(store: SqlTriggerStore) -> None:
    again = init_schema(store.engine)
    assert again.created == []
    assert again.ok
    with pytest.raises(Exception, match="re-partitioning"):
        init_schema(store.engine, 8)


def test_partitions_come_from_metadata_and_split_the_table(store: SqlTriggerStore, clock: ManualClock) -> None:
    parts = store.partitions()
    assert [p.index for p in parts] == [0, 1, 2, 3]
    triggers = _seed(store, clock, 20)
    seen: list[int] = []
    for p in parts:
        due = store.select_due(p, clock.now() - timedelta(hours=1), clock.now() + timedelta(hours=1), 100)
        assert all((t.id or 0) % 4 == p.index for t in due), "a partition scan returned rows of another partition"
        seen += [t.id for t in due if t.id is not None]
    assert sorted(seen) == sorted(t.id for t in triggers if t.id is not None)


def test_check_reports_tables_and_partitions(store: SqlTriggerStore, clock: ManualClock) -> None:
    _seed(store, clock, 3)
    report = check_schema(store.engine)
    assert report.ok
    assert report.tables["dus_job_trigger"] == 3
    assert len(report.partitions) == 4


def test_select_due_window_order_limit_and_priority_ties(store: SqlTriggerStore, clock: ManualClock) -> None:
    job = store.put_job(Job(job_code=JobCode("j"), biz_code="b", handler="h"))
    t0 = clock.now()
    made = store.add_triggers(
        [
            Trigger(
                job_code=job.job_code,
                biz_code="b",
                kind=TriggerKind.ONCE,
                next_fire_at=t0 + timedelta(seconds=s),
                priority=p,
            )
            for s, p in [(40, 5), (10, 9), (10, 1), (20, 5), (3600, 5), (-7200, 5)]
        ]
    )
    # all in one partition for ordering: use a single-partition view by scanning each and merging
    due = []
    for p in store.partitions():
        due += store.select_due(p, t0 - timedelta(minutes=1), t0 + timedelta(minutes=30), 10)
    due.sort(key=lambda t: (t.next_fire_at, t.priority))
    assert [(int((t.next_fire_at - t0).total_seconds()), t.priority) for t in due] == [
        (10, 1),
        (10, 9),
        (20, 5),
        (40, 5),
    ]
    # limit applies per partition scan, in next_fire_at order
    for p in store.partitions():
        rows = store.select_due(p, t0 - timedelta(days=1), t0 + timedelta(days=1), 1)
        assert len(rows) <= 1
    assert len(made) == 6


def test_select_due_reads_every_field_as_the_full_row_reads_it(store: SqlTriggerStore, clock: ManualClock) -> None:
    # the due read packs what rows share into one json_array (rows.triggers_from_packed):
    # every kind of value comes back as the full-row read (get_triggers) has it
    odd = "q'\"\\ \n\t\x01 é中文 😀"
    job = store.put_job(Job(job_code=JobCode(f"j{odd}"), biz_code=f"b{odd}", handler="h"))
    t0 = clock.now()

    def trig(**fields: Any) -> Trigger:
        made = Trigger(job_code=job.job_code, biz_code=job.biz_code, **fields)
        if made.kind is TriggerKind.CRON:  # a cron waits for a time it produces (add_triggers refuses others)
            first = next_after(made, t0)
            assert first is not None
            made = replace(made, next_fire_at=first)
        return made

    added = store.add_triggers(
        [
            trig(kind=TriggerKind.ONCE, next_fire_at=t0 + timedelta(milliseconds=1)),
            trig(kind=TriggerKind.ONCE, next_fire_at=t0 + timedelta(milliseconds=1)),
            trig(
                kind=TriggerKind.CRON,
                cron="0/5 * * * * ?",
                cron_dialect="2.3",
                time_zone="Asia/Shanghai",
                next_fire_at=t0 + timedelta(seconds=5),
                end_at=t0 + timedelta(days=3, milliseconds=7),
                misfire_policy=MisfirePolicy.SKIP,
                priority=1,
            ),
            trig(
                kind=TriggerKind.FIXED_RATE,
                interval=timedelta(milliseconds=2**40 + 3),
                next_fire_at=t0 + timedelta(seconds=9),
                priority=9,
            ),
            trig(kind=TriggerKind.CRON, cron="0 * * * * ?", next_fire_at=t0 + timedelta(minutes=1)),
        ]
    )
    ids = [stored_id(t) for t in added]
    with store.engine.begin() as conn:
        # a waiting row still carrying an owner (as a migrator may write one), and a cron
        # written before triggers carried a dialect
        conn.execute(
            text("UPDATE dus_job_trigger SET owner_epoch = 7, acquire_deadline = :d, version = 4 WHERE id = :i"),
            {"d": to_ms(t0) + 11, "i": ids[1]},
        )
        conn.execute(text("UPDATE dus_job_trigger SET cron_dialect = NULL WHERE id = :i"), {"i": ids[4]})
    due = [
        t
        for p in store.partitions()
        for t in store.select_due(p, t0 - timedelta(hours=1), t0 + timedelta(hours=1), 100)
    ]
    assert len(due) == 5
    assert sorted(due, key=lambda t: stored_id(t)) == store.get_triggers(ids)
    assert {t.cron_dialect for t in due} == {"2.3", "2.5"}
    # the same read leaving out spent businesses (built per call)
    for p in store.partitions():
        window = (t0 - timedelta(hours=1), t0 + timedelta(hours=1), 100)
        assert store.select_due(p, *window, exclude_biz_codes={"other"}) == store.select_due(p, *window)
        assert store.select_due(p, *window, exclude_biz_codes={job.biz_code}) == []


def test_cas_returns_winners_and_losing_is_not_an_error(store: SqlTriggerStore, clock: ManualClock) -> None:
    triggers = _seed(store, clock, 5)
    ids = [t.id for t in triggers if t.id is not None]
    deadline = clock.now() + timedelta(seconds=60)
    won = store.cas(Transition(ids=ids[:3], from_state=W, to_state=A, epoch=Epoch(7), deadline=deadline))
    assert sorted(stored_id(t) for t in won) == ids[:3]
    assert all(t.state is A and t.owner_epoch == 7 and t.acquire_deadline == deadline for t in won)
    # a second contender loses the three it overlaps and wins the rest
    won2 = store.cas(Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(8), deadline=deadline))
    assert sorted(stored_id(t) for t in won2) == ids[3:]
    assert store.cas(Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(9), deadline=deadline)) == []


def test_cas_on_acquired_rows_is_conditioned_on_the_owner_epoch(store: SqlTriggerStore, clock: ManualClock) -> None:
    (trig,) = _seed(store, clock, 1)
    assert trig.id is not None
    store.cas(Transition(ids=[trig.id], from_state=W, to_state=A, epoch=Epoch(3), deadline=clock.now()))
    stale = store.cas(Transition(ids=[trig.id], from_state=A, to_state=TriggerState.COMPLETED, expected_epoch=Epoch(2)))
    assert stale == []
    nxt = clock.now() + timedelta(hours=1)
    done = store.cas(
        Transition(
            ids=[trig.id],
            from_state=A,
            to_state=W,
            expected_epoch=Epoch(3),
            clear_epoch=True,
            next_fire_at={trig.id: nxt},
            last_fired_at={trig.id: clock.now()},
        )
    )
    assert len(done) == 1 and done[0].next_fire_at == nxt and done[0].owner_epoch is None
    assert done[0].version == trig.version + 2


def test_fencing_refuses_a_deposed_epoch(store: SqlTriggerStore, clock: ManualClock) -> None:
    (trig,) = _seed(store, clock, 1)
    assert trig.id is not None
    assert store.claim_epoch(Epoch(5))
    assert not store.claim_epoch(Epoch(4)), "an older epoch must not take the fence back"
    assert store.current_epoch() == 5
    old = store.cas(_fenced_acquire(trig, clock, 4))
    assert old == []
    new = store.cas(_fenced_acquire(trig, clock, 5))
    assert len(new) == 1


def test_partition_fences_are_independent_and_fence_cas_and_fired_writes(
    store: SqlTriggerStore, clock: ManualClock
) -> None:
    from scheduler_core.model import FiredRecord, command_id
    from scheduler_core.ports import partition_fence

    (trig,) = _seed(store, clock, 1)
    assert trig.id is not None
    p0, p1 = (partition_fence(p) for p in store.partitions()[:2])
    assert store.current_epoch(p0) == 0, "a partition fence never claimed reads as epoch 0"
    assert store.claim_epoch(Epoch(7), p0) and store.claim_epoch(Epoch(3), p1)
    assert store.claim_epoch(Epoch(9), p0), "the next owner of p0"
    assert not store.claim_epoch(Epoch(8), p0), "an older ownership cannot take the fence back"
    assert store.current_epoch(p0) == 9 and store.current_epoch(p1) == 3 and store.current_epoch() == 0
    # the deposed owner of p0 (epoch 7) can neither acquire nor write fired records
    stale = store.cas(_fenced_acquire(trig, clock, 7, p0))
    assert stale == []
    rec = FiredRecord(
        command_id=command_id(trig.id, trig.next_fire_at, 0),
        trigger_id=trig.id,
        job_code=trig.job_code,
        biz_code=trig.biz_code,
        scheduled_at=trig.next_fire_at,
        epoch=Epoch(7),
        fired_at=clock.now(),
    )
    assert not store.put_fired_fenced([rec], Epoch(7), p0)
    assert store.get_fired([rec.command_id]) == {}
    # p1's fence is not p0's: epoch 9 checked against p1 is refused too
    assert store.cas(_fenced_acquire(trig, clock, 9, p1)) == []
    won = store.cas(_fenced_acquire(trig, clock, 9, p0))
    assert len(won) == 1
    assert store.put_fired_fenced([rec], Epoch(9), p0) and rec.command_id in store.get_fired([rec.command_id])


def test_expired_acquisitions_of_other_epochs(store: SqlTriggerStore, clock: ManualClock) -> None:
    triggers = _seed(store, clock, 4)
    ids = [t.id for t in triggers if t.id is not None]
    store.cas(
        Transition(ids=ids[:2], from_state=W, to_state=A, epoch=Epoch(1), deadline=clock.now() + timedelta(seconds=5))
    )
    store.cas(
        Transition(ids=ids[2:], from_state=W, to_state=A, epoch=Epoch(2), deadline=clock.now() + timedelta(seconds=5))
    )
    clock.advance(timedelta(seconds=6))
    expired = [stored_id(t) for p in store.partitions() for t in store.select_expired(p, clock.now(), Epoch(2), 100)]
    assert sorted(expired) == ids[:2]
    reclaimed = store.cas(
        Transition(
            ids=ids[:2],
            from_state=A,
            to_state=A,
            expected_epoch=Epoch(1),
            epoch=Epoch(2),
            deadline=clock.now() + timedelta(seconds=30),
        )
    )
    assert sorted(stored_id(t) for t in reclaimed) == ids[:2]


def test_transitions_outside_the_table_are_refused(store: SqlTriggerStore, clock: ManualClock) -> None:
    (trig,) = _seed(store, clock, 1)
    assert trig.id is not None
    with pytest.raises(IllegalTransition):
        store.cas(Transition(ids=[trig.id], from_state=TriggerState.CANCELLED, to_state=W))
    paused = store.cas(Transition(ids=[trig.id], from_state=W, to_state=TriggerState.PAUSED))
    assert paused[0].state is TriggerState.PAUSED


def test_fired_records_are_idempotent_and_forward_only(store: SqlTriggerStore, clock: ManualClock) -> None:
    (trig,) = _seed(store, clock, 1)
    assert trig.id is not None
    recs = _records(trig, clock, 3, 1)
    assert store.put_fired(recs) == 3
    assert store.put_fired(recs) == 0, "a re-fire must not duplicate fired records"
    cids = [r.command_id for r in recs]
    assert store.mark_published(cids, clock.now()) == 3
    ok = FiredUpdate(cids[0], FiredState.SUCCEEDED, clock.now(), attempt=0, message="done")
    assert store.update_fired([ok]) == 1
    # a duplicate and a late "received" do not move a final record back
    assert store.update_fired([ok, FiredUpdate(cids[0], FiredState.RECEIVED, clock.now())]) == 0
    # a later attempt's final result wins over an earlier one
    store.update_fired([FiredUpdate(cids[1], FiredState.FAILED, clock.now(), attempt=0)])
    store.update_fired([FiredUpdate(cids[1], FiredState.SUCCEEDED, clock.now(), attempt=1)])
    got = store.get_fired(cids)
    assert got[cids[0]].state is FiredState.SUCCEEDED and got[cids[0]].message == "done"
    assert got[cids[1]].state is FiredState.SUCCEEDED and got[cids[1]].attempt == 1
    assert got[cids[2]].state is FiredState.PUBLISHED
    window = store.fired_between("biz-a", clock.now() - timedelta(seconds=1), clock.now() + timedelta(seconds=1))
    assert [r.item_index for r in window] == [0, 1, 2]


def test_results_at_batch_scale_apply_forward_only_with_repeats_in_one_batch(
    store: SqlTriggerStore, clock: ManualClock
) -> None:
    """More results than one joined statement holds (result_joins, MariaDB), with the same
    command id several times in one batch: each applies in arrival order, forward only."""
    from scheduler_core.store.result_joins import ROWS_PER_STATEMENT

    n = ROWS_PER_STATEMENT + 250
    (trig,) = _seed(store, clock, 1)
    assert trig.id is not None
    t = trig.next_fire_at
    items = [
        FiredRecord(
            command_id=command_id(trig.id, t, i),
            trigger_id=trig.id,
            job_code=trig.job_code,
            biz_code=trig.biz_code,
            scheduled_at=t,
            item_index=i,
            item_total=n + 8,
            epoch=Epoch(1),
            fired_at=clock.now(),
        )
        for i in range(n)
    ]
    pages = [
        FiredRecord(
            command_id=command_id(trig.id, t, n + 4 * k),
            trigger_id=trig.id,
            job_code=trig.job_code,
            biz_code=trig.biz_code,
            scheduled_at=t,
            item_index=n + 4 * k,
            item_total=n + 8,
            epoch=Epoch(1),
            fired_at=clock.now(),
            item_count=4,
        )
        for k in range(2)
    ]
    assert store.put_fired(items + pages) == n + 2
    now = clock.now()
    cids = [r.command_id for r in items]
    ups = [FiredUpdate(c, FiredState.SUCCEEDED, now, received_at=now, started_at=now) for c in cids]
    # in the same batch: a retry's final result after the first one (wins), then a late
    # "received" (changes nothing)
    ups += [
        FiredUpdate(cids[7], FiredState.FAILED, now, attempt=0, message="first try"),
        FiredUpdate(cids[7], FiredState.SUCCEEDED, now, attempt=1, message="retried"),
        FiredUpdate(cids[7], FiredState.RECEIVED, now),
    ]
    page0, page1 = pages[0].command_id, pages[1].command_id
    ups += [
        FiredUpdate(
            command_id(trig.id, t, n + k),
            FiredState.SUCCEEDED if k != 2 else FiredState.FAILED,
            now,
            message="bad" if k == 2 else "",
            page_id=page0,
        )
        for k in range(4)
    ]
    ups += [
        FiredUpdate(command_id(trig.id, t, n + 4 + k), FiredState.SUCCEEDED, now, page_id=page1) for k in range(2)
    ]  # half a page: not final
    changed = store.update_fired(ups)
    assert changed == n + 1 + 2  # every item once, cids[7] once more (its retry; the failure lost), 2 pages
    got = store.get_fired([*cids, page0, page1])
    assert all(got[c].state is FiredState.SUCCEEDED for c in cids)
    assert got[cids[7]].attempt == 1 and got[cids[7]].message == "retried"
    assert got[cids[0]].received_at == now and got[cids[0]].result_at == now
    assert got[page0].state is FiredState.FAILED and got[page0].item_states == "SSFS" and got[page0].failed_items == 1
    assert got[page1].state is FiredState.RECEIVED and got[page1].item_states == "SS" and got[page1].result_at is None
    assert store.update_fired(ups) == 0, "a replayed batch changed records"


def test_jobs_upsert_and_sharding_pages(store: SqlTriggerStore) -> None:
    job = store.put_job(Job(job_code=JobCode("pages"), biz_code="b", handler="h", shard_total=5))
    again = store.put_job(Job(job_code=JobCode("pages"), biz_code="b", handler="h2", shard_total=5))
    assert again.id == job.id and again.handler == "h2"
    store.put_sharding_items(
        job.job_code, [ShardingItem(job_code=job.job_code, index=i, param=f"p{i}") for i in range(5)]
    )
    assert [i.index for i in store.sharding_page(job.job_code, 0, 2)] == [0, 1]
    assert [i.param for i in store.sharding_page(job.job_code, 2, 10)] == ["p2", "p3", "p4"]


def test_hostile_values_are_stored_as_data(store: SqlTriggerStore, clock: ManualClock) -> None:
    hostile = "x'; DROP TABLE dus_job; -- \"/*"
    job = store.put_job(Job(job_code=JobCode(hostile), biz_code=hostile[:60], handler=hostile, params=hostile))
    assert store.get_job(JobCode(hostile)) == job
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM dus_job")).scalar_one() == 1


@pytest.mark.mariadb
def test_mariadb_trigger_table_is_hash_partitioned(tmp_path: Path, clock: ManualClock) -> None:
    with sql_store("mariadb", tmp_path, clock, partitions=8) as s:
        with s.engine.connect() as conn:
            ddl = conn.execute(text("SHOW CREATE TABLE dus_job_trigger")).one()[1]
            plan = (
                conn.execute(
                    text(
                        "EXPLAIN SELECT id FROM dus_job_trigger PARTITION (p3) WHERE state='waiting' "
                        "AND next_fire_at BETWEEN 0 AND 10 ORDER BY next_fire_at LIMIT 5"
                    )
                )
                .mappings()
                .one()
            )
        assert "PARTITION BY HASH (`id`)" in ddl and "PARTITIONS 8" in ddl
        assert plan["key"] == "idx_state_fire_lane"
        assert "filesort" not in (plan["Extra"] or "")
        assert [p.name for p in s.partitions()] == [f"p{i}" for i in range(8)]


@pytest.mark.mariadb
def test_the_lanes_forecast_is_read_from_the_due_index_alone(tmp_path: Path, clock: ManualClock) -> None:
    """The adaptive lookahead's every-10-s read: per lane and minute, covered by the due
    index (no row lookup per waiting trigger, as the per-business count needs)."""
    with sql_store("mariadb", tmp_path, clock, partitions=8) as s:
        _seed(s, clock, 20, step_s=7)
        captured: list[str] = []
        with s.engine.connect() as conn:

            def keep(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
                if "GROUP BY" in statement:
                    captured.append(_cur.mogrify(statement, params))

            event.listen(Engine, "before_cursor_execute", keep)  # the reads may use a twin pool
            try:
                rows = s.due_forecast_by_lane(0, 10**13, 60_000)
            finally:
                event.remove(Engine, "before_cursor_execute", keep)
            plan = conn.execute(text("EXPLAIN " + captured[0])).mappings().all()
        assert sum(n for _lane, _b, n in rows) == 20
        assert all("Using index" in (p["Extra"] or "") for p in plan), plan


def test_completion_stamps_last_fired_from_the_row_in_one_update(store: SqlTriggerStore, clock: ManualClock) -> None:
    triggers = _seed(store, clock, 3, step_s=7)
    ids = [t.id for t in triggers if t.id is not None]
    store.cas(Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(1), deadline=clock.now()))
    done = store.cas(
        Transition(ids=ids, from_state=A, to_state=TriggerState.COMPLETED, expected_epoch=Epoch(1), fired_at_next=True)
    )
    assert sorted(stored_id(t) for t in done) == ids
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT next_fire_at, last_fired_at FROM dus_job_trigger ORDER BY id")).all()
    assert all(nxt == last for nxt, last in rows) and len({nxt for nxt, _ in rows}) == 3


def test_cas_ids_names_the_winners_without_rows(store: SqlTriggerStore, clock: ManualClock) -> None:
    triggers = _seed(store, clock, 6)
    ids = [t.id for t in triggers if t.id is not None]
    deadline = clock.now() + timedelta(seconds=60)
    assert (
        sorted(store.cas_ids(Transition(ids=ids[:4], from_state=W, to_state=A, epoch=Epoch(2), deadline=deadline)))
        == ids[:4]
    )
    # overlapping contender: only the two it did not lose (the re-read path)
    assert (
        sorted(store.cas_ids(Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(3), deadline=deadline)))
        == ids[4:]
    )
    assert store.cas_ids(Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(4), deadline=deadline)) == []
    assert {t.id: t.owner_epoch for t in store.get_triggers(ids)} == {
        **{i: 2 for i in ids[:4]},
        **{i: 3 for i in ids[4:]},
    }


def _release_to(
    store: SqlTriggerStore,
    ids: list[TriggerId],
    later: dict[TriggerId, datetime],
    *,
    last_fired_at: dict[TriggerId, datetime] | None = None,
    fired_at_next: bool = False,
) -> list[TriggerId]:
    """Epoch 1's acquired `ids` back to waiting, each at its `later` time, with a last-fired
    stamp: the winners."""
    return store.cas_ids(
        Transition(
            ids=ids,
            from_state=A,
            to_state=W,
            expected_epoch=Epoch(1),
            clear_epoch=True,
            next_fire_at=later,
            last_fired_at=last_fired_at,
            fired_at_next=fired_at_next,
        )
    )


def _last_fired_ms(store: SqlTriggerStore) -> dict[Any, Any]:
    """last_fired_at of every trigger row as stored (epoch milliseconds or NULL), by id."""
    with store.engine.connect() as conn:
        return dict(conn.execute(text("SELECT id, last_fired_at FROM dus_job_trigger")).all())


def test_per_row_values_in_one_statement_keep_what_a_map_leaves_out(store: SqlTriggerStore, clock: ManualClock) -> None:
    triggers = _seed(store, clock, 3, step_s=5)
    ids = [t.id for t in triggers if t.id is not None]
    store.cas(Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(1), deadline=clock.now()))
    later = {ids[0]: clock.now() + timedelta(hours=1), ids[1]: clock.now() + timedelta(hours=2)}
    won = _release_to(store, ids, later, last_fired_at={ids[0]: triggers[0].next_fire_at})
    assert sorted(won) == ids
    after = {t.id: t for t in store.get_triggers(ids)}
    assert after[ids[0]].next_fire_at == later[ids[0]] and after[ids[1]].next_fire_at == later[ids[1]]
    assert after[ids[2]].next_fire_at == triggers[2].next_fire_at  # not in the map: unchanged
    lasts = _last_fired_ms(store)
    assert lasts[ids[0]] == int(triggers[0].next_fire_at.timestamp() * 1000)
    assert lasts[ids[1]] is None and lasts[ids[2]] is None


def test_expected_version_makes_a_rewritten_row_lose(store: SqlTriggerStore, clock: ManualClock) -> None:
    triggers = _seed(store, clock, 3)
    ids = [t.id for t in triggers if t.id is not None]
    versions = {t.id: t.version for t in triggers if t.id is not None}
    # a definition rewritten after the read (a migration moved it): its version moved on
    moved = store.cas(Transition(ids=[ids[1]], from_state=W, to_state=W, next_fire_at={ids[1]: clock.now()}))
    assert moved[0].version == versions[ids[1]] + 1
    won = store.cas_ids(
        Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(5), deadline=clock.now(), expected_version=versions)
    )
    assert sorted(won) == [ids[0], ids[2]]
    # a row the map does not name cannot win an optimistic transition
    assert (
        store.cas_ids(
            Transition(
                ids=[ids[1]], from_state=W, to_state=A, epoch=Epoch(5), deadline=clock.now(), expected_version={}
            )
        )
        == []
    )


def _records(trig: Trigger, clock: ManualClock, n: int, epoch: int) -> list[FiredRecord]:
    assert trig.id is not None
    return [
        FiredRecord(
            command_id=command_id(trig.id, trig.next_fire_at, i),
            trigger_id=trig.id,
            job_code=trig.job_code,
            biz_code=trig.biz_code,
            scheduled_at=trig.next_fire_at,
            item_index=i,
            item_total=n,
            epoch=Epoch(epoch),
            fired_at=clock.now(),
        )
        for i in range(n)
    ]


def test_put_fired_fenced_writes_nothing_for_a_deposed_epoch(store: SqlTriggerStore, clock: ManualClock) -> None:
    (trig,) = _seed(store, clock, 1)
    assert store.claim_epoch(Epoch(3))
    assert store.put_fired_fenced(_records(trig, clock, 2, 3), Epoch(3)) is True
    assert len(store.get_fired([r.command_id for r in _records(trig, clock, 2, 3)])) == 2
    assert store.claim_epoch(Epoch(4))  # a newer leader fenced the store
    stale = _records(trig, clock, 4, 3)
    assert store.put_fired_fenced(stale, Epoch(3)) is False
    got = store.get_fired([r.command_id for r in stale])
    assert sorted(got) == sorted(r.command_id for r in stale[:2]), "the fenced call must insert nothing"
    assert store.put_fired_fenced([], Epoch(4)) is True and store.put_fired_fenced([], Epoch(3)) is False


def _fired_acquired(
    store: SqlTriggerStore, clock: ManualClock, n: int, epoch: int
) -> tuple[list[Trigger], list[TriggerId], list[FiredRecord]]:
    """n one-shots acquired by `epoch`, each with its fired record written (fenced)."""
    triggers = _seed(store, clock, n)
    ids = [t.id for t in triggers if t.id is not None]
    assert store.claim_epoch(Epoch(epoch))
    won = store.cas_ids(
        Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(epoch), deadline=clock.now() + timedelta(seconds=60))
    )
    assert sorted(won) == ids
    recs = [r for t in triggers for r in _records(t, clock, 1, epoch)]
    assert store.put_fired_fenced(recs, Epoch(epoch))
    return triggers, ids, recs


def test_finish_fire_applies_each_transition_and_its_outcome_says_published(
    store: SqlTriggerStore, clock: ManualClock
) -> None:
    triggers, ids, recs = _fired_acquired(store, clock, 4, 2)
    cids = [r.command_id for r in recs]
    assert store.outcome_recorded(list(store.get_fired(cids).values())) == set(), "acquired: not known published"
    later = {i: clock.now() + timedelta(hours=1) for i in ids[:2]}
    winners = store.finish_fire(
        [
            Transition(
                ids=ids[:2],
                from_state=A,
                to_state=W,
                expected_epoch=Epoch(2),
                clear_epoch=True,
                fence_epoch=Epoch(2),
                next_fire_at=later,
                last_fired_at={t.id: t.next_fire_at for t in triggers[:2] if t.id is not None},
            ),
            Transition(
                ids=ids[2:],
                from_state=A,
                to_state=TriggerState.COMPLETED,
                expected_epoch=Epoch(2),
                fence_epoch=Epoch(2),
                fired_at_next=True,
            ),
        ],
    )
    assert [sorted(w) for w in winners] == [ids[:2], ids[2:]]
    states = {t.id: t.state for t in store.get_triggers(ids)}
    assert states == {**{i: W for i in ids[:2]}, **{i: TriggerState.COMPLETED for i in ids[2:]}}
    # no stamp on the records (one row write per trigger less): the outcome says published
    got = store.get_fired(cids)
    assert {(r.state, r.published_at) for r in got.values()} == {(FiredState.PENDING, None)}
    assert store.outcome_recorded(list(got.values())) == set(cids)
    rows = store.fired_rows_of("biz-a", 0, to_ms(clock.now() + timedelta(days=1)), ["command_id", "state"])
    assert dict(rows) == dict.fromkeys(cids, FiredState.PUBLISHED.value), "read as published"


def test_finish_fire_of_a_fenced_epoch_wins_nothing_and_leaves_the_records_unconfirmed(
    store: SqlTriggerStore, clock: ManualClock
) -> None:
    _triggers, ids, recs = _fired_acquired(store, clock, 2, 2)
    assert store.claim_epoch(Epoch(3))
    winners = store.finish_fire(
        [
            Transition(
                ids=ids,
                from_state=A,
                to_state=TriggerState.COMPLETED,
                expected_epoch=Epoch(2),
                fence_epoch=Epoch(2),
                fired_at_next=True,
            )
        ],
    )
    assert winners == [[]], "a fenced epoch must not move its triggers"
    assert {t.state for t in store.get_triggers(ids)} == {A}, "left acquired for the new leader to reclaim"
    # whether the commands went out is not recorded: the new leader fires them again, same ids
    got = store.get_fired([r.command_id for r in recs])
    assert {r.state for r in got.values()} == {FiredState.PENDING}
    assert store.outcome_recorded(list(got.values())) == set()


def test_released_trigger_and_stamped_runs_are_told_apart_from_recorded_outcomes(
    store: SqlTriggerStore, clock: ManualClock
) -> None:
    _triggers, ids, recs = _fired_acquired(store, clock, 3, 1)
    # a failed publication releases the trigger with the same next_fire_at: not published
    released = store.cas_ids(
        Transition(
            ids=ids[:1], from_state=A, to_state=W, expected_epoch=Epoch(1), clear_epoch=True, fence_epoch=Epoch(1)
        )
    )
    assert released == ids[:1]
    # a run outside the schedule is stamped when published, whatever its trigger says
    assert store.mark_published([recs[1].command_id], clock.now()) == 1
    got = store.get_fired([r.command_id for r in recs])
    assert got[recs[1].command_id].state is FiredState.PUBLISHED
    assert store.outcome_recorded(list(got.values())) == set(), "neither the released nor the stamped one"
    rows = dict(store.fired_rows_of("biz-a", 0, to_ms(clock.now() + timedelta(days=1)), ["command_id", "state"]))
    assert rows == {
        recs[0].command_id: FiredState.PENDING.value,
        recs[1].command_id: FiredState.PUBLISHED.value,
        recs[2].command_id: FiredState.PENDING.value,
    }


def test_last_fired_from_the_row_reads_the_value_before_the_update(store: SqlTriggerStore, clock: ManualClock) -> None:
    # last_fired_at = next_fire_at beside a new next_fire_at: the row's old value on every
    # server (MySQL assigns SET clauses left to right, SQLite reads the old row)
    triggers = _seed(store, clock, 2, step_s=5)
    ids = [t.id for t in triggers if t.id is not None]
    old = {t.id: t.next_fire_at for t in triggers}
    store.cas_ids(Transition(ids=ids, from_state=W, to_state=A, epoch=Epoch(1), deadline=clock.now()))
    later = {i: clock.now() + timedelta(hours=1, seconds=n) for n, i in enumerate(ids)}
    assert sorted(_release_to(store, ids, later, fired_at_next=True)) == ids
    rows = _last_fired_ms(store)
    assert {i: rows[i] for i in ids} == {i: to_ms(old[i]) for i in ids}
    assert [t.next_fire_at for t in store.get_triggers(ids)] == [later[i] for i in ids]


def _rollbacks(engine: Engine) -> list[str]:
    """The ROLLBACKs the driver sends on this engine's connections, counted from now on."""
    sent: list[str] = []

    @event.listens_for(engine, "checkout")
    def _wrap(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if getattr(dbapi_conn, "_counted", False):
            return
        original = dbapi_conn.rollback

        def rollback() -> None:
            sent.append("ROLLBACK")
            original()

        dbapi_conn.rollback = rollback
        dbapi_conn._counted = True

    return sent


@pytest.mark.mariadb
def test_a_committed_connection_goes_back_to_the_pool_without_a_rollback(tmp_path: Path, clock: ManualClock) -> None:
    with sql_store("mariadb", tmp_path, clock) as s:
        sent = _rollbacks(s.engine)
        for _ in range(3):
            with s.engine.begin() as conn:
                conn.execute(text("UPDATE dus_fence SET updated_at = updated_at + 1"))
        assert sent == [], "the pool rolled back connections whose transaction was committed"
        with s.engine.connect() as conn:  # a read: SQLAlchemy ends its transaction itself
            conn.execute(text("SELECT 1")).all()
        assert sent == ["ROLLBACK"]


@pytest.mark.mariadb
def test_a_connection_returned_inside_a_transaction_is_still_rolled_back(tmp_path: Path, clock: ManualClock) -> None:
    with sql_store("mariadb", tmp_path, clock) as s:
        s.engine.dispose()
        raw = s.engine.raw_connection()  # bypasses SQLAlchemy's own transaction handling
        cur = raw.cursor()
        cur.execute("UPDATE dus_fence SET epoch = 99")
        cur.close()
        raw.close()  # back to the pool with the UPDATE uncommitted
        assert s.current_epoch() == Epoch(0), "an uncommitted write leaked into the next use of the connection"
        # and after a failed statement (an error packet carries no transaction status)
        with pytest.raises(DBAPIError), s.engine.connect() as conn:
            conn.execute(text("UPDATE dus_fence SET epoch = 98"))
            conn.execute(text("SELECT * FROM no_such_table"))
        assert s.current_epoch() == Epoch(0)


def test_a_writer_paused_after_its_fenced_insert_does_not_block_a_new_owners_claim(
    store: SqlTriggerStore, clock: ManualClock
) -> None:
    """A scheduler stopped (SIGSTOP, a VM stall) right after the fenced INSERT of its fired
    records must not hold the fence row's shared lock: the next owner's claim of the fence
    is what lets it take over. Here the writer's thread is held right after the statement
    (as a stopped process would be) while another connection claims with a 3 s lock wait."""
    import threading

    if store.engine.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer and no row locks: nothing to hold")
    (trig,) = _seed(store, clock, 1)
    assert store.claim_epoch(Epoch(3))
    inserted, release = threading.Event(), threading.Event()

    def _pause_after_insert(conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT IGNORE INTO") and "dus_fence" in statement:
            inserted.set()
            release.wait(20)

    event.listen(Engine, "after_cursor_execute", _pause_after_insert)
    try:
        writer = threading.Thread(target=store.put_fired_fenced, args=(_records(trig, clock, 2, 3), Epoch(3)))
        writer.start()
        assert inserted.wait(20), "the fenced insert never ran"
        with store.engine.connect() as conn:
            conn.execute(text("SET SESSION innodb_lock_wait_timeout = 3"))
            claimed = conn.execute(text("UPDATE dus_fence SET epoch = 4 WHERE epoch = 3")).rowcount
            conn.commit()
        assert claimed == 1, "the claim did not move the fence"
    finally:
        release.set()
        # the writer leaves the listener loop first: removed while it iterates the
        # listeners, SQLAlchemy raised "deque mutated during iteration" in its thread
        writer.join(20)
        event.remove(Engine, "after_cursor_execute", _pause_after_insert)


def test_warm_pools_leaves_open_connections_in_each_pool(store: SqlTriggerStore) -> None:
    """A benchmark warms the pools before its clock starts: the connections are there after."""
    store.warm_pools(3)
    pools = [store.engine.pool]
    if store.engine.dialect.name in ("mysql", "mariadb"):
        pools.append(store._reads().pool)  # the AUTOCOMMIT twin of the hot reads
    for pool in pools:
        assert pool.checkedin() >= 3, pool.status()  # type: ignore[attr-defined]
