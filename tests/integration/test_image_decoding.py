"""The same legacy rows through both paths, on the real MariaDB: read by SQL
(`definitions_by_keys`, as the snapshot reads them) and decoded from the binlog's FULL
after-images (`image_decoder`, as the change stream applies them). The definitions, the
mapped results and the hashes the ledger stores (the source digest that makes a row
"unchanged", the mapped hash) must be identical, for every xxl-job lineage and the batch
center, including a TIMESTAMP column (the binlog's naive-UTC trap) and non-ASCII text."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from legacy_sim.seed import seed_batchcenter, seed_xxljob
from migrator.ledger_hash import source_digest
from migrator.mapping import MappingOptions, map_definition
from readers.batchcenter import BatchCenterReader
from readers.legacy_ddl import XxlJobLineage, create_legacy_schema
from readers.ports import LegacyReader
from readers.records import LegacyDefinition
from readers.streams import BinlogChangeStream, current_position
from readers.xxljob import XxlJobReader
from scheduler_core.store.engine import make_engine
from tests.backends import mariadb_database
from tests.servers import server_url

pytestmark = pytest.mark.mariadb

NOW = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)


@pytest.fixture
def legacy() -> Iterator[tuple[Engine, str]]:
    with mariadb_database("img") as url:
        e = make_engine(url)
        try:
            yield e, url
        finally:
            e.dispose()


def _images(url: str, start: Any, table: str) -> dict[str, dict[str, Any]]:
    """The last after-image of each row of `table` written since `start`."""
    u = make_url(server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL"))
    cdc = {"host": u.host or "127.0.0.1", "port": u.port or 3306, "user": u.username, "password": u.password or ""}
    end = current_position(cdc)
    stream = BinlogChangeStream(
        cdc,
        server_id=4_100_000 + hash(url) % 100_000,
        schemas=[make_url(url).database],  # type: ignore[list-item]
        tables=[table],
        start=start,
        heartbeat_s=1.0,
        stall_timeout_s=5.0,
        progress_every_txns=1,
    )
    out: dict[str, dict[str, Any]] = {}
    try:
        # ends at `end`; the idle bound only ends a stream that never gets there (it counts from
        # before the connection, which can take seconds on a loaded machine)
        for batch in stream.batches(idle_timeout_s=60.0):
            for ch in batch.changes:
                if ch.after is not None:
                    out[str(ch.after["id"])] = ch.after
            if (batch.position.log_file, batch.position.log_pos) >= (end.log_file, end.log_pos):
                break
    finally:
        stream.close()
    return out


def _assert_same(reader: LegacyReader, images: dict[str, dict[str, Any]]) -> list[LegacyDefinition]:
    by_sql = reader.definitions_by_keys(list(images))
    assert set(by_sql) == set(images) and images
    decode = reader.image_decoder()  # type: ignore[attr-defined]
    businesses = {b.biz_code: b for b in reader.businesses()}
    options = MappingOptions()
    for key, image in images.items():
        via_sql, via_image = by_sql[key], decode(image)
        assert via_image == via_sql, key  # every field, raw row and problems included
        assert via_image.digest and via_image.digest == via_sql.digest
        biz = businesses.get(via_sql.biz_code)
        assert source_digest(via_image, biz, options) == source_digest(via_sql, biz, options)
        assert map_definition(via_image, biz, NOW, options) == map_definition(via_sql, biz, NOW, options)
    # the digest the server computes for an unchanged re-run is the same one (rows without
    # problems: a row with problems is digested over all its columns and never skipped)
    served = {d.source_key: d for d in reader.content_digests()}  # type: ignore[attr-defined]
    clean = [d for d in by_sql.values() if not d.problems]
    assert clean and all(served[d.source_key].digest == d.digest for d in clean)
    assert all(served[d.source_key].biz_code == d.biz_code for d in by_sql.values())
    assert all(served[d.source_key].broadcast == d.broadcast for d in clean)  # its digest counts the executors
    # the stream's cheap digest of an image (no mapping) is the mapped definition's for every
    # row without problems (a row with problems is quarantined and digested over all its
    # columns: the ledger holds it as quarantined, which the stream never skips)
    digest_of = reader.image_digester()  # type: ignore[attr-defined]
    for d in clean:
        cd = digest_of(images[d.source_key])
        assert cd is not None and (cd.source_key, cd.digest, cd.biz_code, cd.broadcast) == (
            d.source_key,
            d.digest,
            d.biz_code,
            d.broadcast,
        ), d.source_key
    return list(by_sql.values())


@pytest.mark.parametrize("lineage", [lin.value for lin in XxlJobLineage])
def test_xxljob_rows_map_the_same_from_sql_and_from_binlog_images(legacy: tuple[Engine, str], lineage: str) -> None:
    engine, url = legacy
    create_legacy_schema(engine, "xxl-job", lineage)
    start = current_position(engine)
    seed_xxljob(engine, lineage, groups=3, jobs_per_group=15, malformed_crons=2)
    with engine.begin() as c:  # non-ASCII text and an update: the image is the row after it
        c.execute(
            text("UPDATE xxl_job_info SET executor_param = :p, author = :a WHERE id % 4 = 1"),
            {"p": '{"城市": "上海", "emoji": "🚀"}', "a": "张三"},
        )
    defs = _assert_same(XxlJobReader(engine), _images(url, start, "xxl_job_info"))
    assert any(d.problems for d in defs) and any(not d.problems for d in defs)  # bad rows compared too


def test_batchcenter_rows_map_the_same_from_sql_and_from_binlog_images(legacy: tuple[Engine, str]) -> None:
    engine, url = legacy
    create_legacy_schema(engine, "batch-center")
    with engine.begin() as c:  # a TIMESTAMP column: naive UTC in the binlog library, session wall time by SQL
        c.execute(text("ALTER TABLE bc_task ADD COLUMN probe_ts TIMESTAMP NULL DEFAULT NULL"))
    start = current_position(engine)
    seed_batchcenter(engine, businesses=3, tasks_per_business=15, malformed_crons=2)
    with engine.begin() as c:
        c.execute(text("SET time_zone = '+00:00'"))
        c.execute(
            text("UPDATE bc_task SET probe_ts = '2026-12-02 23:30:00', task_name = :n WHERE id % 3 = 0"),
            {"n": "夜间结算"},
        )
    # the reader's sessions in +08:00 (not the server's UTC): SQL shows 07:30 next day
    shanghai = create_engine(url, connect_args={"init_command": "SET time_zone = '+08:00'"})
    try:
        reader = BatchCenterReader(shanghai)
        defs = _assert_same(reader, _images(url, start, "bc_task"))
        with shanghai.connect() as c:
            shown = c.execute(
                text("SELECT CAST(probe_ts AS CHAR) FROM bc_task WHERE probe_ts IS NOT NULL LIMIT 1")
            ).scalar()
    finally:
        shanghai.dispose()
    assert any(d.problems for d in defs) and any(not d.problems for d in defs)
    stamped = [d for d in defs if d.raw.get("probe_ts")]
    assert shown == "2026-12-03 07:30:00"
    assert {d.raw["probe_ts"] for d in stamped} == {shown}  # both paths: the session's wall time
