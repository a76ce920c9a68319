"""The polling change stream on SQLite: emitted once, overlap catches same-second updates,
unchanged re-reads are silent, deletes come from full_compare."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from readers.records import ChangeOp, StreamPosition
from readers.streams.polling import PollingChangeStream

SH = ZoneInfo("Asia/Shanghai")
T0 = datetime(2026, 12, 2, 14, 0, 0)  # naive: Shanghai wall time, second precision like DATETIME


@pytest.fixture
def db(tmp_path: Path) -> tuple[sa.Engine, sa.Table]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'legacy.db'}")
    meta = sa.MetaData()
    table = sa.Table(
        "job",
        meta,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(32)),
        sa.Column("cron", sa.String(32)),
        sa.Column("update_time", sa.DateTime),
    )
    meta.create_all(engine)
    return engine, table


def put(engine: sa.Engine, table: sa.Table, id_: int, name: str, at: datetime, cron: str = "0 * * * * ?") -> None:
    with engine.begin() as conn:
        if conn.execute(sa.select(table.c.id).where(table.c.id == id_)).first():
            conn.execute(table.update().where(table.c.id == id_).values(name=name, cron=cron, update_time=at))
        else:
            conn.execute(table.insert().values(id=id_, name=name, cron=cron, update_time=at))


def changes(stream: PollingChangeStream) -> list[tuple[str, int, str]]:
    out = []
    for batch in stream.poll():
        assert batch.position.log_file == "poll"
        for ch in batch.changes:
            assert ch.after is not None and ch.before is None
            out.append((ch.op.value, ch.after["id"], ch.after["name"]))
    return out


def test_inserts_and_updates_are_emitted_once(db: tuple[sa.Engine, sa.Table]) -> None:
    engine, table = db
    stream = PollingChangeStream(engine, table="job", key_columns=["id"], overlap_s=5)
    put(engine, table, 1, "a", T0)
    put(engine, table, 2, "b", T0 + timedelta(seconds=1))
    assert changes(stream) == [("insert", 1, "a"), ("insert", 2, "b")]
    assert changes(stream) == []  # nothing new: nothing again
    put(engine, table, 1, "a2", T0 + timedelta(seconds=2))
    assert changes(stream) == [("update", 1, "a2")]
    assert changes(stream) == []
    put(engine, table, 3, "c", T0 + timedelta(seconds=60))
    assert changes(stream) == [("insert", 3, "c")]
    assert changes(stream) == []


def test_unchanged_rows_in_the_overlap_are_not_re_emitted(db: tuple[sa.Engine, sa.Table]) -> None:
    engine, table = db
    stream = PollingChangeStream(engine, table="job", key_columns=["id"], overlap_s=30)
    for i in range(10):
        put(engine, table, i, f"n{i}", T0 + timedelta(seconds=i))
    assert len(changes(stream)) == 10
    # every row is still inside the 30 s overlap, so every poll re-reads all 10: none is emitted
    for _ in range(3):
        assert changes(stream) == []
    put(engine, table, 4, "n4-new", T0 + timedelta(seconds=12))
    assert changes(stream) == [("update", 4, "n4-new")]


def test_a_row_updated_twice_within_the_same_second_is_caught(db: tuple[sa.Engine, sa.Table]) -> None:
    engine, table = db
    stream = PollingChangeStream(engine, table="job", key_columns=["id"], overlap_s=5)
    put(engine, table, 7, "first", T0)
    assert changes(stream) == [("insert", 7, "first")]
    put(engine, table, 7, "second", T0)  # same DATETIME second: update_time did not move
    assert stream.position == StreamPosition("poll", int(T0.replace(tzinfo=SH).timestamp() * 1000))
    assert changes(stream) == [("update", 7, "second")]
    put(engine, table, 7, "third", T0, cron="0 0 * * * ?")
    assert changes(stream) == [("update", 7, "third")]
    assert changes(stream) == []


def test_zero_overlap_still_rereads_the_high_water_second(db: tuple[sa.Engine, sa.Table]) -> None:
    """Each pass starts at the high-water second itself (>=, floored to whole seconds), so even
    with no overlap a second update within that second is not lost."""
    engine, table = db
    stream = PollingChangeStream(engine, table="job", key_columns=["id"], overlap_s=0)
    put(engine, table, 1, "a", T0)
    assert changes(stream) == [("insert", 1, "a")]
    put(engine, table, 1, "b", T0)
    assert changes(stream) == [("update", 1, "b")]


def test_deletes_are_found_by_full_compare(db: tuple[sa.Engine, sa.Table]) -> None:
    engine, table = db
    stream = PollingChangeStream(engine, table="job", key_columns=["id"])
    for i in range(1, 6):
        put(engine, table, i, f"n{i}", T0)
    assert len(changes(stream)) == 5
    with engine.begin() as conn:
        conn.execute(table.delete().where(table.c.id.in_([2, 4])))
    assert changes(stream) == []  # polling cannot see deletes
    deleted = stream.full_compare([(i,) for i in range(1, 6)])
    assert [(c.op, c.before, c.after) for c in deleted] == [
        (ChangeOp.DELETE, {"id": 2}, None),
        (ChangeOp.DELETE, {"id": 4}, None),
    ]
    assert stream.full_compare([(1,), (3,), (5,)]) == []
    # a deleted key that comes back is a new row again
    put(engine, table, 2, "back", T0 + timedelta(seconds=1))
    assert changes(stream) == [("insert", 2, "back")]


def test_full_compare_with_a_composite_key(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    meta = sa.MetaData()
    t = sa.Table(
        "reg",
        meta,
        sa.Column("grp", sa.String(8), primary_key=True),
        sa.Column("addr", sa.String(32), primary_key=True),
        sa.Column("update_time", sa.DateTime),
    )
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(t.insert(), [{"grp": "g", "addr": f"10.0.0.{i}", "update_time": T0} for i in range(3)])
    stream = PollingChangeStream(engine, table="reg", key_columns=["grp", "addr"])
    assert len([c for b in stream.poll() for c in b.changes]) == 3
    gone = stream.full_compare([("g", "10.0.0.0"), ("g", "10.0.0.9"), ("h", "10.0.0.1")])
    assert [c.before for c in gone] == [{"grp": "g", "addr": "10.0.0.9"}, {"grp": "h", "addr": "10.0.0.1"}]


def test_paging_and_high_water_and_resume(db: tuple[sa.Engine, sa.Table]) -> None:
    engine, table = db
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [
                {"id": i, "name": f"n{i}", "cron": "x", "update_time": T0 + timedelta(seconds=i // 10)}
                for i in range(95)
            ],
        )
    stream = PollingChangeStream(engine, table="job", key_columns=["id"], batch_size=20, overlap_s=2)
    batches = stream.poll()
    assert [len(b.changes) for b in batches] == [20, 20, 20, 20, 15]
    assert sorted(c.after["id"] for b in batches for c in b.changes) == list(range(95))  # type: ignore[index]
    positions = [b.position.log_pos for b in batches]
    assert positions == sorted(positions)
    last = T0 + timedelta(seconds=9)
    assert stream.position == StreamPosition("poll", int(last.replace(tzinfo=SH).timestamp() * 1000))
    assert stream.poll() == []
    # a restarted stream re-reads only the overlap window before the high water (2 s: ids 70..94)
    again = PollingChangeStream(
        engine, table="job", key_columns=["id"], batch_size=20, overlap_s=2, start=stream.position
    )
    ids = sorted(c.after["id"] for b in again.poll() for c in b.changes)  # type: ignore[index]
    assert ids == list(range(70, 95))


def test_naive_times_are_read_in_the_configured_zone(db: tuple[sa.Engine, sa.Table]) -> None:
    engine, table = db
    put(engine, table, 1, "a", T0)
    sh = PollingChangeStream(engine, table="job", key_columns=["id"])
    utc = PollingChangeStream(engine, table="job", key_columns=["id"], tz="UTC")
    sh.poll()
    utc.poll()
    assert sh.position is not None and utc.position is not None
    assert utc.position.log_pos - sh.position.log_pos == 8 * 3600 * 1000
    assert sh.position.log_pos == int(datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc).timestamp() * 1000)


def test_batches_iterator_ends_when_idle(db: tuple[sa.Engine, sa.Table]) -> None:
    engine, table = db
    put(engine, table, 1, "a", T0)
    put(engine, table, 2, "b", T0)
    stream = PollingChangeStream(engine, table="job", key_columns=["id"])
    got = list(stream.batches(idle_timeout_s=0.2, interval_s=0.05))
    assert [c.after["id"] for b in got for c in b.changes] == [1, 2]  # type: ignore[index]
