"""Reading back only the rows that changed, for a store that logs its changed rows (decisions Q-65).

`whole` reads kinds in full (the periodic whole-store comparison, a divergence report, the first
read); it becomes the base of each kind. `changed` reads a kind again only where the database's
own log (impl/sqlite/changes.py) names a row: each named key is read again (or found deleted), the
other records stay those of the base, and the kind is put in key order. Every row change fires a
logging trigger except the deletion of a row that a REPLACE conflict removes, which leaves that
row in the base while the table lost it; so every kind read this way is also counted, and a count
that differs from the merged records reads the kind whole. A read therefore equals a whole read of
the same kinds at that moment (tests/test_sqlite_readback.py checks it after every step of the
corpus and of generated traces, and on stores changed underneath), only cheaper: a conformance
step writes a few rows of tables that hold tens.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from . import changes
from .changes import Key
from .snapshot import READERS, Record, SnapshotReader

Snapshot = dict[str, list[Record]]


class ChangedRowsReader:
    def __init__(self, reader: SnapshotReader) -> None:
        self.reader = reader
        self._bases: dict[str, dict[Key, Record]] = {}  # kind → key → record, as of its last read
        self._lists: dict[str, list[Record]] = {}  # kind → its records in key order, as of its last read
        self._pending: dict[str, set[Key]] = {}  # kind → keys logged since its last read

    def _drain(self, conn: sqlite3.Connection) -> None:
        for kind, keys in changes.take(conn).items():
            self._pending.setdefault(kind, set()).update(keys)

    def changed_kinds(self, conn: sqlite3.Connection) -> frozenset[str]:
        """The kinds with a row changed since the kind was last read (by any statement)."""
        self._drain(conn)
        return frozenset(kind for kind, keys in self._pending.items() if keys)

    def whole(self, conn: sqlite3.Connection, kinds: Iterable[str] | None = None) -> Snapshot:
        """`kinds` (all by default) read in full; each becomes its kind's base."""
        self._drain(conn)
        wanted = READERS if kinds is None else kinds
        out: Snapshot = {}
        for kind in READERS:
            if kind not in wanted:
                continue
            spec = READERS[kind]
            rows = conn.execute(spec.sql).fetchall()
            records = self.reader.records(kind, rows)
            self._bases[kind] = dict(zip(map(spec.key, rows), records, strict=True))
            self._lists[kind] = records
            self._pending.pop(kind, None)
            out[kind] = records
        return out

    def changed(self, conn: sqlite3.Connection, kinds: Iterable[str]) -> Snapshot:
        """`kinds` as a whole read would give them now, reading only the rows logged as changed."""
        self._drain(conn)
        out: Snapshot = {}
        for kind in READERS:
            if kind not in kinds:
                continue
            if kind not in self._bases or not self._merge(conn, kind, self._pending.pop(kind, set())):
                self.whole(conn, (kind,))
            out[kind] = self._lists[kind]
        return out

    def _merge(self, conn: sqlite3.Connection, kind: str, keys: set[Key]) -> bool:
        """Read the rows of `keys` again into the kind's base; False if the count says a row went unlogged."""
        spec, base = READERS[kind], self._bases[kind]
        for key in keys:
            row = conn.execute(spec.by_key_sql, key if type(key) is tuple else (key,)).fetchone()
            if row is None:
                base.pop(key, None)
            else:
                base[key] = self.reader.records(kind, [row])[0]
        (count,) = conn.execute(spec.count_sql).fetchone()
        if count != len(base):
            return False
        if keys:
            try:  # key order: text by code point as BINARY collation, integers by value (D-9)
                self._lists[kind] = [base[key] for key in sorted(base)]
            except TypeError:  # keys of mixed types (a NULL in a key column): let SQLite order them
                return False
        return True
