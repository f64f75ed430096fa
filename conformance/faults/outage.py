"""Storage outages during a concurrent run: a bounded reconnection window, then a verdict.

A worker whose command fails with a storage-level Unavailable (no connection, or the connection
died) asks `Reachability.wait()` whether the server still answers. One failed transaction on a
healthy server (a killed backend) costs one probe. A server that does not answer starts an outage:
every worker waits, one probe at a time, until the server answers again (the outage is recorded
with its duration and the run goes on; its verdict still rests on the replayed history) or until
the reconnection window is spent — then the run stops with `StorageUnreachable` instead of
retrying forever.

`connection_headroom` tells up front how many more connections the server accepts, so a K that
cannot be served is refused before any work starts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
from qlwf.impl.postgres.dsn import PostgresUnavailable, one_line

# The Unavailable reasons a lost or refused connection produces (storage.md §6.2).
OUTAGE_REASONS = frozenset({"storage_unreachable", "storage_error", "scan_failed"})
PROBE_TIMEOUT_S = 2  # libpq's minimum connect_timeout
PROBE_INTERVAL_S = 0.2


@contextlib.contextmanager
def quiet_pool() -> Iterator[None]:
    """The pool logs a warning per failed reconnection and per discarded connection; harnesses that
    break connections on purpose report outages themselves."""
    logger = logging.getLogger("psycopg.pool")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class StorageUnreachable(Exception):
    """The server did not answer within the reconnection window."""


@dataclass(frozen=True)
class Outage:
    started_s: float  # seconds after the run started
    seconds: float


def unanswered(conninfo: str) -> str | None:
    """None when a fresh connection to `conninfo` can run a statement, else the error, on one line."""
    try:
        with psycopg.connect(conninfo, connect_timeout=PROBE_TIMEOUT_S, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return None
    except psycopg.Error as e:
        return one_line(e)


def probe(conninfo: str) -> bool:
    """True when a fresh connection to `conninfo` can run a statement."""
    return unanswered(conninfo) is None


class Reachability:
    """Outage bookkeeping shared by the workers of one run (thread-safe)."""

    def __init__(self, conninfo: str, window_s: float, *, on_event: Callable[[str], None] | None = None,
                 probe_fn: Callable[[str], bool] = probe) -> None:
        self.conninfo = conninfo
        self.window_s = window_s
        self.on_event = on_event
        self.outages: list[Outage] = []
        self.gave_up: str | None = None  # the reason, once the window is spent
        self._probe = probe_fn
        self._origin = time.monotonic()
        self._down_since: float | None = None
        self._lock = threading.Lock()  # state
        self._probing = threading.Lock()  # one probe connection at a time (connection headroom)

    def wait(self) -> None:
        """Return once the server answers; raise StorageUnreachable when the window is spent."""
        while True:
            with self._lock:
                if self.gave_up is not None:
                    raise StorageUnreachable(self.gave_up)
                down_since = self._down_since
            if down_since is not None and time.monotonic() - down_since >= self.window_s:
                self._give_up(down_since)
            with self._probing:
                up = self._probe(self.conninfo)
            if up:
                self._recovered()
                return
            with self._lock:
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    self._say(f"storage unreachable at {self._down_since - self._origin:.1f} s; "
                              f"reconnecting for up to {self.window_s:g} s")
            time.sleep(PROBE_INTERVAL_S)

    def _recovered(self) -> None:
        with self._lock:
            if self._down_since is None:
                return
            now = time.monotonic()
            outage = Outage(self._down_since - self._origin, now - self._down_since)
            self.outages.append(outage)
            self._down_since = None
        self._say(f"storage reachable again after {outage.seconds:.1f} s")

    def _give_up(self, down_since: float) -> None:
        with self._lock:
            if self.gave_up is None:
                silent = time.monotonic() - down_since
                self.gave_up = f"no answer from the server for {silent:.1f} s (reconnect window {self.window_s:g} s)"
                self._say(f"storage unreachable: {self.gave_up}")
            raise StorageUnreachable(self.gave_up)

    def _say(self, message: str) -> None:
        # An interrupted run disables warnings while it tears the server down (qlwf/cli/entry.py): the
        # outage that teardown causes is not news, and the interrupt's one line must stay the only one.
        if self.on_event is not None and logging.root.manager.disable < logging.WARNING:
            self.on_event(message)


@dataclass(frozen=True)
class Headroom:
    max_connections: int
    reserved: int  # superuser_reserved_connections
    in_use: int  # other client connections

    @property
    def available(self) -> int:
        return self.max_connections - self.reserved - self.in_use

    def describe(self) -> str:
        return (f"max_connections {self.max_connections} − superuser_reserved_connections {self.reserved} − "
                f"{self.in_use} in use = {self.available}")


_HEADROOM_SQL = ("SELECT current_setting('max_connections')::int, "
                 "current_setting('superuser_reserved_connections')::int, "
                 "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                 "AND pid <> pg_backend_pid())::int")


def connection_headroom(conninfo: str) -> Headroom:
    """How many more client connections the server accepts (this probe's own connection excluded).

    Raises PostgresUnavailable when the server cannot be asked."""
    try:
        with psycopg.connect(conninfo, connect_timeout=10, autocommit=True) as conn:
            row = conn.execute(_HEADROOM_SQL).fetchone()
    except psycopg.Error as e:
        raise PostgresUnavailable(f"cannot read the server's connection limit: {one_line(e)}") from None
    assert row is not None
    return Headroom(*row)
