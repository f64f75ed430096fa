"""The gate on two cores: two lanes, this process and one forked process, drawing from one list.

Why not a pool of checks: the PostgreSQL leg shares one throwaway cluster whose life (start, and
stop on every way of ending) belongs to this process and to the signal handlers of `qlwf.cli.entry`, so
the checks that own a server run here (`home`). Every other check (`shared`: model, explorer,
SQLite, proofs; CPU work in Python that needs no server) is claimed, in order, by whichever lane is
free: the forked lane from the start, this process once its own checks are done. So the two cores
stay busy whatever the mix, and `--skip postgres` still runs on both.

The forked lane is a process group of its own: whatever it starts (explorer and conformance pool
workers, driver processes) ends with it by one `killpg`, on every way out (a finished lane, a
crashed lane, an exception or an interrupt here). The terminal's Ctrl-C reaches only the
foreground group, so it is this process that ends the lane; and should this process be killed
outright (SIGKILL runs no handler), a thread in the lane sees the end of a pipe only this process
writes to and kills the lane's group itself. A result crosses the pipe as soon as
its item is done, so a lane that dies keeps what it finished; what it had claimed and not finished
is reported by `lost(item, why)`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

Work = TypeVar("Work")
Result = TypeVar("Result")

TERM_GRACE_SECONDS = 5.0  # SIGTERM first (pool workers end cleanly), then SIGKILL to the whole group

# The write ends of the lanes' liveness pipes: no forked child (the lane itself included) may hold one,
# or a killed parent's lane would wait for that child's end too.
_PARENT_ENDS: set[int] = set()


def _close_parent_ends() -> None:
    for fd in _PARENT_ENDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _PARENT_ENDS.clear()


os.register_at_fork(after_in_child=_close_parent_ends)


def run_in_two_lanes(home: Sequence[Work], shared: Sequence[Work], run: Callable[[Work], Result],
                     lost: Callable[[Work, str], Result]) -> tuple[list[Result], list[Result]]:
    """Run `home` here in order and `shared` on both lanes; the results, by position, of each."""
    if not shared:
        return [run(w) for w in home], []
    lane = _ForkedLane(shared, run)
    try:
        mine = [run(w) for w in home]
        here: dict[int, Result] = {}
        while (i := lane.claim()) is not None:
            here[i] = run(shared[i])
        there, why = lane.collect()
    finally:
        lane.close()
    return mine, [here[i] if i in here else there[i] if i in there else lost(w, why) for i, w in enumerate(shared)]


class _ForkedLane:
    """The second lane: a forked process that claims items by a shared counter and sends each result."""

    def __init__(self, items: Sequence[Any], run: Callable[[Any], Any]) -> None:
        ctx = multiprocessing.get_context("fork")
        self._size = len(items)
        self._next = ctx.Value("i", 0)
        for stream in (sys.stdout, sys.stderr):  # no buffered text may be written twice
            stream.flush()
        self._recv, send = ctx.Pipe(duplex=False)
        alive_r, self._alive_w = os.pipe()  # never written: the lane reads EOF once this process is gone
        _PARENT_ENDS.add(self._alive_w)
        self._proc = ctx.Process(target=self._main, args=(items, run, send, alive_r), name="qlwf-gate-lane")
        self._proc.start()
        send.close()
        os.close(alive_r)
        self._pgid = self._proc.pid or 0
        with contextlib.suppress(OSError):  # both sides set the group, so no signal can race the child's call
            os.setpgid(self._pgid, self._pgid)

    def claim(self) -> int | None:
        """The next unclaimed item, or None when every item is claimed."""
        with self._next.get_lock():
            i = int(self._next.value)
            if i >= self._size:
                return None
            self._next.value = i + 1
            return i

    def _main(self, items: Sequence[Any], run: Callable[[Any], Any], send: Connection, alive: int) -> None:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        threading.Thread(target=_end_group_when_orphaned, args=(alive,), name="qlwf-lane-watch", daemon=True).start()
        while (i := self.claim()) is not None:
            send.send((i, run(items[i])))
        send.close()

    def collect(self) -> tuple[dict[int, Any], str]:
        """What the lane finished, once it has ended, and why the rest (if any) is missing."""
        done: dict[int, Any] = {}
        with contextlib.suppress(EOFError):
            while True:
                i, result = self._recv.recv()
                done[i] = result
        self._proc.join()
        return done, _ending(self._proc.exitcode)

    def close(self) -> None:
        """End the lane's whole group (nothing is left in it after a lane that finished)."""
        if self._proc.is_alive():
            _signal_group(self._pgid, signal.SIGTERM)
            self._proc.join(TERM_GRACE_SECONDS)
        _signal_group(self._pgid, signal.SIGKILL)  # the lane's own workers too, and a lane ignoring SIGTERM
        self._proc.join()
        self._recv.close()
        _PARENT_ENDS.discard(self._alive_w)
        os.close(self._alive_w)


def _end_group_when_orphaned(alive: int) -> None:
    """In the lane: block until the pipe's only writer, the process that forked the lane, has gone
    (a read in a thread waits in the kernel, whatever the lane's main thread is doing), then end
    the lane's whole group, its workers included."""
    while os.read(alive, 1):  # nothing is ever written: only EOF (b"") ends the wait
        continue
    os.killpg(0, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    if pgid > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def _ending(code: int | None) -> str:
    if code is not None and code < 0:
        return f"the gate's second lane was killed by {signal.Signals(-code).name} before this check finished"
    return f"the gate's second lane exited with status {code} before this check finished"
