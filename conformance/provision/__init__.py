"""Throwaway PostgreSQL servers for the harness and the tests: part of conformance, not of the product.

Layer: conformance. It may import `qlwf.model`, `qlwf.impl` (here: the DSN variable and the
"no server" error of `qlwf.impl.postgres.dsn`, which the product's DSN check raises too) and
`qlwf.proofs`; nothing of the application (`qlwf.cli.entry`, the gate). impl never imports it.

The PostgreSQL implementation must be exercised against a real server (storage.md §6.2 relies on
SERIALIZABLE, advisory locks and SQLSTATEs), but tests must not depend on a server someone set up
by hand. `server_from_env()` either starts a private, disposable cluster from the locally installed
server binaries or, when ``QLWF_PG_DSN`` is set, reuses an existing server. Both expose the same small
interface (`PgServer`): a conninfo per database, and create/drop of per-run databases.

One module per concern:

* `binaries`  — where pg_ctl, initdb and postgres are (and the system's useradd and setpriv);
* `servers`   — what a server offers (`PgServer`), and the servers of this process, stopped at exit
  or on an interrupt (`stop_all`);
* `security`  — the unprivileged OS user, the private cluster root, the tools' environment, the
  parent-death signal (docs/decisions.md, "Threat model of the throwaway cluster": a Unix socket
  only, in a 0700 directory, and a random per-cluster password that exists only in memory);
* `owners`    — a process named by pid and start time, on this host (who owns a cluster or database);
* `reaping`   — leftovers of owners that are gone: postmasters, shared memory, cluster directories;
* `databases` — per-run databases, named after their owner, created with C collation;
* `cluster`   — `ThrowawayCluster`, its lifecycle, and crash/restart for fault injection;
* `external`  — `ExternalServer` on `QLWF_PG_DSN`, and `server_from_env`, the choice between the two.

Nothing is left behind: the postmaster is a child of the process that started it and gets SIGQUIT
(immediate shutdown) when that process dies, even by SIGKILL; clusters live under one directory per
invoking user, named after their owner process, and every cluster start reaps those whose owner is
gone. Databases created on an external server carry their owner in their name and are dropped by
the next run on the same host once the owner is gone.
"""

from __future__ import annotations

from qlwf.impl.postgres.dsn import DSN_ENV, PostgresUnavailable

from .binaries import BIN_ENV, UNAVAILABLE_MESSAGE, find_pg_bin, system_tool
from .cluster import ThrowawayCluster
from .databases import database_owner, temporary_database, unique_database_name
from .external import ExternalServer, server_from_env
from .reaping import reap_stale_clusters
from .security import cluster_root
from .servers import PgServer, PostgresStartupError, live_servers, stop_all

__all__ = [
    "BIN_ENV",
    "DSN_ENV",
    "UNAVAILABLE_MESSAGE",
    "ExternalServer",
    "PgServer",
    "PostgresStartupError",
    "PostgresUnavailable",
    "ThrowawayCluster",
    "cluster_root",
    "database_owner",
    "find_pg_bin",
    "live_servers",
    "reap_stale_clusters",
    "server_from_env",
    "stop_all",
    "system_tool",
    "temporary_database",
    "unique_database_name",
]
