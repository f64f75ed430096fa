"""The `concurrency` capability of the sqlite backend (conformance/concurrency/harness.py).

K worker threads share one `SqliteAdapter` on a file database in WAL mode: its FIFO operation
authority serializes them (storage.md §6.1), so the check proves that the history the authority
commits, interleaved as the threads raced for it, is a legal serial model behaviour and that every
logged outcome is the model's. The only variant is the backend as specified: with one writer there
is no lock a broken variant could leave out.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from sqlite3 import Connection
from typing import ClassVar

from qlwf.impl.port import Clock
from qlwf.impl.sql_adapter import Observer

from .adapter import SqliteAdapter
from .store import SqliteStore


class SqliteConcurrencyStore:
    transient: tuple[type[BaseException], ...] = ()  # a local file does not go away

    def __init__(self, store_factory: Callable[[Connection], SqliteStore] = SqliteStore) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="qlwf-concurrency-"))
        self.store_factory = store_factory

    def port(self, k: int, clock: Clock, variant: str, observer: Observer) -> SqliteAdapter:
        return SqliteAdapter(self.directory / "store.db", clock, self.store_factory, observer=observer)

    def probe(self) -> bool:
        return True

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class SqliteConcurrencyHost:
    name = "sqlite"
    variants: ClassVar[dict[str, str]] = {
        "correct": "the SQLite backend as specified (one writer behind the FIFO authority)"}

    def __init__(self, store_factory: Callable[[Connection], SqliteStore] = SqliteStore) -> None:
        self.store_factory = store_factory  # tests plant a broken store here

    def open_store(self) -> SqliteConcurrencyStore:
        return SqliteConcurrencyStore(self.store_factory)

    def capacity_problem(self, k: int) -> str | None:
        from qlwf.model import tables as T

        if k > T.SQLITE_MAX_PENDING_OPERATIONS:
            return f"--concurrency {k} exceeds the {T.SQLITE_MAX_PENDING_OPERATIONS} operations the authority queues"
        return None
