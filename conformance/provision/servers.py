"""What a provisioned server offers (`PgServer`), and the servers of this process, stopped at exit
or on an interrupt (`stop_all`; `qlwf` calls it from its signal handler, qlwf/cli/entry.py)."""

from __future__ import annotations

import atexit
import threading
from typing import Protocol, runtime_checkable


class PostgresStartupError(RuntimeError):
    """Binaries exist but the throwaway cluster failed to initialize or start."""


@runtime_checkable
class PgServer(Protocol):
    """What tests need from a server, whether throwaway or external."""

    def dsn(self, dbname: str = "postgres") -> str: ...

    def create_database(self, name: str) -> str: ...

    def drop_database(self, name: str) -> None: ...

    def stop(self) -> None: ...


_live: dict[int, PgServer] = {}
_live_lock = threading.Lock()


def register(server: PgServer) -> None:
    with _live_lock:
        _live[id(server)] = server


def unregister(server: PgServer) -> None:
    with _live_lock:
        _live.pop(id(server), None)


def live_servers() -> frozenset[int]:
    """Identities of the servers this process has running now (for `stop_all(keep=...)`)."""
    with _live_lock:
        return frozenset(_live)


def stop_all(keep: frozenset[int] = frozenset()) -> None:
    """Stop every server this process started (clusters and databases on external servers), except
    those in `keep` (an in-process caller's own servers, running before a command started)."""
    with _live_lock:
        servers = [s for key, s in _live.items() if key not in keep]
    for server in servers:
        server.stop()


atexit.register(stop_all)
