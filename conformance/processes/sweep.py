"""Finding and killing what a driver left running outside its process group (decisions Q-126, Q-134).

A driver runs in a process group of its own under a keeper (conformance/exec/driver_keeper.py), a child
subreaper: a descendant that calls setsid() (pg_ctl starting a server does) leaves the driver's group,
and one whose parent exits is handed to the keeper, not to init. Two things find such processes:

* The keeper's tree. When the driver has exited the keeper sweeps from itself (`roots`): its children
  and theirs, whatever their session, group or environment; the driver's group is killed but not
  named (`quiet_group`).
* The token. Every driver starts with `QLWF_DRIVER_TOKEN=<run>.<driver>` in its environment, which its
  descendants inherit: this finds what a keeper killed from outside (SIGKILL) could not hold.

Every process found is stopped (a stopped process cannot fork), searched again for children until no
new one appears, then killed. Each is pinned by a pidfd before it is checked, so a reused pid is never
signalled. The run part of the token is shared by every driver of one harness run (forked `--jobs`
workers inherit it), so the CLI also sweeps what any of them left when it ends.

Limits: Linux only (/proc, prctl); a process that runs as another user when the harness is not root
cannot be signalled; a process outside a keeper that was killed by SIGKILL and started with its
environment cleared is not found.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

TOKEN_VAR = "QLWF_DRIVER_TOKEN"
# One per harness process tree: made at import, before any worker forks, and inherited by them.
RUN = secrets.token_hex(8)
_PROC = Path("/proc")
_EXIT_WAIT_S = 2.0  # for the killed to be gone (a SIGKILL takes effect when the process next runs)
_MAX_ROUNDS = 64  # stop-and-rescan rounds: each round only finds children forked before their parent stopped
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def bind_to_parent(subreaper: bool = False) -> None:
    """In a child before exec (Linux; both settings outlive exec): SIGTERM when the thread that started
    it dies, even by SIGKILL; and, with `subreaper`, a child subreaper, so that what its descendants
    orphan becomes its child instead of init's."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if subreaper:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)


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


def _stat_fields(pid: int) -> list[bytes]:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): state, ppid,
    pgrp, ...; empty when the process is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2:].split()


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 2 else None


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


class Pinned:
    """A process held by a pidfd (or, without pidfds, by its pid alone)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.name = _command_name(pid)
        self.fd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self.fd = os.pidfd_open(pid)

    def running(self) -> bool:
        """Not yet exited (a zombie has exited). Without a pidfd, whether the pid exists."""
        if self.fd is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        return not poller.poll(0)

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


def sweep(matches: Callable[[str], bool], pinned: Iterable[Pinned] = (), roots: Iterable[int] = (),
          quiet_group: int | None = None) -> list[str]:
    """Stop, then kill, every process of `pinned` still running and every other process whose driver
    token satisfies `matches` or whose parent is one of `roots` or one already held; "pid (name)" of
    each, but those of process group `quiet_group` (already killed with their group: dying, not left
    behind). Takes over (and closes) the pins."""
    held: dict[int, Pinned] = {}
    named: list[Pinned] = []

    def hold(pin: Pinned) -> None:
        held[pin.pid] = pin
        pin.signal(signal.SIGSTOP)
        fields = _stat_fields(pin.pid)
        if quiet_group is None or len(fields) < 3 or int(fields[2]) != quiet_group:
            named.append(pin)

    try:
        for pin in pinned:
            if pin.pid in held or not pin.running():
                pin.close()
                continue
            hold(pin)
        for _ in range(_MAX_ROUNDS):
            # parents held and still there (stopped: they cannot fork, and their pids cannot be reused)
            parents = {pid for pid, pin in held.items() if pin.running()} | set(roots)
            found = False
            for pid in _pids():
                if pid in held or not _taken(pid, matches, parents):
                    continue
                pin = Pinned(pid)
                # checked again through the pin (the pid may be reused); an exited child is no one's to kill
                if not pin.running() or not _taken(pid, matches, parents):
                    pin.close()
                    continue
                hold(pin)
                found = True
            if not found:
                break
        for pin in held.values():
            pin.signal(signal.SIGKILL)  # stopped processes die of it too
        _await_exit(held.values())
        return [f"{p.pid} ({p.name})" for p in named]
    finally:
        for pin in held.values():
            pin.close()


def _await_exit(pins: Iterable[Pinned], timeout_s: float = _EXIT_WAIT_S) -> None:
    """Until every pinned process has exited (a SIGKILL is delivered, not yet acted on, when kill()
    returns), or `timeout_s`: so that "killed" is a fact when the sweep reports it. Pids without a
    pidfd cannot be watched; a process in uninterruptible sleep may outlast the wait."""
    poller = select.poll()
    watched = 0
    for pin in pins:
        if pin.fd is not None:
            poller.register(pin.fd, select.POLLIN)
            watched += 1
    deadline = time.monotonic() + timeout_s
    while watched:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return
        for fd, _ in poller.poll(left_ms):
            poller.unregister(fd)
            watched -= 1


def _taken(pid: int, matches: Callable[[str], bool], parents: set[int]) -> bool:
    if parents and _parent_of(pid) in parents:
        return True
    token = _token_of(pid)
    return token is not None and matches(token)


def sweep_driver(token: str, pinned: Iterable[Pinned] = ()) -> list[str]:
    """What one driver left running: its pinned family and every process carrying its token."""
    return sweep(lambda t: t == token, pinned)


def sweep_run() -> list[str]:
    """What any driver of this harness run left running (its workers' drivers included)."""
    prefix = f"{RUN}."
    return sweep(lambda t: t.startswith(prefix))
