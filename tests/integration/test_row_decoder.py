"""The row decoder reads every covered column type exactly as python-mysql-replication does.

Real MariaDB, real binlog: random rows of a table with one column of each covered type
(NULLs, extremes, multi-byte text, fractional seconds, negative decimals and times) are
inserted, updated and deleted, several rows per statement; the same binlog range is read
twice by BinlogChangeStream, once with the row decoder and once with the library alone,
and every image must be equal value for value (types included). A table with a GEOMETRY
column, which the decoder does not cover, goes through the library in the same stream
(MariaDB's JSON is a LONGTEXT in the binlog, which the decoder reads).
"""

from __future__ import annotations

import datetime
import decimal
import random
from typing import Any

import pymysql
import pytest

from readers.streams import BinlogChangeStream, current_position
from tests.backends import mariadb_database
from tests.integration.test_binlog_stream import collect, new_server_id, settings
from tests.servers import server_url

pytestmark = pytest.mark.mariadb

COLUMNS = {
    "ti": "TINYINT",
    "tiu": "TINYINT UNSIGNED",
    "si": "SMALLINT",
    "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT",
    "miu": "MEDIUMINT UNSIGNED",
    "i": "INT",
    "iu": "INT UNSIGNED",
    "bi": "BIGINT",
    "biu": "BIGINT UNSIGNED",
    "f": "FLOAT",
    "d": "DOUBLE",
    "dec_a": "DECIMAL(10,2)",
    "dec_b": "DECIMAL(30,12)",
    "dec_c": "DECIMAL(5,0)",
    "dec_d": "DECIMAL(19,9)",
    "dec_e": "DECIMAL(4,4)",
    "vs": "VARCHAR(32)",
    "vl": "VARCHAR(300)",
    "vlatin": "VARCHAR(20) CHARACTER SET latin1",
    "c": "CHAR(10)",
    "cw": "CHAR(100)",
    "vb": "VARBINARY(40)",
    "tt": "TINYTEXT",
    "tx": "TEXT",
    "mt": "MEDIUMTEXT",
    "lt": "LONGTEXT",
    "bl": "BLOB",
    "dt": "DATETIME",
    "dt1": "DATETIME(1)",
    "dt3": "DATETIME(3)",
    "dt6": "DATETIME(6)",
    "ts": "TIMESTAMP NULL",
    "ts2": "TIMESTAMP(2) NULL",
    "ts6": "TIMESTAMP(6) NULL",
    "dd": "DATE",
    "tm": "TIME",
    "tm3": "TIME(3)",
    "tm5": "TIME(5)",
    "yr": "YEAR",
    "en": "ENUM('a','bb','ccc')",
    "st": "SET('x','y','z')",
    "bt": "BIT(5)",
    "bt12": "BIT(12)",
}
TEXT = "abc xyz 漢字 é ü 🚀 'quote' \"dq\" \\ back"


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(TEXT) for _ in range(rng.randint(0, n)))


def _value(rng: random.Random, name: str, kind: str) -> Any:
    if rng.random() < 0.12:
        return None
    signed = "UNSIGNED" not in kind
    bits = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "BIGINT": 64}.get(kind.split()[0])
    if bits:
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        return rng.choice([lo, hi, 0, -1 if signed else 1, rng.randint(lo, hi)])
    if kind in ("FLOAT", "DOUBLE"):
        return rng.choice([0.0, -1.5, 3.25, rng.uniform(-1e6, 1e6)])
    if kind.startswith("DECIMAL"):
        p, s = (int(x) for x in kind[8:-1].split(","))
        top = 10 ** (p - s) - 1
        whole = rng.choice([0, top, -top, rng.randint(-top, top)])
        frac = rng.randint(0, 10**s - 1) if s else 0
        sign = -1 if whole < 0 or (whole == 0 and rng.random() < 0.3) else 1
        return decimal.Decimal(f"{'-' if sign < 0 else ''}{abs(whole)}.{frac:0{s}d}" if s else str(whole))
    if name == "vlatin":
        return "".join(rng.choice("abc é ü") for _ in range(rng.randint(0, 20)))
    if name == "vb":
        return bytes(rng.randint(32, 126) for _ in range(rng.randint(0, 40)))
    if name == "bl":
        return _text(rng, 300).encode()
    if kind.startswith("VARCHAR(32)") or kind == "CHAR(10)":
        return _text(rng, 10).rstrip()
    if kind in ("VARCHAR(300)", "CHAR(100)"):
        return _text(rng, 100 if kind == "CHAR(100)" else 300).rstrip()
    if kind.endswith("TEXT"):
        return _text(rng, {"TINYTEXT": 60, "TEXT": 400}.get(kind, 900))
    if kind.startswith("DATETIME") or kind.startswith("TIMESTAMP"):
        low = datetime.datetime(1971, 1, 1) if kind.startswith("TIMESTAMP") else datetime.datetime(1000, 1, 1)
        high = datetime.datetime(2037, 12, 31) if kind.startswith("TIMESTAMP") else datetime.datetime(9999, 12, 31)
        t = low + datetime.timedelta(seconds=rng.randint(0, int((high - low).total_seconds())))
        return t.replace(microsecond=rng.choice([0, 1, 999_999, rng.randint(0, 999_999)]))
    if kind == "DATE":
        return datetime.date(rng.randint(1000, 9999), rng.randint(1, 12), rng.randint(1, 28))
    if kind.startswith("TIME"):
        span = datetime.timedelta(
            hours=rng.randint(0, 838),
            minutes=rng.randint(0, 59),
            seconds=rng.randint(0, 59),
            microseconds=rng.choice([0, rng.randint(0, 999_999)]),
        )
        return -span if rng.random() < 0.3 else span
    if kind == "YEAR":
        return rng.choice([1901, 2155, rng.randint(1901, 2155)])
    if kind.startswith("ENUM"):
        return rng.choice(["a", "bb", "ccc"])
    if kind.startswith("SET"):
        return ",".join(sorted(rng.sample(["x", "y", "z"], rng.randint(1, 3))))
    if kind.startswith("BIT"):
        return rng.randint(0, (1 << int(kind[4:-1])) - 1)
    raise AssertionError(kind)


def _row(rng: random.Random, key: int) -> list[Any]:
    return [key] + [_value(rng, n, k) for n, k in COLUMNS.items()]


def _read(db: str, start: Any, fast: bool) -> tuple[list[tuple[Any, ...]], BinlogChangeStream]:
    stream = BinlogChangeStream(
        settings(server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")),
        server_id=new_server_id(),
        schemas=[db],
        tables=["every", "geo", "mark"],
        start=start,
    )
    stream.fast_rows = fast
    try:
        batches = collect(stream, until=lambda b: any(ch.table == "mark" for ch in b.changes), deadline_s=60)
    finally:
        stream.close()
    changes = [(ch.op, ch.table, ch.before, ch.after) for b in batches for ch in b.changes if ch.table != "mark"]
    return changes, stream


def test_row_decoder_reads_every_covered_type_as_the_library_does() -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    with mariadb_database("rowdec") as url:
        app = settings(url)
        db = url.rsplit("/", 1)[1].split("?")[0]
        conn = pymysql.connect(**app, database=db, autocommit=False, charset="utf8mb4")
        try:
            with conn.cursor() as cur:
                cols = ", ".join(f"`{n}` {k}" for n, k in COLUMNS.items())
                cur.execute(f"CREATE TABLE every (id BIGINT PRIMARY KEY, {cols}) CHARACTER SET utf8mb4")
                cur.execute("CREATE TABLE geo (id INT PRIMARY KEY, g GEOMETRY, doc JSON)")
                cur.execute("CREATE TABLE mark (id INT PRIMARY KEY)")
            conn.commit()
            start = current_position(app)
            names = ["id", *COLUMNS]
            insert = (
                f"INSERT INTO every ({', '.join(f'`{n}`' for n in names)}) VALUES ({', '.join(['%s'] * len(names))})"
            )
            with conn.cursor() as cur:
                for first in range(0, 240, 40):  # several rows per statement and per event
                    cur.executemany(insert, [_row(rng, k) for k in range(first, first + 40)])
                    conn.commit()
                for k in rng.sample(range(240), 80):  # updates: before and after images
                    row = _row(rng, k)
                    sets = ", ".join(f"`{n}` = %s" for n in COLUMNS)
                    cur.execute(f"UPDATE every SET {sets} WHERE id = %s", [*row[1:], k])
                cur.execute("UPDATE every SET i = NULL, vs = 'many' WHERE id < 30")  # one event, many rows
                # zero dates (a lenient sql_mode lets a legacy server hold them): None on both paths
                cur.execute("SET SESSION sql_mode = ''")
                cur.execute(
                    "UPDATE every SET dt = '0000-00-00 00:00:00', dt6 = '0000-00-00 00:00:00.000000', "
                    "dd = '0000-00-00', ts = '0000-00-00 00:00:00' WHERE id IN (30, 31)"
                )
                cur.execute("DELETE FROM every WHERE id >= 200")
                cur.execute(
                    "INSERT INTO geo VALUES (1, ST_GeomFromText('POINT(1 2)'), '{\"a\": [1, {\"b\": null}]}'), "
                    "(2, NULL, NULL)"
                )
                cur.execute("UPDATE geo SET doc = JSON_SET(doc, '$.a', 3) WHERE id = 1")
                cur.execute("INSERT INTO mark VALUES (1)")
            conn.commit()
        finally:
            conn.close()

        fast, fast_stream = _read(db, start, fast=True)
        slow, slow_stream = _read(db, start, fast=False)

    assert len(slow) == 240 + 80 + 30 + 2 + 40 + 3, f"seed {seed}"
    assert slow_stream.library_rows == len(slow) + 1  # and the sentinel row
    # only the GEOMETRY table went through the library on the fast stream
    assert fast_stream.library_rows == sum(1 for ch in slow if ch[1] == "geo") == 3
    for i, (a, b) in enumerate(zip(fast, slow, strict=True)):
        assert a[:2] == b[:2], f"seed {seed}, change {i}"
        for image_a, image_b in zip(a[2:], b[2:], strict=True):
            assert (image_a is None) == (image_b is None), f"seed {seed}, change {i}"
            if image_a is None:
                continue
            assert list(image_a) == list(image_b), f"seed {seed}, change {i}: column order"
            for name in image_b:
                va, vb = image_a[name], image_b[name]
                assert type(va) is type(vb) and va == vb, (
                    f"seed {seed}, change {i}, column {name}: decoder {va!r} vs library {vb!r}"
                )
    assert len(fast) == len(slow)
