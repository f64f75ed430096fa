"""Independent proof tasks on forked processes: one process per task, at most `jobs` at a time.

`ordered_map(fn, items, jobs)` returns `[fn(item) for item in items]`, in the order of `items`
whichever task finishes first, so the runner's output never depends on scheduling.

Why a fresh fork per task: every task starts from the same parent state, so the Z3 terms it builds
get the same ids, and the solver the same inputs, however the tasks happen to be scheduled;
counterexamples are then the same run after run (a long-lived worker would carry the terms of
whatever tasks it ran before). Forking also passes the task function without pickling: workers
inherit the encoding and a planted mutant (conformance's self-test replaces `runner.build` in
this process). Only results cross back, pickled, through a pipe per process: no queue or lock is
shared, so killing a process at any moment cannot wedge the others (the reason
conformance/fork_pool.py exists; the proofs layer may not import it).

Every way out of `ordered_map` (the last result, a failed task, a dead worker, KeyboardInterrupt)
kills and reaps every process it started. Workers ignore SIGINT: an interrupt at the terminal
reaches the whole process group, and the parent alone decides to stop them.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import TypeVar

Item = TypeVar("Item")
Value = TypeVar("Value")


class WorkerFailed(RuntimeError):
    """A task raised in its process (the message carries its traceback), or the process died first."""


def default_jobs() -> int:
    """Every core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _child(fn: Callable[[Item], Value], item: Item, conn: Connection, foreign: list[Connection]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for end in foreign:  # the parent's ends of the other pipes: this process has no business with them
        end.close()
    try:
        reply: tuple[bool, object] = (True, fn(item))
    except Exception:  # the task's failure is its reply
        reply = (False, traceback.format_exc())
    try:
        conn.send(reply)
    except (pickle.PicklingError, TypeError, AttributeError) as e:  # pickling fails before any byte is written
        conn.send((False, f"the task's result could not be pickled: {e}"))
    conn.close()


class _Task:
    def __init__(self, index: int, fn: Callable[[Item], Value], item: Item, foreign: list[Connection]) -> None:
        ctx = multiprocessing.get_context("fork")
        self.index = index
        self.conn, self._child_end = ctx.Pipe(duplex=False)
        self.process: BaseProcess = ctx.Process(target=_child, args=(fn, item, self._child_end, [*foreign, self.conn]),
                                                daemon=True)

    def start(self) -> None:
        try:
            self.process.start()
        finally:
            self._child_end.close()  # the child's copy is its only writer: its death must read as EOF here

    def reap(self, grace: float = 0.0) -> None:
        """Wait up to `grace` seconds for the process to exit, kill it if it has not, and reap it."""
        if self.process.pid is not None:  # started
            self.process.join(grace)
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
        self._child_end.close()
        self.conn.close()


def ordered_map(fn: Callable[[Item], Value], items: Sequence[Item], jobs: int) -> list[Value]:
    """[fn(item) for item in items] on up to `jobs` forked processes, in the order of `items`.

    Tasks start in the order given (put the longest first). With `jobs <= 1` or a single item
    everything runs in this process. A task that raises fails the map with WorkerFailed."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    results: dict[int, Value] = {}
    running: list[_Task] = []
    following = 0
    try:
        while len(results) < len(items):
            while following < len(items) and len(running) < jobs:
                task = _Task(following, fn, items[following], [t.conn for t in running])
                running.append(task)  # before it starts: an interrupt from here on still reaps it
                task.start()
                following += 1
            ready = set(wait([t.conn for t in running]))  # a dead process closes its end: EOF is ready too
            for task in [t for t in running if t.conn in ready]:
                try:
                    ok, payload = task.conn.recv()
                except EOFError:
                    task.process.join(5.0)  # for its exit code; the finally below kills it if need be
                    raise WorkerFailed(f"the process of proof task {task.index} (pid {task.process.pid}) ended "
                                       f"with exit code {task.process.exitcode} before sending its result") from None
                if not ok:
                    raise WorkerFailed(f"proof task {task.index} failed:\n{payload}")
                results[task.index] = payload
                task.reap(grace=5.0)  # it has sent its result and is exiting
                running.remove(task)
        return [results[i] for i in range(len(items))]
    finally:
        for task in running:  # every way out: nothing outlives the map
            task.reap()
