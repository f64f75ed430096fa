"""Throwaway PostgreSQL servers for the conformance and integration tests.

The PostgreSQL implementation must be exercised against a real server (storage.md §6.2 relies on
SERIALIZABLE, advisory locks and SQLSTATEs), but tests must not depend on a server someone set up
by hand. This module either starts a private, disposable cluster from the locally installed server
binaries (Unix socket only, durability off, trust auth) or, when ``QLWF_PG_DSN`` is set, reuses an
existing server. Both expose the same small interface (:class:`PgServer`): a conninfo per database,
and create/drop of per-test databases.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = [
    "DSN_ENV",
    "ExternalServer",
    "PgServer",
    "PostgresStartupError",
    "PostgresUnavailable",
    "ThrowawayCluster",
    "find_pg_bin",
    "server_from_env",
    "temporary_database",
    "unique_database_name",
]

DSN_ENV = "QLWF_PG_DSN"
"""Environment variable naming an existing server to use instead of a throwaway cluster."""

BIN_ENV = "QLWF_PG_BIN"
"""Optional override of the directory holding pg_ctl, initdb and postgres."""

OS_USER_ENV = "QLWF_PG_OS_USER"
"""Optional override of the unprivileged OS user that runs the cluster when we are root."""

SUPERUSER = "qlwf"
"""Database superuser created by initdb; fixed so clients never depend on the OS user name."""

UNAVAILABLE_MESSAGE = (
    "no PostgreSQL server binaries found (install the postgresql package or set QLWF_PG_DSN)"
)

_REQUIRED_BINARIES = ("pg_ctl", "initdb", "postgres")
_FALLBACK_USER = "qlwfpg"
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for "/.s.PGSQL.<port>" and NUL
_LOG_TAIL_LINES = 40
_MAX_DBNAME_BYTES = 63  # NAMEDATALEN - 1: longer names would be truncated silently by the server


class PostgresUnavailable(RuntimeError):
    """No server can be provided: no binaries were found and no DSN was configured."""


class PostgresStartupError(RuntimeError):
    """Binaries exist but the throwaway cluster failed to initialize or start."""


@runtime_checkable
class PgServer(Protocol):
    """What tests need from a server, whether throwaway or external."""

    def dsn(self, dbname: str = "postgres") -> str: ...

    def create_database(self, name: str) -> str: ...

    def drop_database(self, name: str) -> None: ...

    def stop(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# Binary discovery


def _has_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in _REQUIRED_BINARIES)


def _version_key(directory: Path) -> tuple[int, ...]:
    """Order versioned install dirs (``.../15/bin``, ``/usr/pgsql-16/bin``) numerically."""
    match = re.search(r"(\d+(?:\.\d+)*)", directory.parent.name)
    return tuple(int(part) for part in match.group(1).split(".")) if match else (-1,)


def find_pg_bin() -> Path | None:
    """Return the directory holding pg_ctl, initdb and postgres, or None.

    pg_ctl locates ``postgres`` next to its own resolved path, so all three must share a directory.
    Order: ``$QLWF_PG_BIN``, PATH, then the newest ``/usr/lib/postgresql/*/bin`` (Debian) or
    ``/usr/pgsql-*/bin`` (RPM layouts).
    """
    override = os.environ.get(BIN_ENV)
    if override and _has_binaries(Path(override)):
        return Path(override)
    found = [shutil.which(name) for name in _REQUIRED_BINARIES]
    if all(found):
        dirs = {Path(p).parent for p in found if p}
        if len(dirs) == 1:
            return dirs.pop()
        resolved = Path(os.path.realpath(found[0] or "")).parent
        if _has_binaries(resolved):
            return resolved
    candidates = [
        p
        for pattern in ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin")
        for p in Path("/").glob(pattern.lstrip("/"))
        if _has_binaries(p)
    ]
    return max(candidates, key=_version_key) if candidates else None


# ---------------------------------------------------------------------------------------------
# OS user handling (initdb and postgres refuse to run as root)


def _user_usable(name: str) -> pwd.struct_passwd | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry if entry.pw_uid != 0 else None


def _pick_os_user() -> pwd.struct_passwd:
    """Pick an unprivileged user for the server, creating a system user only as a last resort."""
    override = os.environ.get(OS_USER_ENV)
    names = [override] if override else ["postgres", _FALLBACK_USER, "nobody"]
    for name in names:
        entry = _user_usable(name)
        if entry is not None:
            return entry
    if override:
        raise PostgresStartupError(f"{OS_USER_ENV}={override!r} is not an existing non-root user")
    useradd = shutil.which("useradd")
    if useradd is None:
        raise PostgresStartupError("running as root, no unprivileged user found and no useradd")
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _FALLBACK_USER],
        capture_output=True,
        text=True,
        check=False,
    )
    entry = _user_usable(_FALLBACK_USER)
    if entry is None:
        raise PostgresStartupError(f"useradd {_FALLBACK_USER} failed: {result.stderr.strip()}")
    return entry


def _traversable_by_others(path: Path) -> bool:
    """True when every ancestor grants search permission to other users (the server's user)."""
    for directory in [path, *path.parents]:
        try:
            if not directory.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _temp_parent(as_other_user: bool) -> str | None:
    """Choose where mkdtemp creates the cluster dir: short enough for a socket, reachable."""
    base = Path(tempfile.gettempdir())
    ok = len(str(base)) + 32 < _SOCKET_PATH_MAX and (not as_other_user or _traversable_by_others(base))
    return None if ok else "/tmp"


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"


def _clean_env() -> dict[str, str]:
    """Child env without PG* variables (PGPORT/PGDATA would silently redirect the server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


# ---------------------------------------------------------------------------------------------
# Database helpers shared by both server kinds


def _check_dbname(name: str) -> None:
    if not name or len(name.encode()) > _MAX_DBNAME_BYTES:
        raise ValueError(f"database name must be 1..{_MAX_DBNAME_BYTES} bytes: {name!r}")


def _create_database(admin_dsn: str, name: str) -> None:
    """Create a UTF8 database with C collation, so text order is code-point order (storage.md §1)."""
    _check_dbname(name)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
            ).format(sql.Identifier(name))
        )


def _drop_database(admin_dsn: str, name: str) -> None:
    """Drop a database even if a leaked connection still uses it (FORCE needs PG 13+)."""
    _check_dbname(name)
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        force = sql.SQL(" WITH (FORCE)") if conn.info.server_version >= 130000 else sql.SQL("")
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)) + force)


def unique_database_name(prefix: str = "qlwf_test") -> str:
    """A collision-free database name, so parallel tests never share a database."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@contextlib.contextmanager
def temporary_database(server: PgServer, prefix: str = "qlwf_test") -> Iterator[str]:
    """Create a fresh database, yield its conninfo, and drop it afterwards."""
    name = unique_database_name(prefix)
    dsn = server.create_database(name)
    try:
        yield dsn
    finally:
        server.drop_database(name)


# ---------------------------------------------------------------------------------------------
# Throwaway cluster


class ThrowawayCluster:
    """A private PostgreSQL cluster in a temp dir, reachable only over its Unix socket.

    Durability is off (fsync, synchronous_commit, full_page_writes) because the data is disposable
    and speed matters; auth is trust because nothing but the socket in a private dir can reach it.
    When the process runs as root, initdb and the server run as an unprivileged OS user, since
    PostgreSQL refuses to run as root.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        port: int = 5432,
        superuser: str = SUPERUSER,
        max_connections: int = 100,
        startup_timeout_s: float = 60.0,
        durable: bool = False,
    ) -> None:
        found = bin_dir or find_pg_bin()
        if found is None:
            raise PostgresUnavailable(UNAVAILABLE_MESSAGE)
        self.bin_dir: Path = found
        self.port = port
        self.superuser = superuser
        self.max_connections = max_connections
        self.startup_timeout_s = startup_timeout_s
        self.durable = durable  # fsync, synchronous_commit and full_page_writes on (crash tests)
        self._base: Path | None = None
        self._running = False
        self._os_user: pwd.struct_passwd | None = None

    # -- paths -------------------------------------------------------------------------------

    @property
    def base_dir(self) -> Path:
        """The temp dir; it is also the socket directory."""
        if self._base is None:
            raise RuntimeError("cluster not started")
        return self._base

    @property
    def socket_dir(self) -> Path:
        return self.base_dir

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "server.log"

    @property
    def running(self) -> bool:
        return self._running

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ThrowawayCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ThrowawayCluster:
        """initdb + pg_ctl start; on any failure clean up and raise PostgresStartupError."""
        if self._running:
            return self
        as_root = os.geteuid() == 0
        self._os_user = _pick_os_user() if as_root else None
        self._base = Path(tempfile.mkdtemp(prefix="qlwf-pg-", dir=_temp_parent(as_root)))
        if len(str(self._base)) > _SOCKET_PATH_MAX - 20:
            self._cleanup_dir()
            raise PostgresStartupError("temp dir path too long for a Unix socket; set TMPDIR")
        if self._os_user is not None:
            os.chown(self._base, self._os_user.pw_uid, self._os_user.pw_gid)
            # root reaches the socket anyway; 0711 also lets other clients reach it by name
            self._base.chmod(0o711)
        atexit.register(self.stop)
        try:
            self._initdb()
            self._configure()
            self._pg_ctl_start()
        except BaseException:
            self.stop()
            raise
        self._running = True
        return self

    def stop(self) -> None:
        """Stop immediately (data is disposable) and remove the temp dir; safe to call twice."""
        atexit.unregister(self.stop)
        if self._base is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                self._run([self._bin("pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w",
                           "stop"], timeout=30)
        self._running = False
        self._cleanup_dir()

    def _cleanup_dir(self) -> None:
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    # -- client side -------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        """libpq conninfo for ``dbname`` over the Unix socket, as the fixed superuser."""
        return make_conninfo(
            "", host=str(self.socket_dir), port=str(self.port), user=self.superuser, dbname=dbname
        )

    def create_database(self, name: str) -> str:
        """Create ``name`` and return its conninfo."""
        _create_database(self.dsn("postgres"), name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        _drop_database(self.dsn("postgres"), name)

    # -- internals ---------------------------------------------------------------------------

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _wrap(self, args: list[str]) -> list[str]:
        """Run as the unprivileged user when we are root (initdb/postgres refuse root)."""
        if self._os_user is None:
            return args
        user = self._os_user.pw_name
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", user, "--", *args]
        su = shutil.which("su")
        if su is None:
            raise PostgresStartupError("running as root but neither runuser nor su is available")
        return [su, "-s", "/bin/sh", user, "-c", shlex.join(args)]

    def _run(self, args: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a server tool; output goes to a file, not a pipe, so a daemon cannot hold it open."""
        out_path = self.base_dir / "tool.out"
        with out_path.open("w+") as out:
            proc = subprocess.run(
                self._wrap(args),
                cwd=self.base_dir,
                env=_clean_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
            )
            out.seek(0)
            return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), None)

    def _initdb(self) -> None:
        args = [
            self._bin("initdb"), "-D", str(self.data_dir), "-U", self.superuser, "-A", "trust",
            "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions",
        ]
        result = self._run(args, timeout=120)
        if result.returncode != 0 and "--no-instructions" in (result.stdout or ""):
            # PostgreSQL < 14 lacks --no-instructions
            args.remove("--no-instructions")
            shutil.rmtree(self.data_dir, ignore_errors=True)
            result = self._run(args, timeout=120)
        if result.returncode != 0:
            raise PostgresStartupError(f"initdb failed (exit {result.returncode}):\n{result.stdout}")

    def _configure(self) -> None:
        settings = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "port": str(self.port),
            "max_connections": str(self.max_connections),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "64MB",
            # SERIALIZABLE tests take many predicate locks; the defaults can run out of slots
            "max_locks_per_transaction": "128",
            "max_pred_locks_per_transaction": "256",
            "timezone": "'UTC'",
            "logging_collector": "off",
        }
        if self.durable:
            settings.update(fsync="on", synchronous_commit="on", full_page_writes="on")
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# qlwf throwaway cluster\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _pg_ctl_start(self) -> None:
        timeout = max(1, int(self.startup_timeout_s))
        args = [
            self._bin("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path),
            "-w", "-t", str(timeout), "start",
        ]
        try:
            result = self._run(args, timeout=timeout + 15)
        except subprocess.TimeoutExpired:
            raise PostgresStartupError(
                f"pg_ctl start did not return within {timeout + 15}s; server log tail:\n"
                f"{_tail(self.log_path)}"
            ) from None
        if result.returncode != 0:
            raise PostgresStartupError(
                f"pg_ctl start failed (exit {result.returncode}): {(result.stdout or '').strip()}\n"
                f"server log tail:\n{_tail(self.log_path)}"
            )

    # -- crash and restart (fault injection) ----------------------------------------------------
    # Kept apart from the lifecycle above: the data directory survives, so a restart runs
    # PostgreSQL's crash recovery on it.

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every backend dies at once, nothing is flushed or checkpointed."""
        self.halt("immediate")

    def halt(self, mode: str = "fast") -> None:
        """Stop the server but keep the data directory (``restart()`` brings it back)."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"unknown shutdown mode {mode!r}")
        if self._base is None:
            raise RuntimeError("cluster not started")
        result = self._run([self._bin("pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop"], timeout=60)
        if result.returncode != 0:
            raise PostgresStartupError(f"pg_ctl stop -m {mode} failed: {(result.stdout or '').strip()}")
        self._running = False

    def restart(self) -> None:
        """Start the server again on the same data directory (after ``crash()`` or ``halt()``)."""
        if self._base is None:
            raise RuntimeError("cluster not started")
        if not self._running:
            self._pg_ctl_start()
            self._running = True

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"ThrowawayCluster({state}, socket_dir={self._base}, bin_dir={self.bin_dir})"


# ---------------------------------------------------------------------------------------------
# External server


class ExternalServer:
    """An existing server named by a conninfo/URI; only per-test databases are created on it.

    ``stop()`` never touches the server itself: it drops the databases this object created and
    that are still present, so an interrupted run does not leave them behind.
    """

    def __init__(self, base_dsn: str) -> None:
        self.base_dsn = base_dsn
        params = conninfo_to_dict(base_dsn)
        self._admin_db = str(params.get("dbname") or "postgres")
        self._created: set[str] = set()
        atexit.register(self.stop)

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(self.base_dsn, dbname=dbname)

    def create_database(self, name: str) -> str:
        _create_database(self.dsn(self._admin_db), name)
        self._created.add(name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        _drop_database(self.dsn(self._admin_db), name)
        self._created.discard(name)

    def stop(self) -> None:
        atexit.unregister(self.stop)
        for name in sorted(self._created):
            with contextlib.suppress(psycopg.Error):
                self.drop_database(name)

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
