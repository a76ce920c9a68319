"""Engines for the store URLs: SQLite (the embedded default) and MySQL-compatible servers.

Secrets in URLs are never rendered: use `safe_url` whenever a URL is shown or logged.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.engine.url import URL

DEFAULT_SQLITE_URL = "sqlite:///switchyard.db"


def safe_url(url: str | URL) -> str:
    """The URL with its password masked, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL has no password we can find: hide it all
        return "<unparsable url>"


def make_engine(url: str, *, pool_size: int = 8) -> Engine:
    parsed = make_url(url)
    kwargs: dict[str, Any] = {"future": True}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # One file shared by threads: each thread gets its own connection from the pool.
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        engine = create_engine(parsed, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            # WAL lets readers run beside the one writer; NORMAL sync is durable across
            # process crashes (only an OS crash can lose the last commits).
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    kwargs.update(
        pool_pre_ping=True,
        pool_recycle=1800,
        pool_size=pool_size,
        max_overflow=pool_size,
        # READ COMMITTED: the acquire loop's re-reads must see other transactions' commits,
        # and it keeps gap locks out of the hot path (TiDB supports it too).
        isolation_level="READ COMMITTED",
    )
    connect_args: dict[str, Any] = {"connect_timeout": 10}
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        connect_args["charset"] = "utf8mb4"
    kwargs["connect_args"] = connect_args
    return create_engine(parsed, **kwargs)
