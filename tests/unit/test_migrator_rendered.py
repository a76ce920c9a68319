"""A chunk's rows rendered ahead of its write (`TargetWriter.render`, on the thread that
prepares the next chunk): the same literals the writer's own renderer gives, and the same
target rows as a run that renders while it writes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text

from dbkit.fastpath import _renderer, render_plain
from legacy_sim.seed import seed_xxljob
from migrator.apply import Migrator
from migrator.model import LedgerStatus
from migrator.target import TargetWriter
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from switchyard.wiring import migrator_store
from tests.backends import mariadb_database
from tests.migration_env import MigrationEnv, make_env
from tests.unit.test_migrator_bulk_write import HOSTILE, _FakePyMySQL


@contextmanager
def _xxljob_env() -> Iterator[MigrationEnv]:
    """An empty xxl-job 3.4 legacy database and a target, on the real MariaDB."""
    with mariadb_database("rndx") as legacy_url, mariadb_database("rndy") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", "3.4")
        try:
            yield env
        finally:
            env.legacy.dispose()
            env.store.engine.dispose()


# the write times differ from run to run; every other column must be equal
_TIMES = {"created_at", "updated_at"}
_TABLES = ("dus_job", "dus_job_trigger", "dus_sharding_item", "dus_migration_ledger", "dus_business")


def test_a_plain_row_renders_as_the_connection_renderer_does() -> None:
    render = _renderer(_FakePyMySQL())
    assert render is not None
    row: list[Any] = [1, -7, None, 0, *HOSTILE]
    assert render_plain(row) == render(row)


@pytest.mark.parametrize("value", [True, 1.5, datetime(2026, 12, 3), b"x"])
def test_a_value_that_needs_the_driver_is_left_to_the_writer(value: Any) -> None:
    assert render_plain([1, "a", value]) is None


@pytest.fixture
def urls() -> Iterator[tuple[str, str, str]]:
    with mariadb_database("rndl") as legacy, mariadb_database("rnda") as ahead, mariadb_database("rndw") as inline:
        yield legacy, ahead, inline


def _tables(engine: Any) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for name in _TABLES:
            res = conn.execute(text(f"SELECT * FROM {name}"))
            keep = [i for i, c in enumerate(res.keys()) if c not in _TIMES]
            out[name] = sorted((tuple(r[i] for i in keep) for r in res), key=repr)
    return out


@pytest.mark.mariadb
def test_rows_rendered_ahead_write_the_same_target_as_rows_rendered_inline(
    urls: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy_url, ahead_url, inline_url = urls
    ahead = make_env(legacy_url, ahead_url, "xxl-job", "3.4")
    target = make_engine(inline_url)
    try:
        init_schema(target, 4)
        store = SqlTriggerStore(target, ahead.store.clock)
        inline = Migrator(ahead.reader, TargetWriter(store, migrator_store(store)), ahead.migrator.clock)
        seed_xxljob(ahead.legacy, "3.4", groups=3, jobs_per_group=40, rng_seed=11)
        calls: list[int] = []
        real = TargetWriter.render

        def counted(self: TargetWriter, writes: Any) -> Any:
            out = real(self, writes)
            calls.append(0 if out is None else len(out.ledger))
            return out

        monkeypatch.setattr(TargetWriter, "render", counted)
        first = ahead.migrator.run()
        assert calls and all(calls)  # every chunk went through the rendered path
        monkeypatch.setattr(TargetWriter, "render", lambda self, writes: None)
        second = inline.run()
        assert first.counts == second.counts and first.counts["quarantine"] > 0
        got, want = _tables(ahead.store.engine), _tables(target)
        assert all(got[t] for t in ("dus_job", "dus_job_trigger", "dus_sharding_item", "dus_migration_ledger"))
        assert got == want
        # and an unchanged re-run of the rendered target writes nothing
        monkeypatch.setattr(TargetWriter, "render", real)
        assert ahead.migrator.run().rows_written == 0
    finally:
        ahead.legacy.dispose()
        ahead.store.engine.dispose()
        target.dispose()


@pytest.mark.mariadb
def test_the_servers_digest_pages_flag_broadcast_jobs_as_the_reader_maps_them() -> None:
    with _xxljob_env() as env:
        seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=20, rng_seed=4)
        with env.legacy.begin() as conn:
            # exact values only: not lower case, not with a trailing space
            conn.execute(text("UPDATE xxl_job_info SET executor_route_strategy = 'sharding_broadcast' WHERE id = 1"))
            conn.execute(text("UPDATE xxl_job_info SET executor_route_strategy = 'SHARDING_BROADCAST ' WHERE id = 2"))
            conn.execute(text("UPDATE xxl_job_info SET executor_route_strategy = 'SHARDING_BROADCAST' WHERE id = 3"))
        pages = env.reader.content_digests()  # type: ignore[attr-defined]
        assert pages is not None
        by_server = {p.source_key: p.broadcast for p in pages}
        by_rows = {d.source_key: d.broadcast for d in env.reader.definitions()}
        assert by_server == by_rows
        assert by_server["3"] and not by_server["1"] and not by_server["2"]


@pytest.mark.mariadb
def test_rows_deleted_by_hand_are_found_across_the_scans_pages_with_and_without_a_business(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import migrator.apply as apply_mod
    from migrator.model import Action
    from scheduler_core.model import TriggerState

    monkeypatch.setattr(apply_mod, "DELETE_SCAN_PAGE", 7)  # many pages, the last one short
    with _xxljob_env() as env:
        seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=30, rng_seed=6)
        env.migrator.run()
        with env.store.engine.connect() as conn:
            migrated = conn.execute(
                text(
                    "SELECT source_key, business, target_job_code FROM dus_migration_ledger "
                    "WHERE status = 'migrated' ORDER BY source_key"
                )
            ).all()
        gone = [migrated[0], migrated[len(migrated) // 2], migrated[-1]]
        with env.legacy.begin() as conn:
            for key, _, _ in gone:
                conn.execute(text("DELETE FROM xxl_job_info WHERE id = :id"), {"id": int(key)})
        one = gone[1][1]
        out = env.migrator.run([one], keep_rows=True)
        assert sorted(r.source_key for r in out.rows if r.action is Action.DELETE) == sorted(
            k for k, b, _ in gone if b == one
        )
        out = env.migrator.run(keep_rows=True)
        assert sorted(r.source_key for r in out.rows if r.action is Action.DELETE) == sorted(
            k for k, b, _ in gone if b != one
        )
        for _, _, code in gone:
            (trig,) = env.store.triggers_of(job_code=code)
            assert trig.state is TriggerState.CANCELLED
        assert env.migrator.run().rows_written == 0


@pytest.mark.mariadb
def test_ledger_digests_give_what_the_ledger_rows_hold() -> None:
    from migrator.ledger_hash import source_half

    with _xxljob_env() as env:
        seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=15, rng_seed=8)
        env.migrator.run()
        with env.store.engine.begin() as conn:
            # an old one-part hash and keys with spaces in them
            conn.execute(
                text("UPDATE dus_migration_ledger SET content_hash = LEFT(content_hash, 40) WHERE source_key = '1'")
            )
            conn.execute(
                text(
                    "INSERT INTO dus_migration_ledger (source_system, source_key, business, status, "
                    "content_hash, field, reason, updated_at) VALUES "
                    "('xxl-job', ' a b ', 'x', 'quarantined', :h, 'cron', 'bad cron ', 1)"
                ),
                {"h": "f" * 64},
            )
        keys = [str(i) for i in range(1, 40)] + [" a b ", "absent"]
        full = env.writer.ledger("xxl-job", keys)
        light = env.writer.ledger_digests("xxl-job", keys)
        assert light.keys() == full.keys() and " a b " in light and light["1"].source_half == ""
        for k, e in full.items():
            d = light[k]
            assert (d.status, d.source_half) == (e.status, source_half(e.content_hash))
            quarantined = e.status is LedgerStatus.QUARANTINED
            assert (d.field, d.reason) == ((e.field, e.reason) if quarantined else (None, None))
        assert any(d.status is LedgerStatus.QUARANTINED and d.field for d in light.values())
