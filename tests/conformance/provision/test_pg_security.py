"""Only the invoking user (and root) can use a throwaway cluster (issue 10 §1).

The attack this pins: an unprivileged local user found the socket of a cluster started by root,
connected as the superuser without a password and ran ``COPY ... TO PROGRAM``. Each test acts as a
fresh unprivileged OS user (or as the server's own OS user) and checks one barrier: the private
socket directory, the password, the absence of TCP, and that the password never reaches a file.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from qlwf.conformance.provision import (
    UNAVAILABLE_MESSAGE,
    PostgresStartupError,
    ThrowawayCluster,
    cluster_root,
    find_pg_bin,
    system_tool,
)
from support.postgres_leg import missing

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates an OS user and connects as it"),
]

PSQL_CONNECTION_FAILED = 2  # psql(1): "the connection to the server went bad"
NO_PASSFILE = "/nonexistent/qlwf-pgpass"  # no ~/.pgpass may supply a password behind our back


def tool(name: str) -> str:
    """An administration or client tool the barriers are tested with; without it the test cannot act
    as another user (support/postgres_leg.py: a skip, and under CI=true a failure, since a silent
    skip there would drop this file's evidence)."""
    return system_tool(name) or missing(f"needs {name} to act as another OS user")


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    if find_pg_bin() is None:
        missing(UNAVAILABLE_MESSAGE)
    with ThrowawayCluster() as started:
        yield started


@pytest.fixture(scope="module")
def intruder() -> Iterator[pwd.struct_passwd]:
    """A fresh unprivileged OS user, removed afterwards."""
    name = f"qlwfsec{secrets.token_hex(3)}"
    subprocess.run([tool("useradd"), "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    user = pwd.getpwnam(name)
    try:
        yield user
    finally:
        subprocess.run([tool("userdel"), name], check=False, capture_output=True)
        shutil.rmtree(f"/tmp/qlwf-pg-{user.pw_uid}", ignore_errors=True)  # its own (empty) cluster root


def run_as(user: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "QLWF_PG"))}
    return subprocess.run([tool("runuser"), "-u", user, "--", *args], capture_output=True, text=True, timeout=120,
                          cwd="/", env={**clean, **(env or {})}, check=False)


def connect_as(user: str, conninfo: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    """psql as OS user ``user`` with ``conninfo`` (no password in it), the password via PGPASSWORD."""
    psql = tool("psql")
    env = {"PGPASSFILE": NO_PASSFILE, **({"PGPASSWORD": password} if password is not None else {})}
    return run_as(user, psql, "-X", "-w", "-At", "-d", conninfo, "-c", "SELECT current_user", env=env)


@pytest.fixture(scope="module")
def intruder_python(intruder: pwd.struct_passwd) -> Callable[[str], subprocess.CompletedProcess[str]]:
    """Run Python code as ``intruder`` with this interpreter's version and packages.

    The venv's interpreter may live where other users cannot enter (e.g. under /root), so look for
    one of the same version they may run, and give it our site-packages.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    prelude = f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
    candidates = [sys.executable, os.path.realpath(sys.executable), shutil.which(f"python{version}"),
                  f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for candidate in dict.fromkeys(c for c in candidates if c):
        probe = prelude + "import psycopg, qlwf.conformance.provision"
        if run_as(intruder.pw_name, candidate, "-c", probe).returncode == 0:
            return lambda code: run_as(intruder.pw_name, candidate, "-c", prelude + code, env={"TMPDIR": "/tmp"})
    pytest.skip(f"no Python {version} that {intruder.pw_name} may run can import psycopg and qlwf")


def without_password(dsn: str) -> str:
    params = conninfo_to_dict(dsn)
    params.pop("password", None)
    return make_conninfo("", **params)


def password_of(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["password"])


# ---------------------------------------------------------------------------------------------


def test_socket_directory_and_socket_are_private_to_the_server_user(cluster: ThrowawayCluster) -> None:
    server_uid = pwd.getpwnam(cluster.os_user).pw_uid
    assert server_uid != 0
    base = cluster.socket_dir.stat()
    assert (base.st_uid, stat.S_IMODE(base.st_mode)) == (server_uid, 0o700)
    sockets = [p for p in cluster.socket_dir.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)]
    assert len(sockets) == 1
    assert stat.S_IMODE(sockets[0].lstat().st_mode) == 0o700
    # no ancestor lets others rename or replace the way to it, nor list the clusters' names
    for parent in cluster.socket_dir.parents:
        mode = parent.stat().st_mode
        assert not mode & 0o002 or mode & stat.S_ISVTX, parent
    root = cluster.socket_dir.parent.stat()
    assert root.st_uid == 0
    assert not root.st_mode & 0o044  # root of the clusters: traversable, not listable
    with psycopg.connect(cluster.dsn()) as conn:
        assert conn.execute("SHOW unix_socket_permissions").fetchone() == ("0700",)


def test_invoking_user_connects_over_the_socket(cluster: ThrowawayCluster) -> None:
    # root bypasses the 0700 directory of the server user; the conninfo carries the password
    with psycopg.connect(cluster.dsn()) as conn:
        row = conn.execute("SELECT current_user, inet_server_addr(), rolsuper FROM pg_roles "
                           "WHERE rolname = current_user").fetchone()
    assert row == ("qlwf", None, True)
    # the psql probe the other tests use does succeed when both barriers are passed
    result = connect_as("root", without_password(cluster.dsn()), password_of(cluster.dsn()))
    assert (result.returncode, result.stdout.strip()) == (0, "qlwf"), result.stderr


def test_unprivileged_user_cannot_reach_the_socket(cluster: ThrowawayCluster,
                                                   intruder: pwd.struct_passwd) -> None:
    target = without_password(cluster.dsn())
    for password in (None, password_of(cluster.dsn())):  # even knowing the password does not help
        result = connect_as(intruder.pw_name, target, password)
        assert result.returncode == PSQL_CONNECTION_FAILED, result
        assert "Permission denied" in result.stderr, result.stderr
    listing = run_as(intruder.pw_name, "ls", str(cluster.socket_dir.parent))
    assert listing.returncode != 0 and "Permission denied" in listing.stderr


def test_every_login_needs_the_password(cluster: ThrowawayCluster) -> None:
    """Where the socket is reachable (root, the server's own OS user) the password still gates it."""
    target = without_password(cluster.dsn())
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(target, passfile=NO_PASSFILE, connect_timeout=5)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(target, password=secrets.token_urlsafe(32), connect_timeout=5)
    for password in (None, secrets.token_urlsafe(32)):
        result = connect_as(cluster.os_user, target, password)
        assert result.returncode == PSQL_CONNECTION_FAILED, result
        assert "password" in result.stderr and "Permission denied" not in result.stderr, result.stderr
    with psycopg.connect(cluster.dsn()) as conn:
        rules = conn.execute("SELECT type, database, user_name, auth_method, error FROM pg_hba_file_rules"
                             ).fetchall()
        stored = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = current_user").fetchone()
        encryption = conn.execute("SHOW password_encryption").fetchone()
    assert rules == [("local", ["all"], ["all"], "scram-sha-256", None)]
    assert stored is not None and str(stored[0]).startswith("SCRAM-SHA-256$")
    assert encryption == ("scram-sha-256",)


def _inet_listen_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            rows = [line.split() for line in f.readlines()[1:]]
        inodes |= {row[9] for row in rows if row[3] == "0A"}  # 0A = LISTEN
    return inodes


def test_no_tcp_listener(cluster: ThrowawayCluster) -> None:
    with psycopg.connect(cluster.dsn()) as conn:
        assert conn.execute("SELECT setting FROM pg_settings WHERE name = 'listen_addresses'").fetchone() == ("",)
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    fds = Path(f"/proc/{postmaster}/fd")
    sockets = {os.readlink(fd)[len("socket:["):-1] for fd in fds.iterdir()
               if os.readlink(fd).startswith("socket:[")}
    assert sockets, "the postmaster holds at least its Unix socket"
    assert not sockets & _inet_listen_inodes()
    params = {**conninfo_to_dict(cluster.dsn()), "host": "127.0.0.1", "connect_timeout": "5"}
    with pytest.raises(psycopg.OperationalError):  # whatever else may listen there, it is not this cluster
        psycopg.connect(make_conninfo("", **params))


def test_password_lives_only_in_memory(cluster: ThrowawayCluster) -> None:
    password = password_of(cluster.dsn()).encode()
    assert len(password) >= 32
    assert password.decode() not in repr(cluster)
    files = [p for p in cluster.base_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "pg_hba.conf" for p in files)
    assert not any(p.name == "pwfile" for p in files)
    leaks = [p for p in files if password in p.read_bytes()]
    assert leaks == []


def test_each_cluster_gets_its_own_password(cluster: ThrowawayCluster) -> None:
    with ThrowawayCluster(port=5433) as other:
        assert password_of(other.dsn()) != password_of(cluster.dsn())
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(other.dsn(), password=password_of(cluster.dsn()), connect_timeout=5)


NON_ROOT_PROBE = """
import json, os, stat
from qlwf.conformance.provision import ThrowawayCluster
with ThrowawayCluster() as c:
    pid = int((c.data_dir / "postmaster.pid").read_text().split()[0])
    uid = int([l for l in open(f"/proc/{pid}/status") if l.startswith("Uid:")][0].split()[1])
    dirs = {str(p): [p.stat().st_uid, stat.S_IMODE(p.stat().st_mode)] for p in (c.base_dir, c.base_dir.parent)}
    print(json.dumps({"me": os.getuid(), "server": uid, "dirs": dirs, "user": c.os_user, "base": str(c.base_dir)}))
"""


def test_unprivileged_invoker_runs_the_cluster_as_itself(
        intruder: pwd.struct_passwd, intruder_python: Callable[[str], subprocess.CompletedProcess[str]]) -> None:
    if find_pg_bin() is None:
        pytest.skip(UNAVAILABLE_MESSAGE)
    result = intruder_python(NON_ROOT_PROBE)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["me"] == report["server"] == intruder.pw_uid
    assert report["user"] == intruder.pw_name
    assert list(report["dirs"].values()) == [[intruder.pw_uid, 0o700], [intruder.pw_uid, 0o700]]
    assert not Path(report["base"]).exists()


@pytest.fixture()
def temp_parent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short, traversable temp dir made the process's TMPDIR, so cluster roots can be planted in it."""
    parent = Path(tempfile.mkdtemp(prefix="qlwf-sec-", dir="/tmp"))
    parent.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    try:
        yield parent
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.parametrize("planted", ["owned by another user", "writable by others", "a symlink"])
def test_a_planted_cluster_root_is_refused(temp_parent: Path, intruder: pwd.struct_passwd, planted: str) -> None:
    root = temp_parent / f"qlwf-pg-{os.geteuid()}"
    if planted == "a symlink":
        (temp_parent / "elsewhere").mkdir(mode=0o711)
        root.symlink_to(temp_parent / "elsewhere")
    else:
        root.mkdir()
        if planted == "owned by another user":
            os.chown(root, intruder.pw_uid, intruder.pw_gid)
        root.chmod(0o777 if planted == "writable by others" else 0o711)
    with pytest.raises(PostgresStartupError, match="not a private directory"):
        ThrowawayCluster().start()
    assert [p.name for p in root.iterdir()] == []  # nothing was created in it
    assert cluster_root() == root  # the test did plant the root the cluster would use
