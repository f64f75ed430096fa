"""The `sqlite` conformance backend's factory: a private in-memory SQLite database per trace."""

from __future__ import annotations

from typing import Any

from qlwf.impl.port import CommandPort


class SqliteBackend:
    """A private in-memory SQLite database per trace (storage.md §6.1): a closed trace's store comes
    back emptied for the next one, keeping its compiled statements (decisions Q-63)."""

    def __init__(self, path: str = ":memory:", *, reuse: bool = True) -> None:
        self.path = path
        self.reuse = reuse and path == ":memory:"
        self._pool: Any = None

    def open(self) -> CommandPort:
        from qlwf.impl.sqlite.adapter import SqliteAdapter

        if not self.reuse:
            return SqliteAdapter(self.path)
        if self._pool is None:
            from qlwf.impl.sqlite.memory import MemoryStorePool

            self._pool = MemoryStorePool()
        return SqliteAdapter(pool=self._pool)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
