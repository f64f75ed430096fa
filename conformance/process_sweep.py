"""Finding and killing what a driver left running outside its process group (decisions Q-126).

A driver runs in a process group of its own, and the harness ends it by signalling that group. A
descendant that calls setsid() (pg_ctl starting a server does) or whose parent exits leaves the
group and outlives the driver. So every driver starts with a token in its environment,
`QLWF_DRIVER_TOKEN=<run>.<driver>`, which its descendants inherit: once the driver is gone, every
process still carrying its token is stopped (a stopped process cannot fork), found again until no
new one appears, then killed. Each is pinned by a pidfd before it is checked, so a reused pid is
never signalled. The run part is shared by every driver of one harness run (forked `--jobs` workers
inherit it), so the CLI sweeps whatever a killed worker's driver left when it ends.

Limits: Linux only (/proc); a descendant that clears its environment, or runs as another user
when the harness is not root, is not found or cannot be signalled.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

TOKEN_VAR = "QLWF_DRIVER_TOKEN"
# One per harness process tree: made at import, before any worker forks, and inherited by them.
RUN = secrets.token_hex(8)
_PROC = Path("/proc")
_MAX_ROUNDS = 64  # stop-and-rescan rounds: each round only finds children forked before their parent stopped


def driver_token() -> str:
    """A fresh token for one driver of this run."""
    return f"{RUN}.{secrets.token_hex(8)}"


def _token_of(pid: int) -> str | None:
    """The driver token in `pid`'s environment (as it was at exec), or None."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, a kernel thread, or not ours to read
        return None
    prefix = f"{TOKEN_VAR}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def _pids() -> Iterator[int]:
    try:
        entries = list(os.scandir(_PROC))
    except OSError:
        return
    me = os.getpid()
    for entry in entries:
        if entry.name.isdigit() and int(entry.name) != me:
            yield int(entry.name)


def _command_name(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "comm").read_text(errors="replace").strip()
    except OSError:
        return "?"


class _Pinned:
    """A process held by a pidfd (or, without pidfds, by its pid alone)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.name = _command_name(pid)
        self.fd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self.fd = os.pidfd_open(pid)

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                os.kill(self.pid, sig)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def sweep(matches: Callable[[str], bool]) -> list[str]:
    """Stop, then kill, every other process whose driver token satisfies `matches`; "pid (name)" of each."""
    held: dict[int, _Pinned] = {}
    try:
        for _ in range(_MAX_ROUNDS):
            found = False
            for pid in _pids():
                if pid in held:
                    continue
                token = _token_of(pid)
                if token is None or not matches(token):
                    continue
                pinned = _Pinned(pid)
                # checked again through the pin: the pid may have been reused between the two reads
                token = _token_of(pid)
                if token is None or not matches(token):
                    pinned.close()
                    continue
                held[pid] = pinned
                pinned.signal(signal.SIGSTOP)
                found = True
            if not found:
                break
        for pinned in held.values():
            pinned.signal(signal.SIGKILL)  # stopped processes die of it too
        return [f"{p.pid} ({p.name})" for p in held.values()]
    finally:
        for pinned in held.values():
            pinned.close()


def sweep_driver(token: str) -> list[str]:
    """What one driver left running (every process carrying its token)."""
    return sweep(lambda t: t == token)


def sweep_run() -> list[str]:
    """What any driver of this harness run left running (its workers' drivers included)."""
    prefix = f"{RUN}."
    return sweep(lambda t: t.startswith(prefix))
