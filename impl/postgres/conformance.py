"""The `postgres` conformance backend: one database per factory, emptied before every trace.

The server is `server.server_from_env()` (QLWF_PG_DSN or a throwaway cluster), started once per
process and shared by every factory of that process; processes forked afterwards (`--jobs`) reuse it,
each factory with its own database. A fresh store per trace is a one-round-trip DELETE of every
ql3 table, which is far cheaper than a new database or a TRUNCATE of nine tables.
"""

from __future__ import annotations

import multiprocessing
import os
import threading

from qlwf.impl.port import CommandPort, FixedClock

from .adapter import PostgresAdapter
from .database import PgDatabase
from .server import PgServer, server_from_env, unique_database_name

_lock = threading.Lock()
_shared: tuple[int, PgServer] | None = None  # (pid that started it, server)


def shared_server() -> tuple[PgServer, bool]:
    """The process-wide server and whether the caller must stop it itself.

    The main process keeps its server until exit (the cluster stops itself atexit). A worker
    process of a pool exits without running atexit handlers, so a server it had to start is owned
    by the factory that started it.
    """
    global _shared
    with _lock:
        if _shared is not None:
            return _shared[1], False
        server = server_from_env()
        if multiprocessing.parent_process() is not None:
            return server, True
        _shared = (os.getpid(), server)
        return server, False


class PostgresBackend:
    """BackendFactory of `qlwf conform --backend postgres`."""

    def __init__(self, pool_size: int = 2) -> None:
        self.server, self._owns_server = shared_server()
        self.name = unique_database_name("qlwf_conform")
        self.database = PgDatabase(self.server.create_database(self.name), size=pool_size)
        self.database.apply_schema()

    def open(self) -> CommandPort:
        self.database.reset()
        return PostgresAdapter(self.database, FixedClock())

    def shutdown(self) -> None:
        self.database.close()
        self.server.drop_database(self.name)
        if self._owns_server:
            self.server.stop()


def stop_shared_server() -> None:
    """Stop the process-wide server now (test sessions); the next `shared_server()` starts a new one."""
    global _shared
    with _lock:
        if _shared is not None and _shared[0] == os.getpid():
            _shared[1].stop()
        _shared = None
