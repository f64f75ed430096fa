"""The throwaway cluster: a private PostgreSQL cluster in a temp dir, reachable only over its Unix
socket with a per-cluster password, started as our child and removed on every way out.

Crash and restart (`crash`, `halt`, `restart`) keep the data directory, for fault injection.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg.conninfo import make_conninfo
from qlwf.impl.postgres.dsn import PostgresUnavailable

from .binaries import UNAVAILABLE_MESSAGE, find_pg_bin
from .databases import create_database_on, drop_database_on
from .owners import owner_token
from .reaping import STOP_TIMEOUT_S, read_pidfile, reap_stale_clusters, stop_postmaster_at
from .security import SOCKET_PATH_MAX, as_user, clean_env, cluster_root, pdeathsig_prefix, pick_os_user
from .servers import PostgresStartupError, register, unregister

SUPERUSER = "qlwf"
"""Database superuser created by initdb; fixed so clients never depend on the OS user name."""
_LOG_TAIL_LINES = 40
_PASSWORD_FILE = "pwfile"


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
        self._os_user = pick_os_user() if as_root else None
        root = cluster_root(create=True)
        reap_stale_clusters(root)
        pid, start = owner_token()
        self._owner_pid = pid
        base = root / f"{pid}-{start}-{secrets.token_hex(4)}"
        base.mkdir(mode=0o700)
        self._base = base
        register(self)
        try:
            if len(str(base)) > SOCKET_PATH_MAX - 20:
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
            unregister(self)
            return
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)  # immediate shutdown
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)
        stop_postmaster_at(self.data_dir)  # one not started by us (pg_ctl), or a SIGKILL's leftovers
        self._running = False
        self._password = ""
        shutil.rmtree(self._base, ignore_errors=True)
        self._base = None
        unregister(self)

    # -- client side -------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        """libpq conninfo for ``dbname`` over the Unix socket, as the superuser, with the password."""
        return make_conninfo(
            "", host=str(self.socket_dir), port=str(self.port), user=self.superuser, dbname=dbname,
            password=self._password,
        )

    def create_database(self, name: str) -> str:
        """Create ``name`` and return its conninfo."""
        create_database_on(self.dsn("postgres"), name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        drop_database_on(self.dsn("postgres"), name)

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
                env=clean_env(self._os_user),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
                **as_user(self._os_user),
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
        prefix = pdeathsig_prefix() if threading.current_thread() is threading.main_thread() else ()
        with self.log_path.open("ab") as log:
            if self._os_user is not None:  # so the server user's own tools (pg_ctl -l) can append
                os.fchown(log.fileno(), self._os_user.pw_uid, self._os_user.pw_gid)
            self._proc = subprocess.Popen(
                [*prefix, self._bin("postgres"), "-D", str(self.data_dir)],
                cwd=self.base_dir,
                env=clean_env(self._os_user),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C goes to us; we stop the server
                **as_user(self._os_user),
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                raise PostgresStartupError(
                    f"postgres exited with {code} during startup; server log tail:\n{_tail(self.log_path)}"
                )
            lines = read_pidfile(self.data_dir)
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
            self._proc.wait(STOP_TIMEOUT_S)
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
