"""The throwaway cluster's security (docs/decisions.md, "Threat model of the throwaway cluster"):
the unprivileged OS user it runs as when we are root, the private directory it lives in, the
environment of its tools, and the parent-death signal that stops it with its owner.

The cluster listens on a Unix socket only, in a 0700 directory of the server's OS user, under one
private root per invoking user (`cluster_root`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .binaries import system_tool
from .servers import PostgresStartupError

OS_USER_ENV = "QLWF_PG_OS_USER"
"""Optional override of the unprivileged OS user that runs the cluster when we are root."""

CLUSTER_ROOT_PREFIX = "qlwf-pg-"
"""Clusters live in ``<tmp>/qlwf-pg-<euid>/<owner pid>-<owner start time>-<random>``."""

# "nobody" is deliberately not a candidate: it is shared by unrelated daemons, and whoever runs as
# the server's OS user owns the cluster.
_CANDIDATE_USERS = ("postgres", "qlwfpg")
_FALLBACK_USER = "qlwfpg"
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for "/.s.PGSQL.<port>" and NUL


def _user_usable(name: str) -> pwd.struct_passwd | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry if entry.pw_uid != 0 else None


def pick_os_user() -> pwd.struct_passwd:
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


def as_user(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """Popen arguments that drop root to ``user`` in the child itself (no runuser/su process between,
    so signals and the parent-death signal reach the server tool directly)."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid,
            "extra_groups": os.getgrouplist(user.pw_name, user.pw_gid)}


@functools.cache
def pdeathsig_prefix() -> tuple[str, ...]:
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
    ok = len(str(base)) + 48 < SOCKET_PATH_MAX and (not as_other_user or _traversable_by_others(base))
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


def clean_env(user: pwd.struct_passwd | None = None) -> dict[str, str]:
    """Child env without PG* variables (PGPORT/PGDATA would silently redirect the server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    if user is not None:
        env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return env
