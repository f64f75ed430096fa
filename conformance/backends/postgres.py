"""The `postgres` conformance backend: its factory, provisioner and concurrency host (conformance/backends/).

The factory: one database per factory, emptied before every trace.

The server is `provision.server_from_env()` (QLWF_PG_DSN or a throwaway cluster), started once per
process and shared by every factory of that process; processes forked afterwards (`--jobs`) reuse it,
each factory with its own database. A fresh store per trace is a one-round-trip DELETE of every
ql3 table, which is far cheaper than a new database or a TRUNCATE of nine tables.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Iterator

import psycopg
from qlwf.impl.port import Clock, CommandPort, FixedClock
from qlwf.impl.postgres.adapter import PostgresAdapter
from qlwf.impl.postgres.database import ConnectionUnavailable, PgDatabase
from qlwf.impl.postgres.dsn import PostgresUnavailable, check_dsn_env, one_line
from qlwf.impl.sql_adapter import Observer

from ..provision.databases import unique_database_name
from ..provision.external import server_from_env
from ..provision.servers import PgServer, PostgresStartupError
from .registry import BackendLost, BackendMisconfigured, BackendUnavailable, Provisioner

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
        try:
            self.conninfo = self.server.create_database(self.name)
            self.database = PgDatabase(self.conninfo, size=pool_size)
            self.database.apply_schema()
        except (psycopg.OperationalError, ConnectionUnavailable) as e:
            why = _lost(self.server.dsn("postgres"))  # no database of the run yet: ask the server's own
            if why is None:
                raise
            raise BackendLost(why) from e

    def open(self) -> CommandPort:
        self.database.reset()
        return PostgresAdapter(self.database, FixedClock())

    def storage_lost(self) -> str | None:
        """Why the server does not answer a fresh connection, or None (conformance/backends/registry.py)."""
        return _lost(self.conninfo)

    def shutdown(self) -> None:
        try:
            self.database.close()
            self.server.drop_database(self.name)
        finally:  # a server this factory started goes with it, even when the drop failed (a dead server)
            if self._owns_server:
                self.server.stop()


def _lost(conninfo: str) -> str | None:
    from qlwf.conformance.faults.outage import unanswered

    why = unanswered(conninfo)
    return None if why is None else f"the PostgreSQL server stopped answering during the run: {why}"


def stop_shared_server() -> None:
    """Stop the process-wide server now (test sessions); the next `shared_server()` starts a new one."""
    global _shared
    with _lock:
        if _shared is not None and _shared[0] == os.getpid():
            _shared[1].stop()
        _shared = None


class PostgresProvisioner(Provisioner):
    """QLWF_PG_DSN, or a throwaway cluster from the local server binaries (started once per process).

    No binaries and no DSN: BackendUnavailable (skipped locally, a failure under CI=true). A
    malformed or unreachable DSN is unavailable too; a cluster that will not start is misconfigured."""

    required_in_ci = True
    description = "QLWF_PG_DSN, or a throwaway cluster from the local PostgreSQL binaries"

    def prepare(self) -> None:
        with self.guard():
            check_dsn_env()
            shared_server()

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except PostgresUnavailable as e:
            raise BackendUnavailable(one_line(e)) from e
        except PostgresStartupError as e:
            raise BackendMisconfigured(one_line(e)) from e


class PostgresConcurrencyStore:
    """One fresh database of the server for one concurrency run; its port pools K connections."""

    transient: tuple[type[BaseException], ...] = (psycopg.OperationalError,)

    def __init__(self, server: PgServer) -> None:
        from qlwf.conformance.concurrency.harness import StoreSetupFailed

        self._server = server
        self._name = unique_database_name("qlwf_concurrency")
        try:
            self.conninfo = server.create_database(self._name)
        except psycopg.OperationalError as e:
            raise StoreSetupFailed(f"cannot set up the database: {one_line(e)}") from e
        try:
            schema = PgDatabase(self.conninfo, size=1)
            try:
                schema.apply_schema()
            finally:
                schema.close()
        except ConnectionUnavailable as e:
            self._drop()
            raise StoreSetupFailed(f"cannot set up the database: {one_line(e)}") from e

    def port(self, k: int, clock: Clock, variant: str, observer: Observer) -> PostgresAdapter:
        from qlwf.conformance.concurrency.variants import VARIANTS

        chosen = VARIANTS[variant]
        # the port owns its pool of K connections: closing the port closes it
        return PostgresAdapter(self.conninfo, clock, store_factory=chosen.store_factory, isolation=chosen.isolation,
                               pool_size=k, observer=observer)

    def probe(self) -> bool:
        from qlwf.conformance.faults.outage import probe

        return probe(self.conninfo)

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        from qlwf.conformance.faults.outage import quiet_pool

        return quiet_pool()

    def close(self) -> None:
        self._drop()

    def _drop(self) -> None:
        with contextlib.suppress(psycopg.OperationalError):  # the server may be the thing that is gone
            self._server.drop_database(self._name)


class PostgresConcurrencyHost:
    """The `concurrency` capability of the postgres backend (conformance/concurrency/harness.py)."""

    name = "postgres"

    def __init__(self, server: PgServer | None = None) -> None:
        self.server = server if server is not None else shared_server()[0]

    @property
    def variants(self) -> dict[str, str]:
        from qlwf.conformance.concurrency.variants import VARIANTS

        return {name: v.description for name, v in VARIANTS.items()}

    def open_store(self) -> PostgresConcurrencyStore:
        return PostgresConcurrencyStore(self.server)

    def capacity_problem(self, k: int) -> str | None:
        """K pooled connections plus one for the harness (outage probes) must fit the server."""
        from qlwf.conformance.faults.outage import connection_headroom

        headroom = connection_headroom(self.server.dsn())
        if k + 1 > headroom.available:
            return (f"--concurrency {k} needs {k + 1} connections but the server accepts {headroom.available} more "
                    f"({headroom.describe()})")
        return None
