"""Private in-memory databases, cloned from one migrated template (conformance runs open thousands).

Migrating a fresh in-memory database costs several milliseconds; deserializing the image of a
database that `open_database` already migrated costs a fraction of that and yields the same schema
and `user_version`. The clone gets the connection settings of `open_database` (explicit
transactions, foreign keys enforced, synchronous NORMAL).

A clone still starts with no compiled statements, and compiling this schema's statements (its
CHECKs and triggers) was about a tenth of a conformance step. `MemoryStorePool` therefore hands
a closed store's connection to the next trace, emptied in one transaction and checked to be
indistinguishable from a fresh clone through everything a command or a read can observe; the
connection keeps its statement cache (decisions Q-63). Nothing here sets a pragma on a store it
keeps: setting any flag pragma expires every compiled statement of the connection.
"""

from __future__ import annotations

import functools
import graphlib
import sqlite3

from .migrations import SCHEMA_VERSION, DatabaseOpenError, open_database, schema_version

# The connection-level settings a command or a read could observe, compared with a fresh clone's
# before a connection is reused (the adapter itself changes only ignore_check_constraints, and
# only for the duration of a drift injection).
_PRAGMAS = ("foreign_keys", "ignore_check_constraints", "defer_foreign_keys", "recursive_triggers",
            "query_only", "reverse_unordered_selects", "case_sensitive_like", "automatic_index",
            "trusted_schema", "cell_size_check", "user_version", "synchronous")
_SCHEMA_SQL = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"
_TEMP_SCHEMA_SQL = "SELECT count(*) FROM sqlite_temp_schema"
# Statements one trace compiles number in the tens; the module's default cache keeps 128.
STATEMENT_CACHE = 512


@functools.cache
def _template() -> bytes:
    conn = open_database(":memory:")
    try:
        return conn.serialize()
    finally:
        conn.close()


def open_memory_database() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False,
                           cached_statements=STATEMENT_CACHE)
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


def _observable(conn: sqlite3.Connection) -> tuple[object, ...]:
    """What distinguishes one empty store from another: the schema, the settings, registrations."""
    return (conn.execute(_SCHEMA_SQL).fetchall(), conn.execute(_TEMP_SCHEMA_SQL).fetchone(),
            tuple(conn.execute(f"PRAGMA {name}").fetchone() for name in _PRAGMAS),
            conn.isolation_level, conn.row_factory, conn.text_factory)


@functools.cache
def _fresh() -> tuple[tuple[object, ...], tuple[str, ...]]:
    """A fresh clone's observable settings, and its tables with every table before those it
    references (children first: emptied in this order with foreign keys on, no row is ever
    referenced from a row not yet deleted, so no ON DELETE action or RESTRICT has anything to do)."""
    conn = open_memory_database()
    try:
        names = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        parents = {name: {row[2] for row in conn.execute(f'PRAGMA foreign_key_list("{name}")')} - {name}
                   for name in names}
        # graphlib orders a node after its predecessors: parents first; reversed, children first
        order = tuple(reversed(tuple(graphlib.TopologicalSorter(parents).static_order())))
        return _observable(conn), order
    finally:
        conn.close()


def _emptied(conn: sqlite3.Connection) -> bool:
    """Empty every table of a store handed back (one transaction); True iff it then matches a fresh
    clone in everything `_observable` covers and holds no row. Any doubt (an open transaction, an
    error, a difference) is False, and the caller closes the connection instead."""
    try:
        if conn.in_transaction:
            return False
        # Callbacks leave no trace that can be read back; clear them rather than compare them.
        conn.set_trace_callback(None)
        conn.set_progress_handler(None, 0)
        conn.set_authorizer(None)
        expected, tables = _fresh()
        # No pragma is set here: setting any flag pragma (foreign_keys too) expires every compiled
        # statement of the connection, which is what reusing it is meant to keep.
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table in tables:
                conn.execute(f'DELETE FROM "{table}"')
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        left = conn.execute(" UNION ALL ".join(f'SELECT 1 FROM "{table}"' for table in tables) + " LIMIT 1").fetchone()
        return left is None and _observable(conn) == expected
    except sqlite3.Error:
        return False


class MemoryStorePool:
    """Empty in-memory stores for one run of traces: a closed store's connection comes back emptied
    (`_emptied`), or a fresh clone when none is idle. Not thread-safe: one run, one thread."""

    def __init__(self, idle_limit: int = 2) -> None:
        self.idle_limit = idle_limit
        self._idle: list[sqlite3.Connection] = []
        self._closed = False

    def acquire(self) -> sqlite3.Connection:
        return self._idle.pop() if self._idle else open_memory_database()

    def release(self, conn: sqlite3.Connection) -> None:
        """Take back a connection its store no longer uses; keep it only if it empties cleanly."""
        if not self._closed and len(self._idle) < self.idle_limit and _emptied(conn):
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
