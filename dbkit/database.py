"""A database as the stores hold it: its engine, the AUTOCOMMIT twin a server's
one-statement work goes through, its capabilities, connections that translate driver
errors, and `close()`."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from dbkit.capabilities import Capabilities, capabilities
from dbkit.connections import _Translated, begin, connect
from dbkit.engine import autocommit_twin, make_engine


class Database:
    """One database: `engine` for transactions, `autocommit` for single statements that
    must not hold a lock across a round trip (the engine itself where the database has no
    such twin: `Capabilities.autocommit_twin`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._autocommit: Engine | None = None

    @classmethod
    def open(cls, url: str, *, pool_size: int = 8, must_exist: bool = False) -> Database:
        """A database for `url` (see `dbkit.engine.make_engine`; a bad URL: BadStoreUrl)."""
        return cls(make_engine(url, pool_size=pool_size, must_exist=must_exist))

    @property
    def capabilities(self) -> Capabilities:
        return capabilities(self.engine)

    @property
    def autocommit(self) -> Engine:
        if self._autocommit is None:
            self._autocommit = autocommit_twin(self.engine) if self.capabilities.autocommit_twin else self.engine
        return self._autocommit

    def connect(self) -> _Translated:
        return connect(self.engine)

    def begin(self) -> _Translated:
        return begin(self.engine)

    def close(self) -> None:
        """Close every pooled connection (the twin's too); a later call opens new ones."""
        self.engine.dispose()  # disposes the twin as well (autocommit_twin)
