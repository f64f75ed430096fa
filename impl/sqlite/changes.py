"""The rows of a store that changed since they were last read: a log the database keeps itself
(decisions Q-65), so a conformance read-back can read again only those rows.

TEMP triggers on every table of the schema write the key of each row that an INSERT, UPDATE or
DELETE touches (before and after an UPDATE, so a changed key is seen) into a TEMP table. They fire
for every statement on the connection, the adapter's own, a drift injection's, a broken store's,
and for foreign-key actions, and they are undone with the transaction that fired them: the log is
what the database did, not what a Store says it did. The one row change SQLite does not report to
triggers is the deletion of a row that a REPLACE conflict resolution removes; `SnapshotReader`
catches that by counting rows (impl/sqlite/snapshot.py). Only stores that a `MemoryStorePool`
hands out carry the log: the triggers add statements that a connection's trace callback shows.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from .snapshot import READERS

LOG = "qlwf_changed_rows"

Key = Any  # the key column's value, or a tuple of them for a two-column key


def _statements() -> list[str]:
    out = [f"CREATE TEMP TABLE IF NOT EXISTS {LOG} (kind TEXT NOT NULL, k1 ANY, k2 ANY)"]
    for index, (kind, reader) in enumerate(READERS.items()):
        columns = reader.key_columns

        def values(row: str, kind: str = kind, columns: tuple[str, ...] = columns) -> str:
            second = f"{row}.{columns[1]}" if len(columns) > 1 else "NULL"
            return f"('{kind}', {row}.{columns[0]}, {second})"

        for event, rows in (("INSERT", ("NEW",)), ("UPDATE", ("OLD", "NEW")), ("DELETE", ("OLD",))):
            logged = ", ".join(map(values, rows))
            out.append(f"CREATE TEMP TRIGGER IF NOT EXISTS {LOG}_{index}_{event.lower()} AFTER {event} "
                       f'ON main."{reader.table}" BEGIN INSERT INTO {LOG} (kind, k1, k2) VALUES {logged}; END')
    return out


STATEMENTS = tuple(_statements())


def install(conn: sqlite3.Connection) -> None:
    """Create the log and its triggers (idempotent); outside any transaction."""
    for statement in STATEMENTS:
        conn.execute(statement)


def installed(conn: sqlite3.Connection) -> bool:
    (count,) = conn.execute("SELECT count(*) FROM sqlite_temp_schema WHERE name LIKE ?", (f"{LOG}%",)).fetchone()
    return int(count) == len(STATEMENTS)


def take(conn: sqlite3.Connection) -> dict[str, set[Key]]:
    """The keys logged since the last take, by kind; empties the log."""
    rows = conn.execute(f"SELECT kind, k1, k2 FROM {LOG}").fetchall()
    if not rows:
        return {}
    conn.execute(f"DELETE FROM {LOG}")
    out: dict[str, set[Key]] = {}
    for kind, k1, k2 in rows:
        out.setdefault(kind, set()).add(k1 if len(READERS[kind].key_columns) == 1 else (k1, k2))
    return out
