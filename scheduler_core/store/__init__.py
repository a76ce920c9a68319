"""The durable trigger store: one SQL implementation for TiDB/MariaDB and SQLite."""
