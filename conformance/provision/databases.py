"""Databases of a run: named after their owner process (so the next run on this host can drop those
whose owner died), created with C collation and dropped even while a leaked connection holds them."""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterator

import psycopg
from psycopg import sql

from .owners import can_track_processes, host_marker, owner_alive, owner_token
from .servers import PgServer

_MAX_DBNAME_BYTES = 63  # NAMEDATALEN - 1: longer names would be truncated silently by the server
_DB_PREFIX_RE = re.compile(r"^qlwf_[a-z0-9]+$")
_DB_NAME_RE = re.compile(r"^qlwf_[a-z0-9]+_([0-9a-f]{8})_(\d+)_(\d+)_[0-9a-f]{8}$")


def _check_dbname(name: str) -> None:
    if not name or len(name.encode()) > _MAX_DBNAME_BYTES:
        raise ValueError(f"database name must be 1..{_MAX_DBNAME_BYTES} bytes: {name!r}")


def create_database_on(admin_dsn: str, name: str) -> None:
    """Create a UTF8 database with C collation, so text order is code-point order (storage.md §1)."""
    _check_dbname(name)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
            ).format(sql.Identifier(name))
        )


def drop_database_on(admin_dsn: str, name: str) -> None:
    """Drop a database even if a leaked connection still uses it (FORCE needs PG 13+)."""
    _check_dbname(name)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        force = sql.SQL(" WITH (FORCE)") if conn.info.server_version >= 130000 else sql.SQL("")
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)) + force)


def unique_database_name(prefix: str = "qlwf_test") -> str:
    """A collision-free database name naming its owner: ``<prefix>_<host>_<pid>_<start>_<random>``.

    ``prefix`` is ``qlwf_<purpose>``. The owner part lets the next run on this host drop the
    database when the process that created it died without dropping it (see ``database_owner``).
    """
    if not _DB_PREFIX_RE.match(prefix):
        raise ValueError(f"database name prefix must match {_DB_PREFIX_RE.pattern}: {prefix!r}")
    pid, start = owner_token()
    name = f"{prefix}_{host_marker()}_{pid}_{start}_{secrets.token_hex(4)}"
    _check_dbname(name)
    return name


def database_owner(name: str) -> tuple[int, int] | None:
    """(pid, start time) of the process on this host that created ``name``, or None if unknown."""
    match = _DB_NAME_RE.match(name)
    if match is None or match.group(1) != host_marker():
        return None
    return int(match.group(2)), int(match.group(3))


def database_is_stale(name: str) -> bool:
    owner = database_owner(name)
    return owner is not None and can_track_processes() and not owner_alive(*owner)


@contextlib.contextmanager
def temporary_database(server: PgServer, prefix: str = "qlwf_test") -> Iterator[str]:
    """Create a fresh database, yield its conninfo, and drop it afterwards."""
    name = unique_database_name(prefix)
    dsn = server.create_database(name)
    try:
        yield dsn
    finally:
        server.drop_database(name)
