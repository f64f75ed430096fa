"""Private in-memory databases, cloned from one migrated template (conformance runs open thousands).

Migrating a fresh in-memory database costs several milliseconds; deserializing the image of a
database that `open_database` already migrated costs a fraction of that and yields the same schema
and `user_version`. The clone gets the connection settings of `open_database` (explicit
transactions, foreign keys enforced, synchronous NORMAL).
"""

from __future__ import annotations

import functools
import sqlite3

from .migrations import SCHEMA_VERSION, DatabaseOpenError, open_database, schema_version


@functools.cache
def _template() -> bytes:
    conn = open_database(":memory:")
    try:
        return conn.serialize()
    finally:
        conn.close()


def open_memory_database() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        conn.deserialize(_template())
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")
        if conn.execute("PRAGMA foreign_keys").fetchone()[0] != 1 or schema_version(conn) != SCHEMA_VERSION:
            raise DatabaseOpenError("cloned in-memory database is not a conforming store")
    except BaseException:
        conn.close()
        raise
    return conn
