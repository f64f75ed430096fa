"""An existing server (`QLWF_PG_DSN`) on which only a run's databases are created, and the choice
between it and a throwaway cluster (`server_from_env`)."""

from __future__ import annotations

import contextlib
import os

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from qlwf.impl.postgres.dsn import DSN_ENV, PostgresUnavailable

from .binaries import UNAVAILABLE_MESSAGE, find_pg_bin
from .cluster import ThrowawayCluster
from .databases import create_database_on, database_is_stale, drop_database_on
from .servers import register, unregister


class ExternalServer:
    """An existing server named by a conninfo/URI; only per-test databases are created on it.

    ``stop()`` never touches the server itself: it drops the databases this object created and
    that are still present, so an interrupted run does not leave them behind. The first creation
    drops databases of earlier runs on this host whose owner process is gone (``database_owner``).
    """

    def __init__(self, base_dsn: str) -> None:
        self.base_dsn = base_dsn
        params = conninfo_to_dict(base_dsn)
        self._admin_db = str(params.get("dbname") or "postgres")
        self._created: set[str] = set()
        self._reaped = False
        self._owner_pid = os.getpid()
        register(self)

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(self.base_dsn, dbname=dbname)

    def create_database(self, name: str) -> str:
        if not self._reaped:
            self._reaped = True
            self.reap_stale_databases()
        create_database_on(self.dsn(self._admin_db), name)
        self._created.add(name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        drop_database_on(self.dsn(self._admin_db), name)
        self._created.discard(name)

    def reap_stale_databases(self) -> list[str]:
        """Drop the qlwf databases whose creator ran on this host and is gone; return their names.

        Best effort: a database this role may not drop, or an unreachable server, is left alone.
        """
        try:
            with psycopg.connect(self.dsn(self._admin_db), autocommit=True, connect_timeout=10) as conn:
                rows = conn.execute(r"SELECT datname FROM pg_database WHERE datname LIKE 'qlwf\_%'").fetchall()
        except psycopg.Error:
            return []
        dropped = []
        for (name,) in rows:
            if database_is_stale(name):
                with contextlib.suppress(psycopg.Error):
                    drop_database_on(self.dsn(self._admin_db), name)
                    dropped.append(name)
        return dropped

    def stop(self) -> None:
        """Drop this object's databases, and those of processes gone meanwhile (e.g. pool workers
        killed with us), if this object ever created one."""
        unregister(self)
        if self._owner_pid != os.getpid():
            return
        for name in sorted(self._created):
            with contextlib.suppress(psycopg.Error):
                self.drop_database(name)
        if self._reaped:
            self.reap_stale_databases()

    def __repr__(self) -> str:
        return f"ExternalServer(admin_db={self._admin_db!r})"


def server_from_env() -> ExternalServer | ThrowawayCluster:
    """The server tests should use: ``$QLWF_PG_DSN`` if set, else a started throwaway cluster.

    Raises PostgresUnavailable (one-line message) when neither is possible, so callers can skip
    or fail with a clear reason instead of a stack trace.
    """
    dsn = os.environ.get(DSN_ENV, "").strip()
    if dsn:
        return ExternalServer(dsn)
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise PostgresUnavailable(UNAVAILABLE_MESSAGE)
    return ThrowawayCluster(bin_dir=bin_dir).start()
