"""The snapshot's MySQL bulk path: rows rendered as SQL literals escaped exactly as PyMySQL
escapes them, statements bounded in size, a chunk of new jobs written without the
trigger lock read (and an existing job still taking the full path), the server-computed
content digest and the reader's read-ahead."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pymysql.converters
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, Text, select, text

import dbkit.fastpath as upsert_mod
from dbkit.fastpath import _renderer, _statements, insert_rows
from legacy_sim.seed import seed_xxljob
from migrator.model import LedgerStatus
from readers.legacy_ddl import create_legacy_schema
from readers.xxljob import XxlJobReader
from scheduler_core.store.engine import make_engine
from tests.backends import mariadb_database
from tests.migration_env import make_env

HOSTILE = [
    "plain",
    "it's",
    'say "hi"',
    "back\\slash",
    "line\nbreak\r",
    "nul\x00byte",
    "ctrl-z\x1a",
    "%s and %(x)s and %%",
    "日本語 \U0001f600",
    "'; DROP TABLE t; --",
    "",
]


class _FakePyMySQL:
    """What the renderer needs of a PyMySQL connection: `escape` and `server_status`."""

    def __init__(self, status: int = 0) -> None:
        self.server_status = status

    def escape(self, obj: Any) -> str:
        return pymysql.converters.escape_item(obj, "utf8mb4")


def test_a_row_renders_as_pymysql_would_escape_each_value() -> None:
    render = _renderer(_FakePyMySQL())
    assert render is not None
    row = [1, -7, None, True, datetime(2026, 12, 3, 10, 0, 0), *HOSTILE]
    expected = "(" + ",".join(pymysql.converters.escape_item(v, "utf8mb4") for v in row) + ")"
    assert render(row) == expected


def test_without_backslash_escapes_only_quotes_are_doubled() -> None:
    render = _renderer(_FakePyMySQL(status=512))
    assert render is not None
    assert render(["it's \\n"]) == "('it''s \\n')"


def test_a_connection_that_is_not_pymysql_gets_no_renderer() -> None:
    assert _renderer(object()) is None


def test_statements_stay_under_the_bound_and_keep_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upsert_mod, "MAX_STATEMENT_BYTES", 100)
    tuples = [f"({i},'{'x' * (i % 7)}')" for i in range(40)]
    out = list(_statements("INSERT INTO t VALUES ", " ON DUPLICATE KEY UPDATE a=a", iter(tuples)))
    assert len(out) > 1
    assert all(len(s) <= 100 for s in out)
    rows = [r for s in out for r in s[len("INSERT INTO t VALUES ") : -len(" ON DUPLICATE KEY UPDATE a=a")].split(",(")]
    assert len(rows) == len(tuples)


def test_one_row_longer_than_the_bound_is_still_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upsert_mod, "MAX_STATEMENT_BYTES", 10)
    assert list(_statements("I ", "", iter(["(1,'long value')", "(2)"]))) == ["I (1,'long value')", "I (2)"]


# -- on the real server ---------------------------------------------------------------


@pytest.fixture
def mysql_url() -> Iterator[str]:
    with mariadb_database("bulk") as url:
        yield url


@pytest.mark.mariadb
def test_hostile_text_round_trips_and_the_affected_rows_tell_inserts_from_updates(mysql_url: str) -> None:
    engine = make_engine(mysql_url)
    md = MetaData()
    t = Table(
        "bulk_t",
        md,
        Column("id", Integer, primary_key=True, autoincrement=False),
        Column("s", Text),
        Column("n", String(8)),
    )
    try:
        md.create_all(engine)
        rows = [(i, s, None if i % 2 else "x") for i, s in enumerate(HOSTILE, start=1)]
        with engine.begin() as conn:
            assert insert_rows(conn, t, ["id", "s", "n"], rows, ["s"]) == len(rows)  # 1 per insert
        with engine.connect() as conn:
            assert [tuple(r) for r in conn.execute(select(t).order_by(t.c.id))] == rows
        with engine.begin() as conn:
            # two existing rows changed (2 each), one new (1)
            assert (
                insert_rows(conn, t, ["id", "s", "n"], [(1, "new", None), (2, "new", None), (99, "z", None)], ["s"])
                == 5
            )
    finally:
        engine.dispose()


@pytest.mark.mariadb
def test_existing_jobs_whose_ledger_rows_were_lost_are_repaired_in_place(mysql_url: str) -> None:
    with mariadb_database("bulkl") as legacy_url:
        env = make_env(legacy_url, mysql_url, "xxl-job", "3.4")
        try:
            seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=30, rng_seed=3)
            first = env.migrator.run()
            assert first.counts["create"] > 0
            engine = env.store.engine
            with engine.connect() as conn:
                triggers = conn.execute(text("SELECT job_code, id FROM dus_job_trigger ORDER BY job_code")).all()
                jobs = conn.execute(text("SELECT COUNT(*) FROM dus_job")).scalar_one()
            assert len({code for code, _ in triggers}) == len(triggers)  # one trigger per job
            # the ledger lost (a failure after the target commit, by hand): every row is a create again
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM dus_migration_ledger"))
            again = env.migrator.run()
            assert again.counts["create"] == first.counts["create"]
            with engine.connect() as conn:
                # the jobs already there: updated in place, no second trigger anywhere
                assert (
                    conn.execute(text("SELECT job_code, id FROM dus_job_trigger ORDER BY job_code")).all() == triggers
                )
                assert conn.execute(text("SELECT COUNT(*) FROM dus_job")).scalar_one() == jobs
                versions = conn.execute(text("SELECT MIN(version) FROM dus_job_trigger")).scalar_one()
            assert versions == 1  # each trigger was edited, once
            # and the quarantined rows come back with their field and reason
            keys = [
                k
                for k in env.migrator.writer.ledger("xxl-job", [str(i) for i in range(1, 61)]).values()
                if k.status is LedgerStatus.QUARANTINED
            ]
            assert keys and all(e.field and e.reason for e in keys)
        finally:
            env.legacy.dispose()
            env.store.engine.dispose()


@pytest.mark.mariadb
def test_the_server_digest_is_the_python_digest_and_read_ahead_reads_every_row_once(mysql_url: str) -> None:
    engine = make_engine(mysql_url)
    try:
        create_legacy_schema(engine, "xxl-job", "3.4")
        summary = seed_xxljob(engine, "3.4", groups=3, jobs_per_group=11, rng_seed=5)
        reader = XxlJobReader(engine, batch_size=4)  # many pages, the last one short
        defs = list(reader.definitions())
        assert [int(d.source_key) for d in defs] == list(range(1, summary.total + 1))
        assert any(d.problems for d in defs) and any(not d.problems for d in defs)
        # every digest the same as row_digest computes in Python (a row with problems is
        # hashed in Python over every column either way)
        python = {d.source_key: d.digest for d in _python_digests(reader)}
        assert {d.source_key: d.digest for d in defs} == python
        assert len(set(python.values())) == len(python)
        # a caller that stops after the first page: the read-ahead ends with it
        first = reader.definitions()
        assert next(first).source_key == "1"
        first.close()  # type: ignore[attr-defined]  # a generator
    finally:
        engine.dispose()


def _python_digests(reader: XxlJobReader) -> list[Any]:
    """The definitions as read without the server's digest (every digest from row_digest)."""
    real = reader._job_columns
    reader._job_columns = lambda conn: list(reader.schema().info.select_list())  # type: ignore[method-assign]
    reader.reload_schema()  # the rendered job SELECT is built again from the patched columns
    try:
        return list(reader.definitions())
    finally:
        reader._job_columns = real  # type: ignore[method-assign]
        reader.reload_schema()
