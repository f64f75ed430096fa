"""Schema migrations of the SQLite conformance store (storage.md §2, §6.1).

`open_database` opens the single connection of a database (the "operation authority" of
storage.md §6.1 owns it), configures it and brings the schema up to `SCHEMA_VERSION`:

* ``isolation_level=None``: the Python module never opens transactions implicitly; every writing
  command issues ``BEGIN IMMEDIATE`` / ``COMMIT`` / ``ROLLBACK`` itself;
* ``PRAGMA foreign_keys=ON`` (checked: the pragma is a silent no-op on builds without foreign-key
  support, which would be a non-conforming store);
* ``PRAGMA journal_mode=WAL`` for file databases (an in-memory database keeps ``memory``);
* ``PRAGMA synchronous=NORMAL``;
* migrations guarded by ``PRAGMA user_version``, all applied inside one ``BEGIN IMMEDIATE``
  transaction, so that a crash or an error leaves either the old or the new schema and two
  processes opening the same file cannot both migrate it.

The connection is created with ``check_same_thread=False`` because the operation authority may
run its FIFO queue on a thread other than the one that opened the database; serialization of all
use of the connection is the authority's job, not the module's.

Migration scripts are executed statement by statement (split with
`sqlite3.complete_statement`, which understands trigger bodies, string literals and comments)
rather than with ``executescript``, because ``executescript`` commits any open transaction first.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources

__all__ = [
    "MIGRATIONS",
    "MIN_SQLITE_VERSION",
    "SCHEMA_VERSION",
    "DatabaseOpenError",
    "Migration",
    "SchemaVersionError",
    "apply_migrations",
    "iter_statements",
    "open_database",
    "schema_version",
]

_PACKAGE = "qlwf.impl.sqlite"

# STRICT tables (3.37) and built-in JSON functions (3.38; json1 before that was a build option).
MIN_SQLITE_VERSION: tuple[int, int, int] = (3, 38, 0)


class DatabaseOpenError(RuntimeError):
    """The database cannot be opened as a conforming qlwf store."""


class SchemaVersionError(DatabaseOpenError):
    """The database carries a schema version this code does not know (newer than `SCHEMA_VERSION`)."""


@dataclass(frozen=True)
class Migration:
    """One step of the schema history: after it runs, ``PRAGMA user_version`` is `version`."""

    version: int
    name: str
    load_sql: Callable[[], str]

    def statements(self) -> list[str]:
        return list(iter_statements(self.load_sql()))


def _package_sql(filename: str) -> Callable[[], str]:
    def load() -> str:
        return resources.files(_PACKAGE).joinpath(filename).read_text(encoding="utf-8")

    return load


# The schema history, in order. Versions are 1, 2, 3, … without gaps; never edit an applied
# migration — append a new one.
MIGRATIONS: tuple[Migration, ...] = (Migration(1, "schema", _package_sql("schema.sql")),)

SCHEMA_VERSION: int = MIGRATIONS[-1].version


def _check_history() -> None:
    expected = list(range(1, len(MIGRATIONS) + 1))
    actual = [m.version for m in MIGRATIONS]
    if actual != expected:  # pragma: no cover - guards future edits of MIGRATIONS
        raise AssertionError(f"migration versions must be 1..n without gaps, got {actual}")


_check_history()


def iter_statements(script: str) -> Iterator[str]:
    """Split an SQL script into complete statements (trigger bodies stay whole).

    Text after the last complete statement must be whitespace or comments only; otherwise
    `ValueError` is raised (an unterminated statement is never executed).
    """
    pieces = script.split(";")
    buffer = ""
    for piece in pieces[:-1]:
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if not _is_blank(buffer):
                yield buffer.strip()
            buffer = ""
    buffer += pieces[-1]
    if not _is_blank(buffer):
        raise ValueError(f"incomplete SQL statement at end of script: {buffer.strip()[:80]!r}")


def _is_blank(sql: str) -> bool:
    """True if `sql` holds only whitespace, ';' and SQL comments."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch.isspace() or ch == ";":
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            return False
    return True


def schema_version(conn: sqlite3.Connection) -> int:
    """The ``PRAGMA user_version`` of the main database."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def apply_migrations(conn: sqlite3.Connection) -> int:
    """Bring the schema of `conn` to `SCHEMA_VERSION`; returns the number of migrations applied.

    Runs in one ``BEGIN IMMEDIATE`` transaction (the connection must not be inside a transaction
    and must use ``isolation_level=None``). Idempotent: a database at `SCHEMA_VERSION` is left
    untouched. A database with a newer version raises `SchemaVersionError`; any failure rolls the
    whole migration back and re-raises.
    """
    if conn.in_transaction:
        raise DatabaseOpenError("apply_migrations needs a connection outside any transaction")
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = schema_version(conn)
        if current > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"database schema version {current} is newer than the newest version known to "
                f"qlwf.impl.sqlite.migrations ({SCHEMA_VERSION}); refusing to open it"
            )
        if current < 0:
            raise SchemaVersionError(f"database schema version {current} is not a valid version")
        applied = 0
        for migration in MIGRATIONS:
            if migration.version <= current:
                continue
            for statement in migration.statements():
                conn.execute(statement)
            # PRAGMA does not accept bound parameters; the value is an int from MIGRATIONS.
            conn.execute(f"PRAGMA user_version = {int(migration.version)}")
            applied += 1
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # the original error is what matters
            conn.execute("ROLLBACK")
        raise
    return applied


def _is_memory(path: str) -> bool:
    # "" is a private temporary database; ":memory:" and memory URIs live in memory.
    return path in ("", ":memory:") or path.startswith("file::memory:") or "mode=memory" in path


def open_database(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open the one connection of the database at `path`, configure it and migrate the schema.

    Returns a connection with ``isolation_level=None`` (explicit transactions), foreign keys on,
    WAL journal (file databases), ``synchronous=NORMAL`` and the schema at `SCHEMA_VERSION`.
    Raises `SchemaVersionError` if the file holds a newer schema version.
    """
    if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
        raise DatabaseOpenError(
            f"SQLite {sqlite3.sqlite_version} is too old: the schema needs STRICT tables and the "
            f"JSON functions (SQLite >= {'.'.join(map(str, MIN_SQLITE_VERSION))})"
        )
    name = os.fspath(path)
    uri = name.startswith("file:")
    conn = sqlite3.connect(name, isolation_level=None, check_same_thread=False, uri=uri)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        row = conn.execute("PRAGMA foreign_keys").fetchone()
        if row is None or row[0] != 1:
            raise DatabaseOpenError("this SQLite build cannot enforce foreign keys")
        if not _is_memory(name):
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(mode).lower() != "wal":
                raise DatabaseOpenError(f"could not switch {name!r} to WAL journal mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        apply_migrations(conn)
    except BaseException:
        conn.close()
        raise
    return conn
