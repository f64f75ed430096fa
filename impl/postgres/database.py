"""One PostgreSQL database holding the ql3 schema, reached through a pool of autocommit connections.

Connections run in autocommit mode: a writing command opens its own transaction block with an
explicit `BEGIN ISOLATION LEVEL SERIALIZABLE` (storage.md §6.2); queries run as single statements
outside any transaction block. psycopg's automatic preparation is off on them: the store's
statements are prepared by wire.py, and psycopg answers a ROLLBACK with `DEALLOCATE ALL` once it
has prepared statements of its own, which would drop wire.py's too.
"""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from .codec import ALL_TABLES

__all__ = ["ConnectionUnavailable", "PgDatabase", "schema_sql"]

# Checks of ql3 tables left NOT VALID by drift injection (drift_injection.py), revalidated after a reset.
_NOT_VALID_SQL = """
SELECT c.conrelid::regclass::text, c.conname FROM pg_constraint AS c
JOIN pg_namespace AS n ON n.oid = c.connamespace
WHERE n.nspname = 'ql3' AND c.contype = 'c' AND NOT c.convalidated
"""


def schema_sql() -> str:
    return resources.files("qlwf.impl.postgres").joinpath("schema.sql").read_text(encoding="utf-8")


class ConnectionUnavailable(Exception):
    """No connection could be obtained (storage.md §6.2: Unavailable `storage_unreachable`)."""


class PgDatabase:
    """A connection pool over one database; `size` connections are kept open."""

    def __init__(self, conninfo: str, *, size: int = 2, timeout_s: float = 5.0) -> None:
        self.conninfo = conninfo
        self.timeout_s = timeout_s
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo, min_size=size, max_size=size, kwargs={"autocommit": True, "prepare_threshold": None},
            timeout=timeout_s, open=False, name="qlwf-pg")
        self.pool.open(wait=False)
        self._dirty_checks = False  # set by drift injection
        self._lock = threading.Lock()

    def getconn(self) -> psycopg.Connection[Any]:
        try:
            return self.pool.getconn(timeout=self.timeout_s)
        except (PoolTimeout, psycopg.OperationalError) as e:
            raise ConnectionUnavailable(str(e)) from e

    def putconn(self, conn: psycopg.Connection[Any]) -> None:
        self.pool.putconn(conn)

    def execute_script(self, sql: str) -> None:
        conn = self.getconn()
        try:
            conn.execute(sql)
        finally:
            self.putconn(conn)

    def apply_schema(self) -> None:
        self.execute_script(schema_sql())

    def mark_checks_invalidated(self) -> None:
        with self._lock:
            self._dirty_checks = True

    def reset(self) -> None:
        """Empty every ql3 table in one round trip (children first), then revalidate any check that
        drift injection left NOT VALID. Plain DELETE beats TRUNCATE on tables of a few rows."""
        conn = self.getconn()
        try:
            conn.execute("; ".join(f"DELETE FROM {t}" for t in ALL_TABLES))
            with self._lock:
                dirty, self._dirty_checks = self._dirty_checks, False
            if dirty:
                for table, name in conn.execute(_NOT_VALID_SQL).fetchall():
                    conn.execute(f'ALTER TABLE {table} VALIDATE CONSTRAINT "{name}"')
        finally:
            self.putconn(conn)

    def close(self) -> None:
        self.pool.close()
