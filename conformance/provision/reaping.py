"""Leftovers of owners that are gone: a postmaster that may not be our child is stopped, its shared
memory removed, and every cluster under the root whose owner process died (even by SIGKILL) is
stopped and deleted when the next cluster starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import time
from pathlib import Path

from .owners import can_track_processes, owner_alive, process_start_time
from .security import cluster_root

_CLUSTER_DIR_RE = re.compile(r"^(\d+)-(\d+)-[0-9a-f]{8}$")
STOP_TIMEOUT_S = 15.0


def read_pidfile(data_dir: Path) -> list[str]:
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
    return cwd == str(data_dir.resolve()) and process_start_time(pid) is not None


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while process_start_time(pid) is not None:
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


def stop_postmaster_at(data_dir: Path) -> None:
    """Immediate shutdown (SIGQUIT, then SIGKILL) of whatever postmaster runs in ``data_dir``."""
    lines = read_pidfile(data_dir)
    if not lines or not lines[0].strip().isdigit():
        return
    pid = int(lines[0])
    if _is_postmaster_of(pid, data_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
        if not _wait_gone(pid, STOP_TIMEOUT_S):
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
    if not can_track_processes():
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
        if owner_alive(int(match.group(1)), int(match.group(2))):
            continue
        stop_postmaster_at(entry / "data")
        shutil.rmtree(entry, ignore_errors=True)
        reaped.append(entry)
    return reaped
