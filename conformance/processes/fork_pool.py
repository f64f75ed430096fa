"""Forked worker processes, each with a pipe of its own, that can be stopped at any moment.

The explorer, the parallel conformance run and the campaign all stop their workers early: when a
finding makes the rest moot, or on an interrupt. `multiprocessing.Pool` and `ProcessPoolExecutor`
cannot be stopped safely there: their workers share one result queue guarded by a process-shared
lock, and a worker terminated while writing its result leaves that lock held for ever, so the
pool's own threads block on it and `Pool.terminate()` never returns (one gate self-test of about
eighty hung so; decisions Q-83). Here nothing is shared: each worker reads its tasks from, and
writes its results to, its own pipe; the parent alone decides which worker runs what, and stopping
kills the busy workers and reaps them. There are no threads.

Workers are forked, so they inherit what the parent has set up (backends registered at run time,
a PostgreSQL server's address); tasks and results cross the pipes pickled.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import pickle
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

Item = TypeVar("Item")
Value = TypeVar("Value")

IDLE_EXIT_SECONDS = 5.0  # an idle worker told to stop gets this long before it is killed


class WorkerDied(Exception):
    """The worker running a task ended without sending its result (killed, or it exited).
    `exitcode` is the process's: negative for the signal that killed it."""

    def __init__(self, message: str, exitcode: int | None = None) -> None:
        super().__init__(message)
        self.exitcode = exitcode


class RemoteTraceback(Exception):
    """The traceback, in the worker, of an exception a task raised (set as that exception's cause)."""

    def __str__(self) -> str:
        return f"\n\nin the worker process:\n{self.args[0]}"


@dataclass(frozen=True)
class Outcome(Generic[Value]):
    """What one task came to: its value, or the exception it raised (or WorkerDied)."""

    ticket: int
    value: Value | None = None
    error: BaseException | None = None
    remote_traceback: str = ""

    def get(self) -> Value:
        if self.error is not None:
            if self.remote_traceback:
                raise self.error from RemoteTraceback(self.remote_traceback)
            raise self.error
        return cast(Value, self.value)  # a task's value may itself be None


def portable(error: BaseException) -> BaseException:
    """The exception itself if it survives pickling, else a RuntimeError that names it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def _serve(fn: Callable[[Any], Any], conn: Connection, parent_ends: list[Connection]) -> None:
    """A worker: run each task that comes down the pipe and send back its outcome, until told to stop
    (None) or the parent has gone (end of file)."""
    for end in parent_ends:  # the parent's ends of every pipe: held here, they would hide its death
        end.close()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        ticket, item = message
        try:
            reply: tuple[int, bool, Any, str] = (ticket, True, fn(item), "")
        except Exception as e:  # the task's failure is its outcome; the worker goes on (an interrupt ends it)
            reply = (ticket, False, portable(e), traceback.format_exc())
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as e:  # pickling fails before any byte is written
            conn.send((ticket, False, RuntimeError(f"the task's result could not be pickled: {e}"), ""))
        except (BrokenPipeError, OSError):
            return


class _Worker:
    def __init__(self, fn: Callable[[Any], Any], foreign: list[Connection]) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe(duplex=True)
        # the child closes its copy of this end too: the parent's death must leave no writer behind
        self.process: BaseProcess = ctx.Process(target=_serve, args=(fn, child, [*foreign, self.conn]),
                                                daemon=True)
        self.process.start()
        child.close()
        self.ticket: int | None = None

    def stop(self) -> None:
        """Busy: killed now. Idle: asked to exit, and killed if it has not within IDLE_EXIT_SECONDS."""
        if self.ticket is None and self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(IDLE_EXIT_SECONDS)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


class ForkPool(Generic[Item, Value]):
    """`workers` forked processes running `fn` on submitted items, first submitted first started."""

    def __init__(self, fn: Callable[[Item], Value], workers: int) -> None:
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self._fn = fn
        self._queue: collections.deque[tuple[int, Item]] = collections.deque()
        self._next_ticket = 0
        self._workers: list[_Worker] = []
        for _ in range(workers):
            self._spawn()

    def _spawn(self) -> None:
        self._workers.append(_Worker(self._fn, [w.conn for w in self._workers]))

    def __enter__(self) -> ForkPool[Item, Value]:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def workers(self) -> int:
        return len(self._workers)

    def submit(self, item: Item) -> int:
        """Queue `item`; the ticket that its Outcome will carry."""
        ticket = self._next_ticket
        self._next_ticket += 1
        self._queue.append((ticket, item))
        self._dispatch()
        return ticket

    def cancel(self, ticket: int) -> bool:
        """Drop a queued task, or kill the worker running it (a fresh one takes its place); either way
        no outcome will come for it. False if the ticket is neither queued nor running."""
        for entry in self._queue:
            if entry[0] == ticket:
                self._queue.remove(entry)
                return True
        for worker in self._workers:
            if worker.ticket == ticket:
                self._replace(worker)
                self._dispatch()
                return True
        return False

    @property
    def pending(self) -> int:
        """Tasks queued or running."""
        return len(self._queue) + sum(w.ticket is not None for w in self._workers)

    def _dispatch(self) -> None:
        for worker in list(self._workers):
            while worker.ticket is None and self._queue:
                ticket, item = self._queue.popleft()
                try:
                    worker.conn.send((ticket, item))
                except (BrokenPipeError, OSError):  # it died idle: the task goes to a fresh worker
                    self._queue.appendleft((ticket, item))
                    self._replace(worker)
                    break
                worker.ticket = ticket

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        self._workers.remove(worker)
        self._spawn()

    def wait(self, timeout: float | None = None) -> list[Outcome[Value]]:
        """The outcomes of the tasks that finish within `timeout` seconds (None: until one does);
        empty if none did, or if nothing is queued or running."""
        self._dispatch()
        busy = [w for w in self._workers if w.ticket is not None]
        if not busy:
            return []
        ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout))
        outcomes: list[Outcome[Value]] = []
        for worker in busy:
            if worker.conn not in ready and worker.process.sentinel not in ready:
                continue
            ticket = worker.ticket
            assert ticket is not None
            try:
                got, ok, payload, remote = worker.conn.recv()
            except (EOFError, OSError):
                worker.process.join()
                outcomes.append(Outcome(ticket, error=WorkerDied(
                    f"the worker (pid {worker.process.pid}) ended with exit code {worker.process.exitcode} "
                    "before sending its result", worker.process.exitcode)))
                self._replace(worker)
                continue
            assert got == ticket, (got, ticket)
            worker.ticket = None
            outcomes.append(Outcome(ticket, payload, None, "") if ok else Outcome(ticket, None, payload, remote))
        self._dispatch()
        return outcomes

    def unordered(self, items: Iterable[Item]) -> Iterator[tuple[int, Value]]:
        """Submit `items`, then yield (position, value) as each finishes; a task's exception is raised."""
        positions = {self.submit(item): i for i, item in enumerate(items)}
        while self.pending:
            for outcome in self.wait():
                yield positions[outcome.ticket], outcome.get()

    def ordered(self, items: Iterable[Item]) -> Iterator[Value]:
        """Submit `items`, then yield their values in submission order as soon as each is known."""
        held: dict[int, Value] = {}
        following = 0
        for position, value in self.unordered(items):
            held[position] = value
            while following in held:
                yield held.pop(following)
                following += 1

    def close(self) -> None:
        """Drop what is queued, kill busy workers, let idle ones exit; every worker is reaped."""
        self._queue.clear()
        workers, self._workers = self._workers, []
        for worker in workers:
            if worker.ticket is not None and worker.process.is_alive():
                worker.process.kill()  # first, so that no busy worker outlives an idle one's wait
        for worker in workers:
            worker.stop()
