"""Throwaway PostgreSQL servers for the conformance and integration tests.

The PostgreSQL implementation must be exercised against a real server (storage.md §6.2 relies on
SERIALIZABLE, advisory locks and SQLSTATEs), but tests must not depend on a server someone set up
by hand. This module either starts a private, disposable cluster from the locally installed server
binaries or, when ``QLWF_PG_DSN`` is set, reuses an existing server. Both expose the same small
interface (:class:`PgServer`): a conninfo per database, and create/drop of per-test databases.

Security (docs/decisions.md, "Threat model of the throwaway cluster"): the cluster listens on a
Unix socket only, in a 0700 directory of the server's OS user, and every connection needs a random
per-cluster password (scram-sha-256) that exists only in this process's memory.

Nothing is left behind: the postmaster is a child of the process that started it and gets SIGQUIT
(immediate shutdown) when that process dies, even by SIGKILL; clusters live under one directory per
invoking user, named after their owner process, and every cluster start reaps those whose owner is
gone. Databases created on an external server carry their owner in their name and are dropped by
the next run on the same host once the owner is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

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
    "cluster_root",
    "database_owner",
    "find_pg_bin",
    "reap_stale_clusters",
    "server_from_env",
    "stop_all",
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

CLUSTER_ROOT_PREFIX = "qlwf-pg-"
"""Clusters live in ``<tmp>/qlwf-pg-<euid>/<owner pid>-<owner start time>-<random>``."""

_REQUIRED_BINARIES = ("pg_ctl", "initdb", "postgres")
# "nobody" is deliberately not a candidate: it is shared by unrelated daemons, and whoever runs as
# the server's OS user owns the cluster.
_CANDIDATE_USERS = ("postgres", "qlwfpg")
_FALLBACK_USER = "qlwfpg"
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for "/.s.PGSQL.<port>" and NUL
_LOG_TAIL_LINES = 40
_MAX_DBNAME_BYTES = 63  # NAMEDATALEN - 1: longer names would be truncated silently by the server
_CLUSTER_DIR_RE = re.compile(r"^(\d+)-(\d+)-[0-9a-f]{8}$")
_DB_PREFIX_RE = re.compile(r"^qlwf_[a-z0-9]+$")
_DB_NAME_RE = re.compile(r"^qlwf_[a-z0-9]+_([0-9a-f]{8})_(\d+)_(\d+)_[0-9a-f]{8}$")
_PASSWORD_FILE = "pwfile"
_STOP_TIMEOUT_S = 15.0


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
# Process identity: a pid plus its start time names a process even after the pid is reused


def _process_start_time(pid: int) -> int | None:
    """Start time of a live process in clock ticks since boot; None if gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may contain spaces and ")"
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _can_track_processes() -> bool:
    """Without /proc every owner would look dead; reaping is then disabled rather than unsafe."""
    return _process_start_time(os.getpid()) is not None


def _owner_token() -> tuple[int, int]:
    pid = os.getpid()
    return pid, _process_start_time(pid) or 0


def _owner_alive(pid: int, start: int) -> bool:
    return _process_start_time(pid) == start


@functools.cache
def _host_marker() -> str:
    """Names this kernel boot and pid namespace, the only scope in which an owner pid means anything.

    A database carrying another marker belongs to another host, container or boot and is never
    reaped: its owner cannot be checked from here.
    """
    parts = []
    readers: tuple[Callable[[], str], ...] = (lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                                              lambda: os.readlink("/proc/self/ns/pid"))
    for read in readers:
        try:
            parts.append(read())
        except OSError:
            parts.append(socket.gethostname())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


# ---------------------------------------------------------------------------------------------
# OS user handling (initdb and postgres refuse to run as root)


def _user_usable(name: str) -> pwd.struct_passwd | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry if entry.pw_uid != 0 else None


# Where the system's administration tools live; a root shell's PATH usually has them, a minimal
# environment (`env -i`, some CI runners, cron) may not.
_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def system_tool(name: str) -> str | None:
    """The path of an administration tool (useradd, runuser, setpriv), on PATH or in the sbin
    directories."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *_SBIN_DIRS])
    return shutil.which(name, path=path)


def _pick_os_user() -> pwd.struct_passwd:
    """Pick an unprivileged user for the server, creating a system user only as a last resort."""
    override = os.environ.get(OS_USER_ENV)
    names = [override] if override else list(_CANDIDATE_USERS)
    for name in names:
        entry = _user_usable(name)
        if entry is not None:
            return entry
    if override:
        raise PostgresStartupError(f"{OS_USER_ENV}={override!r} is not an existing non-root user")
    useradd = system_tool("useradd")
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


def _as_user(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """Popen arguments that drop root to ``user`` in the child itself (no runuser/su process between,
    so signals and the parent-death signal reach the server tool directly)."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid,
            "extra_groups": os.getgrouplist(user.pw_name, user.pw_gid)}


@functools.cache
def _pdeathsig_prefix() -> tuple[str, ...]:
    """``setpriv --pdeathsig QUIT --``: the postmaster shuts down when its parent dies, even by SIGKILL.

    setpriv runs after the uid change (which would clear the setting) and execs the server, so the
    setting survives; without a setpriv that knows the option, the reaper is the only safety net.
    """
    setpriv = system_tool("setpriv")
    if setpriv is None:
        return ()
    try:
        usage = subprocess.run([setpriv, "--help"], capture_output=True, text=True, timeout=10,
                               check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return (setpriv, "--pdeathsig", "QUIT", "--") if "--pdeathsig" in usage else ()


def _traversable_by_others(path: Path) -> bool:
    """True when every ancestor grants search permission to other users (the server's user)."""
    for directory in [path, *path.parents]:
        try:
            if not directory.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _temp_parent(as_other_user: bool) -> Path:
    """Where the cluster root lives: short enough for a socket path, reachable by the server user."""
    base = Path(tempfile.gettempdir())
    ok = len(str(base)) + 48 < _SOCKET_PATH_MAX and (not as_other_user or _traversable_by_others(base))
    return base if ok else Path("/tmp")


def cluster_root(*, create: bool = False) -> Path:
    """The directory holding this user's clusters, checked to be private (created when asked).

    As root it is 0711 (the server user must traverse it, nobody may list it) and each cluster dir
    inside is 0700 of the server user; otherwise both are 0700 of the invoking user. A root that
    someone else could have planted or could write to is refused, not used.
    """
    euid = os.geteuid()
    root = _temp_parent(euid == 0) / f"{CLUSTER_ROOT_PREFIX}{euid}"
    if not create:
        return root
    mode = 0o711 if euid == 0 else 0o700
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=mode)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != euid or info.st_mode & 0o022:
        raise PostgresStartupError(f"{root} is not a private directory of uid {euid}; remove it")
    root.chmod(mode)  # mkdir's mode is reduced by the umask; also repairs an older, laxer mode
    return root


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"


_PROBLEM_MARKS = ("FATAL:", "PANIC:", "ERROR:", "error:")


def _problem(output: str | None) -> str:
    """What a failed server tool said went wrong, on one line: its error lines (initdb prints a page of
    progress before the one that matters, e.g. `FATAL: could not write to file ...: No space left on
    device`), else its last three lines."""
    lines = [" ".join(line.split()) for line in (output or "").splitlines() if line.strip()]
    picked = [line for line in lines if any(mark in line for mark in _PROBLEM_MARKS)] or lines[-3:]
    return " / ".join(picked) or "(no output)"


def _clean_env(user: pwd.struct_passwd | None = None) -> dict[str, str]:
    """Child env without PG* variables (PGPORT/PGDATA would silently redirect the server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    if user is not None:
        env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return env


# ---------------------------------------------------------------------------------------------
# Stopping a postmaster that may not be our child, and reaping clusters whose owner is gone


def _read_pidfile(data_dir: Path) -> list[str]:
    try:
        return (data_dir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return []


def _is_postmaster_of(pid: int, data_dir: Path) -> bool:
    """The pid in postmaster.pid may be stale and reused: trust it only if it runs in data_dir."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd == str(data_dir.resolve()) and _process_start_time(pid) is not None


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _process_start_time(pid) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _remove_orphaned_shm(key: int, shmid: int, timeout_s: float = 2.0) -> None:
    """Remove the SysV segment a SIGKILLed postmaster leaves behind, once nothing is attached.

    Matching both key and id (from postmaster.pid) makes sure it is that cluster's segment.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        except OSError:
            return
        match = [r.split() for r in rows if r.split()[:2] == [str(key), str(shmid)]]
        if not match:
            return
        if int(match[0][6]) == 0:  # nattch
            ctypes.CDLL(None, use_errno=True).shmctl(shmid, 0, None)  # IPC_RMID
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _stop_postmaster_at(data_dir: Path) -> None:
    """Immediate shutdown (SIGQUIT, then SIGKILL) of whatever postmaster runs in ``data_dir``."""
    lines = _read_pidfile(data_dir)
    if not lines or not lines[0].strip().isdigit():
        return
    pid = int(lines[0])
    if _is_postmaster_of(pid, data_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
        if not _wait_gone(pid, _STOP_TIMEOUT_S):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
    shm = lines[6].split() if len(lines) > 6 else []
    if len(shm) == 2 and all(part.isdigit() for part in shm) and int(shm[1]) >= 0:
        _remove_orphaned_shm(int(shm[0]), int(shm[1]))


def reap_stale_clusters(root: Path | None = None) -> list[Path]:
    """Stop and remove every cluster under ``root`` whose owner process is gone; return their dirs.

    Owners that died by SIGKILL (or a crashed host) leave their directory behind, and their
    postmaster too where it could not be tied to its parent's death.
    """
    root = root if root is not None else cluster_root()
    if not _can_track_processes():
        return []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    reaped = []
    for entry in entries:
        match = _CLUSTER_DIR_RE.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        if _owner_alive(int(match.group(1)), int(match.group(2))):
            continue
        _stop_postmaster_at(entry / "data")
        shutil.rmtree(entry, ignore_errors=True)
        reaped.append(entry)
    return reaped


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
    """A collision-free database name naming its owner: ``<prefix>_<host>_<pid>_<start>_<random>``.

    ``prefix`` is ``qlwf_<purpose>``. The owner part lets the next run on this host drop the
    database when the process that created it died without dropping it (see ``database_owner``).
    """
    if not _DB_PREFIX_RE.match(prefix):
        raise ValueError(f"database name prefix must match {_DB_PREFIX_RE.pattern}: {prefix!r}")
    pid, start = _owner_token()
    name = f"{prefix}_{_host_marker()}_{pid}_{start}_{secrets.token_hex(4)}"
    _check_dbname(name)
    return name


def database_owner(name: str) -> tuple[int, int] | None:
    """(pid, start time) of the process on this host that created ``name``, or None if unknown."""
    match = _DB_NAME_RE.match(name)
    if match is None or match.group(1) != _host_marker():
        return None
    return int(match.group(2)), int(match.group(3))


def _database_is_stale(name: str) -> bool:
    owner = database_owner(name)
    return owner is not None and _can_track_processes() and not _owner_alive(*owner)


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
# Servers of this process, stopped at exit or on an interrupt


_live: dict[int, PgServer] = {}
_live_lock = threading.Lock()


def _register(server: PgServer) -> None:
    with _live_lock:
        _live[id(server)] = server


def _unregister(server: PgServer) -> None:
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


# ---------------------------------------------------------------------------------------------
# Throwaway cluster


class ThrowawayCluster:
    """A private PostgreSQL cluster in a temp dir, reachable only over its Unix socket.

    Durability is off (fsync, synchronous_commit, full_page_writes) because the data is disposable
    and speed matters. Access needs both the 0700 socket directory (owned by the server's OS user,
    which root reaches anyway) and the random superuser password, which lives only in memory and in
    the conninfo :meth:`dsn` hands out. When the process runs as root, initdb and the server run as
    an unprivileged OS user, since PostgreSQL refuses to run as root.
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
        self._password = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid = 0

    # -- paths -------------------------------------------------------------------------------

    @property
    def base_dir(self) -> Path:
        """The cluster's directory under :func:`cluster_root`; it is also the socket directory."""
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

    @property
    def os_user(self) -> str:
        """The OS user the server runs as."""
        return (self._os_user or pwd.getpwuid(os.geteuid())).pw_name

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
        """Reap stale clusters, then initdb + start; on any failure clean up and raise."""
        if self._running:
            return self
        as_root = os.geteuid() == 0
        self._os_user = _pick_os_user() if as_root else None
        root = cluster_root(create=True)
        reap_stale_clusters(root)
        pid, start = _owner_token()
        self._owner_pid = pid
        base = root / f"{pid}-{start}-{secrets.token_hex(4)}"
        base.mkdir(mode=0o700)
        self._base = base
        _register(self)
        try:
            if len(str(base)) > _SOCKET_PATH_MAX - 20:
                raise PostgresStartupError("temp dir path too long for a Unix socket; set TMPDIR")
            if self._os_user is not None:
                os.chown(base, self._os_user.pw_uid, self._os_user.pw_gid)
            self._password = secrets.token_urlsafe(32)
            self._initdb()
            self._configure()
            self._start_server()
            self._check_login()
        except BaseException:
            self.stop()
            raise
        self._running = True
        return self

    def stop(self) -> None:
        """Stop immediately (data is disposable) and remove the cluster dir; safe to call twice.

        A forked child that inherited this object does nothing: the cluster is its parent's.
        """
        if self._base is None or self._owner_pid != os.getpid():
            _unregister(self)
            return
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)  # immediate shutdown
            try:
                proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)
        _stop_postmaster_at(self.data_dir)  # one not started by us (pg_ctl), or a SIGKILL's leftovers
        self._running = False
        self._password = ""
        shutil.rmtree(self._base, ignore_errors=True)
        self._base = None
        _unregister(self)

    # -- client side -------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        """libpq conninfo for ``dbname`` over the Unix socket, as the superuser, with the password."""
        return make_conninfo(
            "", host=str(self.socket_dir), port=str(self.port), user=self.superuser, dbname=dbname,
            password=self._password,
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

    def _run(self, args: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a server tool as the server user; output goes to a file, so a daemon cannot hold a pipe."""
        out_path = self.base_dir / "tool.out"
        with out_path.open("w+") as out:
            proc = subprocess.run(
                args,
                cwd=self.base_dir,
                env=_clean_env(self._os_user),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
                **_as_user(self._os_user),
            )
            out.seek(0)
            return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), None)

    def _write_password_file(self) -> Path:
        """The password for initdb --pwfile: 0600, owned by the server user, deleted right after."""
        path = self.base_dir / _PASSWORD_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            if self._os_user is not None:
                os.fchown(fd, self._os_user.pw_uid, self._os_user.pw_gid)
            os.write(fd, (self._password + "\n").encode())
        finally:
            os.close(fd)
        return path

    def _initdb(self) -> None:
        pwfile = self._write_password_file()
        try:
            args = [
                self._bin("initdb"), "-D", str(self.data_dir), "-U", self.superuser,
                "--auth=scram-sha-256", f"--pwfile={pwfile}",
                "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions",
            ]
            result = self._run(args, timeout=120)
            if result.returncode != 0 and "--no-instructions" in (result.stdout or ""):
                # PostgreSQL < 14 lacks --no-instructions
                args.remove("--no-instructions")
                shutil.rmtree(self.data_dir, ignore_errors=True)
                result = self._run(args, timeout=120)
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise PostgresStartupError(f"initdb failed (exit {result.returncode}) in {self.base_dir}: "
                                       f"{_problem(result.stdout)}")

    def _configure(self) -> None:
        settings = {
            "listen_addresses": "''",  # no TCP at all
            "unix_socket_directories": f"'{self.socket_dir}'",
            "unix_socket_permissions": "0700",
            "password_encryption": "'scram-sha-256'",
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
        # Both files exist after initdb: rewriting them in place keeps the server user's ownership.
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# qlwf throwaway cluster\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        with (self.data_dir / "pg_hba.conf").open("w") as hba:
            hba.write("# qlwf throwaway cluster: Unix socket only, per-cluster password only\n"
                      "local all all scram-sha-256\n")

    def _start_server(self) -> None:
        """Start the postmaster as our child and wait until it accepts connections.

        Not via pg_ctl, which daemonizes it: as our child (from the main thread, whose exit the
        kernel ties the parent-death signal to) it gets SIGQUIT when this process dies.
        """
        prefix = _pdeathsig_prefix() if threading.current_thread() is threading.main_thread() else ()
        with self.log_path.open("ab") as log:
            if self._os_user is not None:  # so the server user's own tools (pg_ctl -l) can append
                os.fchown(log.fileno(), self._os_user.pw_uid, self._os_user.pw_gid)
            self._proc = subprocess.Popen(
                [*prefix, self._bin("postgres"), "-D", str(self.data_dir)],
                cwd=self.base_dir,
                env=_clean_env(self._os_user),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C goes to us; we stop the server
                **_as_user(self._os_user),
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                raise PostgresStartupError(
                    f"postgres exited with {code} during startup; server log tail:\n{_tail(self.log_path)}"
                )
            lines = _read_pidfile(self.data_dir)
            if len(lines) > 7 and lines[7].strip() == "ready":
                return
            if time.monotonic() > deadline:
                raise PostgresStartupError(
                    f"postgres not ready within {self.startup_timeout_s:.0f}s; server log tail:\n"
                    f"{_tail(self.log_path)}"
                )
            time.sleep(0.02)

    def _check_login(self) -> None:
        """Prove the handed-out conninfo works (the socket is reachable and the password accepted)."""
        try:
            with psycopg.connect(self.dsn(), connect_timeout=10) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as e:
            raise PostgresStartupError(f"cannot log in to the new cluster: {e}") from None

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
            raise PostgresStartupError(f"pg_ctl stop -m {mode} failed: {_problem(result.stdout)}")
        if self._proc is not None:  # our child: reap it
            self._proc.wait(_STOP_TIMEOUT_S)
            self._proc = None
        self._running = False

    def restart(self) -> None:
        """Start the server again on the same data directory (after ``crash()`` or ``halt()``)."""
        if self._base is None:
            raise RuntimeError("cluster not started")
        if not self._running:
            self._start_server()  # as our child again, so it keeps the parent-death signal
            self._running = True

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"ThrowawayCluster({state}, socket_dir={self._base}, bin_dir={self.bin_dir})"


# ---------------------------------------------------------------------------------------------
# External server


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
        _register(self)

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(self.base_dsn, dbname=dbname)

    def create_database(self, name: str) -> str:
        if not self._reaped:
            self._reaped = True
            self.reap_stale_databases()
        _create_database(self.dsn(self._admin_db), name)
        self._created.add(name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        _drop_database(self.dsn(self._admin_db), name)
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
            if _database_is_stale(name):
                with contextlib.suppress(psycopg.Error):
                    _drop_database(self.dsn(self._admin_db), name)
                    dropped.append(name)
        return dropped

    def stop(self) -> None:
        """Drop this object's databases, and those of processes gone meanwhile (e.g. pool workers
        killed with us), if this object ever created one."""
        _unregister(self)
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
