"""The store's character set on the real MariaDB (issue 30): a store made by `db init` on
a server whose default is latin1 holds Chinese and emoji parameters of xxl-job rows;
`db check` names a table or column that is not utf8mb4 with its fix and `db init`
converts it keeping its rows; a row the store still cannot hold (a column an operator
left latin1) is quarantined with its field and reason while the rest of the run lands,
and the change stream's group with it commits with its checkpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine, text

from legacy_sim.seed import seed_batchcenter, seed_xxljob
from migrator.model import Action
from migrator.stream import StreamMigrator
from readers.records import ChangeBatch, ChangeOp, RowChange, StreamPosition
from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from tests.backends import mariadb_database
from tests.migration_env import MigrationEnv, make_env

pytestmark = pytest.mark.mariadb

CHINESE = "参数=1"
EMOJI = "emoji=🚀 参数=2"


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def legacy_url() -> Iterator[str]:
    with mariadb_database("csl") as url:
        yield url


def _env(legacy_url: str, target_url: str, params: list[str]) -> tuple[MigrationEnv, dict[str, str]]:
    """An xxl-job 3.4 database with one business of len(params) jobs, each job's
    executor_param set to one of `params`; with {source key: param}."""
    env = make_env(legacy_url, target_url, "xxl-job", "3.4")
    seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=len(params), bad_rows=0, malformed_crons=0, rng_seed=3)
    with env.legacy.begin() as conn:
        ids = [str(i) for (i,) in conn.execute(text("SELECT id FROM xxl_job_info ORDER BY id"))]
        for key, param in zip(ids, params, strict=True):
            conn.execute(text("UPDATE xxl_job_info SET executor_param = :p WHERE id = :i"), {"p": param, "i": key})
    return env, dict(zip(ids, params, strict=True))


def _ledger(engine: Engine) -> dict[str, tuple[str, str | None, str | None, str | None]]:
    """source key -> (status, target job code, field, reason)."""
    with engine.connect() as conn:
        return {
            k: (s, c, f, r)
            for k, s, c, f, r in conn.execute(
                text("SELECT source_key, status, target_job_code, field, reason FROM dus_migration_ledger")
            )
        }


def _params(engine: Engine) -> dict[str, str]:
    """job code -> the xxl-job executor parameter in its params, as the store holds them."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT job_code, params FROM dus_job")).all()
    return {code: json.loads(params)["executor_param"] for code, params in rows}


def _not_utf8mb4(engine: Engine) -> list[str]:
    """Every table and text column of the database whose character set or collation is
    not utf8mb4 / utf8mb4_bin."""
    with engine.connect() as conn:
        tables = conn.execute(
            text("SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
        ).all()
        columns = conn.execute(
            text(
                "SELECT TABLE_NAME, COLUMN_NAME, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
                " WHERE TABLE_SCHEMA = DATABASE() AND CHARACTER_SET_NAME IS NOT NULL"
            )
        ).all()
    return [f"{t} {c}" for t, c in tables if c != "utf8mb4_bin"] + [
        f"{t}.{c} {s} {o}" for t, c, s, o in columns if (s, o) != ("utf8mb4", "utf8mb4_bin")
    ]


def test_db_init_on_a_latin1_server_makes_utf8mb4_tables_and_chinese_and_emoji_params_migrate(
    legacy_url: str,
) -> None:
    with mariadb_database("csa", server_default="latin1") as url:
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                default = conn.execute(
                    text(
                        "SELECT DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = DATABASE()"
                    )
                ).scalar_one()
            assert default == "latin1"  # the database inherited the server's default, as the did
            # Given `db init` on it (with the partitions make_env's init asks for)
            assert _cli("db", "init", "--url", url, "--partitions", "4").exit_code == 0
            # Then every table and text column it made is utf8mb4 with the binary collation
            assert _not_utf8mb4(engine) == []
            # When xxl-job rows with a Chinese and an emoji parameter are migrated
            env, params = _env(legacy_url, url, [CHINESE, EMOJI, "plain=1"])
            try:
                summary = env.migrator.run()
                # Then every row lands and reads back equal
                assert summary.counts[Action.QUARANTINE.value] == 0, summary.rows
                assert summary.counts[Action.CREATE.value] == 3
                ledger = _ledger(engine)
                stored = _params(engine)
                assert {k: stored[ledger[k][1]] for k in params} == params  # type: ignore[index]
            finally:
                env.legacy.dispose()
                env.store.engine.dispose()
            assert _cli("db", "check", "--url", url).exit_code == 0
        finally:
            engine.dispose()


def test_db_check_names_a_table_and_a_column_not_utf8mb4_and_db_init_converts_them() -> None:
    with mariadb_database("csc") as url:
        engine = make_engine(url)
        try:
            assert _cli("db", "init", "--url", url).exit_code == 0
            # Given a store table an older init left latin1 (rows in it), and a column an
            # operator made latin1 by hand
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO dus_meta (name, value) VALUES ('note', 'café')"))
                conn.execute(text("ALTER TABLE dus_meta CONVERT TO CHARACTER SET latin1"))
                conn.execute(
                    text("ALTER TABLE dus_migration_ledger MODIFY reason VARCHAR(1024) CHARACTER SET latin1 NULL")
                )
            # When it is checked
            check = _cli("db", "check", "--url", url)
            # Then the check fails naming each, its character set and the fix
            assert check.exit_code == 4, check.output
            assert "dus_meta" in check.output and "latin1" in check.output
            assert "ALTER TABLE `dus_meta` CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" in check.output
            assert "dus_migration_ledger.reason" in check.output
            assert (
                "ALTER TABLE `dus_migration_ledger` CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                in check.output
            )
            as_json = _cli("db", "check", "--url", url, "--json")
            assert as_json.exit_code == 4 and "dus_meta" in as_json.output
            # And `db init` converts both, keeping the rows
            init = _cli("db", "init", "--url", url)
            assert init.exit_code == 0, init.output
            assert "dus_meta" in init.output and "dus_migration_ledger" in init.output
            assert _not_utf8mb4(engine) == []
            with engine.connect() as conn:
                assert conn.execute(text("SELECT value FROM dus_meta WHERE name = 'note'")).scalar_one() == "café"
            assert _cli("db", "check", "--url", url).exit_code == 0
        finally:
            engine.dispose()


def test_a_row_the_store_cannot_hold_is_quarantined_and_the_others_land(legacy_url: str) -> None:
    with mariadb_database("csq") as url:
        engine = make_engine(url)
        try:
            env, params = _env(legacy_url, url, ["plain=1", EMOJI, "plain=3", CHINESE])
            # Given the job parameters' column left latin1 by an operator
            with engine.begin() as conn:
                conn.execute(text("ALTER TABLE dus_job MODIFY params MEDIUMTEXT CHARACTER SET latin1 NOT NULL"))
            try:
                # When the business is migrated
                summary = env.migrator.run(keep_rows=True)
                # Then the rows the column cannot hold are quarantined with the field and
                # the server's reason, and the others land
                bad = sorted(k for k, p in params.items() if p != p.encode("ascii", "ignore").decode())
                assert summary.counts[Action.QUARANTINE.value] == 2
                assert summary.counts[Action.CREATE.value] == 2
                rows = {r.source_key: r for r in summary.rows}
                assert sorted(k for k, r in rows.items() if r.action is Action.QUARANTINE) == bad
                ledger = _ledger(engine)
                for key in bad:
                    status, code, fld, reason = ledger[key]
                    assert (status, code, fld) == ("quarantined", None, "params")
                    assert reason is not None and "dus_job.params" in reason and "Incorrect string value" in reason
                stored = _params(engine)
                assert {k: stored[ledger[k][1]] for k in params if k not in bad} == {  # type: ignore[index]
                    k: p for k, p in params.items() if k not in bad
                }
                # And once `db init` converts the column, a re-run lands them
                assert _cli("db", "init", "--url", url).exit_code == 0
                again = env.migrator.run()
                assert (again.counts[Action.QUARANTINE.value], again.counts[Action.CREATE.value]) == (0, 2)
                ledger = _ledger(engine)
                assert {k: _params(engine)[ledger[k][1]] for k in params} == params  # type: ignore[index]
            finally:
                env.legacy.dispose()
                env.store.engine.dispose()
        finally:
            engine.dispose()


def test_the_change_stream_quarantines_a_row_the_store_cannot_hold_and_goes_on(tmp_path: Path) -> None:
    with mariadb_database("css") as url:
        env = make_env(f"sqlite:///{tmp_path / 'l.db'}", url, "batch-center")
        try:
            seed_batchcenter(env.legacy, businesses=1, tasks_per_business=3, bad_rows=0, malformed_crons=0, rng_seed=2)
            sm = StreamMigrator(env.reader, env.writer, env.migrator, "s")
            sm.snapshot(env.reader, StreamPosition("bin.000001", 4))
            # Given the job parameters' column left latin1 by an operator
            with env.store.engine.begin() as conn:
                conn.execute(text("ALTER TABLE dus_job MODIFY params MEDIUMTEXT CHARACTER SET latin1 NOT NULL"))
            with env.legacy.connect() as conn:
                a, b = (dict(r) for r in conn.execute(text("SELECT * FROM bc_task ORDER BY id LIMIT 2")).mappings())

            def up(before: dict[str, Any], **after: Any) -> RowChange:
                return RowChange(
                    op=ChangeOp.UPDATE, schema="l", table="bc_task", before=before, after={**before, **after}
                )

            # When a group changes one task's payload to an emoji and another's retries
            at = StreamPosition("bin.000001", 100)
            sm.apply_group([ChangeBatch(changes=(up(a, payload='{"p": "🚀"}'), up(b, max_retry=7)), position=at)])
            # Then the first is quarantined with its field, the second applied, and the
            # checkpoint moved past the group
            assert sm.checkpoint() == at
            ledger = _ledger(env.store.engine)
            assert ledger[str(a["id"])][0] == "quarantined" and ledger[str(a["id"])][2] == "params"
            with env.store.engine.connect() as conn:
                retries = conn.execute(
                    text("SELECT max_retry FROM dus_job WHERE job_code = :c"), {"c": ledger[str(b["id"])][1]}
                ).scalar_one()
            assert (ledger[str(b["id"])][0], retries) == ("migrated", 7)
        finally:
            env.legacy.dispose()
            env.store.engine.dispose()
