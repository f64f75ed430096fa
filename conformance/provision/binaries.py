"""Where the PostgreSQL server binaries are, and the system's administration tools (useradd, setpriv).

pg_ctl, initdb and postgres come from `$QLWF_PG_BIN`, PATH, or the newest versioned install directory;
the administration tools from PATH and then the sbin directories, which a minimal environment's PATH
lacks.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

BIN_ENV = "QLWF_PG_BIN"
"""Optional override of the directory holding pg_ctl, initdb and postgres."""

UNAVAILABLE_MESSAGE = (
    "no PostgreSQL server binaries found (install the postgresql package or set QLWF_PG_DSN)"
)

_REQUIRED_BINARIES = ("pg_ctl", "initdb", "postgres")


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


# Where the system's administration tools live; a root shell's PATH usually has them, a minimal
# environment (`env -i`, some CI runners, cron) may not.
_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def system_tool(name: str) -> str | None:
    """The path of an administration tool (useradd, runuser, setpriv), on PATH or in the sbin
    directories."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *_SBIN_DIRS])
    return shutil.which(name, path=path)
