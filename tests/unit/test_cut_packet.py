"""A packet cut short (PyMySQL's bare AssertionError, a server restarting mid-packet) is
a lost connection at the store's boundary too (the fast path's own cursor raises past
SQLAlchemy); any other assertion stays what it is."""

from __future__ import annotations

import pytest

from dbkit.errors import StoreUnavailable
from dbkit.translate import lost_in_cut_packet, store_errors, translated


def _cut() -> None:
    raise AssertionError("Result length not requested length:\nExpected=4.  Actual=1.  Position: 0.")


def test_a_cut_packet_leaves_the_store_as_unreachable() -> None:
    with pytest.raises(StoreUnavailable, match="2013"):
        translated(_cut)()
    with pytest.raises(StoreUnavailable), store_errors():
        _cut()


def test_any_other_assertion_is_left_alone() -> None:
    def wrong() -> None:
        raise AssertionError("an invariant of ours")

    with pytest.raises(AssertionError, match="invariant"):
        translated(wrong)()
    assert lost_in_cut_packet(AssertionError()) is None
    assert lost_in_cut_packet(ValueError("Result length not requested length")) is None


def test_the_binlog_streams_own_short_connections_read_a_cut_packet_as_a_lost_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`migrate stream` reads the server's position on a short PyMySQL connection of its
    own; a packet cut short there (the soak: a MariaDB restart as the stream started)
    ended it with exit 1 "unexpected error (AssertionError)" instead of the lost
    connection (2013) it retries."""
    import pymysql

    from readers.streams import binlog

    class Cursor:
        def __enter__(self) -> Cursor:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def execute(self, sql: str, args: object = None) -> None:
            _cut()

    class Conn:
        def cursor(self) -> Cursor:
            return Cursor()

        def close(self) -> None:
            return None

    monkeypatch.setattr(binlog.pymysql, "connect", lambda **_kw: Conn())
    settings = {"host": "127.0.0.1", "port": 1, "user": "u", "password": "p"}
    with pytest.raises(pymysql.err.OperationalError) as caught:
        binlog.current_position(settings)
    assert caught.value.args[0] == 2013


def test_a_cut_packet_that_reaches_a_command_is_unreachable_not_unexpected() -> None:
    """Any read on a connection of its own (the soak's fifth hour: another start-up read of
    `migrate stream`) that lets PyMySQL's assertion through ends the command with exit 3,
    which a supervisor restarts, not exit 1 "unexpected error"."""
    import click
    from click.testing import CliRunner

    from switchyard import exitcodes
    from switchyard.cli.errors import cli_errors

    @click.command()
    @cli_errors
    def cmd() -> None:
        _cut()

    res = CliRunner().invoke(cmd, [])
    assert res.exit_code == exitcodes.UNREACHABLE and "2013" in res.output, res.output
