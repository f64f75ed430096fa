"""Forked workers for independent proof tasks, each with a pipe of its own.

`ordered_map(fn, items, jobs)` runs `fn` on every item and returns the values in the order of
`items`, whichever worker finishes first: the runner's output never depends on scheduling. With
`jobs <= 1` (or a single item) everything runs in this process.

Why not `multiprocessing.Pool`: its workers share one result queue behind a process-shared lock,
and a worker killed while writing a result (an interrupt) leaves that lock held, so `terminate()`
can hang (the same reason conformance/fork_pool.py exists; the proofs layer may not import it).
Here each worker reads its tasks from and writes its results to its own pipe, and every way out of
`ordered_map` (a result, a task's exception, a dead worker, KeyboardInterrupt) kills and reaps
every worker it started.

Workers are forked, so they inherit what the parent set up: the Z3 sorts, and a planted mutant
(conformance's self-test replaces `runner.build` in this process). Items and values cross the pipes
pickled: they are small descriptors and JSON-ready results, never Z3 terms.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

Item = TypeVar("Item")
Value = TypeVar("Value")


class WorkerFailed(RuntimeError):
    """A task raised in a worker (its traceback is the message) or the worker died without a result."""


def default_jobs() -> int:
    """Every core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _serve(fn: Callable[[Any], Any], conn: Connection, foreign: list[Connection]) -> None:
    for end in foreign:  # the parent's ends: held here, they would hide the parent's death from siblings
        end.close()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, item = message
        try:
            reply: tuple[int, bool, Any] = (index, True, fn(item))
        except Exception:  # the task's failure is its reply; an interrupt ends the worker
            reply = (index, False, traceback.format_exc())
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            conn.send((index, False, f"the result of task {index} could not be pickled: {e}"))
        except OSError:
            return


class _Worker:
    def __init__(self, fn: Callable[[Any], Any], foreign: list[Connection]) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe(duplex=True)
        self.process: BaseProcess = ctx.Process(target=_serve, args=(fn, child, [*foreign, self.conn]), daemon=True)
        self.process.start()
        child.close()
        self.task: int | None = None

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def ordered_map(fn: Callable[[Item], Value], items: Sequence[Item], jobs: int) -> list[Value]:
    """[fn(item) for item in items], on up to `jobs` forked workers, in the order of `items`.

    Items are handed out first come, first served in the order given (put the longest first). A
    task that raises fails the whole map with WorkerFailed (carrying the worker's traceback)."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    workers: list[_Worker] = []
    results: dict[int, Value] = {}
    try:
        for _ in range(min(jobs, len(items))):
            workers.append(_Worker(fn, [w.conn for w in workers]))
        queue = list(enumerate(items))
        queue.reverse()  # pop() from the end = the next item in order
        for worker in workers:
            _give(worker, queue)
        while len(results) < len(items):
            busy = [w for w in workers if w.task is not None]
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
            for worker in busy:
                if worker.conn not in ready and worker.process.sentinel not in ready:
                    continue
                try:
                    index, ok, payload = worker.conn.recv()
                except (EOFError, OSError):
                    worker.process.join()
                    raise WorkerFailed(f"a proof worker (pid {worker.process.pid}) ended with exit code "
                                       f"{worker.process.exitcode} before sending the result of task {worker.task}"
                                       ) from None
                if not ok:
                    raise WorkerFailed(f"proof task {index} failed in its worker:\n{payload}")
                results[index] = payload
                worker.task = None
                _give(worker, queue)
        return [results[i] for i in range(len(items))]
    finally:
        for worker in workers:  # every way out: nothing outlives the map
            worker.kill()


def _give(worker: _Worker, queue: list[tuple[int, Any]]) -> None:
    if queue:
        index, item = queue.pop()
        worker.conn.send((index, item))
        worker.task = index
