"""Who owns a cluster or a database: a process named by its pid and start time, on this host.

A pid alone is reused; with its start time (from /proc) it names one process for good. The host
marker names this kernel boot and pid namespace, the only scope in which an owner pid means anything.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from collections.abc import Callable
from pathlib import Path


def process_start_time(pid: int) -> int | None:
    """Start time of a live process in clock ticks since boot; None if gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may contain spaces and ")"
    return None if fields[0] in ("Z", "X") else int(fields[19])


def can_track_processes() -> bool:
    """Without /proc every owner would look dead; reaping is then disabled rather than unsafe."""
    return process_start_time(os.getpid()) is not None


def owner_token() -> tuple[int, int]:
    pid = os.getpid()
    return pid, process_start_time(pid) or 0


def owner_alive(pid: int, start: int) -> bool:
    return process_start_time(pid) == start


@functools.cache
def host_marker() -> str:
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
