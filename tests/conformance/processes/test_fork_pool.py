"""The forked worker pool (conformance/fork_pool, decisions Q-83): results, failures, cancelling, and
stopping at any moment without a hang or a process left behind."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from qlwf.conformance.processes.fork_pool import ForkPool, Outcome, RemoteTraceback, WorkerDied


def _slow_square(x: int) -> int:
    time.sleep(0.002 * (x % 5))  # finishing out of order
    return x * x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"three is refused ({x})")
    return x


class Unpicklable(Exception):
    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("not across a pipe")


def _raise_unpicklable(x: int) -> int:
    raise Unpicklable(str(x))


def _return_unpicklable(x: int) -> object:
    return lambda: x


def _exit_on_two(x: int) -> int:
    if x == 2:
        os._exit(3)
    return x


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _big(x: int) -> bytes:
    return bytes([x % 256]) * (4 << 20)  # far beyond a pipe's buffer: the writer blocks mid-result


def _outcomes_by_ticket(pool: ForkPool[int, int], items: list[int]) -> tuple[list[int], dict[int, Outcome[int]]]:
    """Submit `items`; their tickets and every outcome, by ticket, once nothing is pending."""
    tickets = [pool.submit(x) for x in items]
    outcomes: dict[int, Outcome[int]] = {}
    while pool.pending:
        outcomes.update({o.ticket: o for o in pool.wait()})
    return tickets, outcomes


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for whoever inherited it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_ordered_values_match_a_serial_map_whatever_the_finishing_order() -> None:
    items = list(range(40))
    with ForkPool(_slow_square, 3) as pool:
        assert list(pool.ordered(items)) == [x * x for x in items]
        assert sorted(pool.unordered(items)) == [(i, x * x) for i, x in enumerate(items)]


def test_a_task_exception_is_raised_with_the_worker_traceback_and_the_others_still_run() -> None:
    with ForkPool(_fail_on_three, 2) as pool:
        tickets, outcomes = _outcomes_by_ticket(pool, list(range(6)))
        assert sorted(outcomes) == tickets
        assert [outcomes[t].get() for t in tickets if t != tickets[3]] == [0, 1, 2, 4, 5]
        with pytest.raises(ValueError, match="three is refused") as caught:
            outcomes[tickets[3]].get()
        assert isinstance(caught.value.__cause__, RemoteTraceback)
        assert "_fail_on_three" in str(caught.value.__cause__)


def test_what_cannot_cross_the_pipe_becomes_a_runtime_error_naming_it() -> None:
    with ForkPool(_raise_unpicklable, 1) as pool, pytest.raises(RuntimeError, match="Unpicklable: 7"):
        list(pool.ordered([7]))
    with ForkPool(_return_unpicklable, 1) as pool, pytest.raises(RuntimeError, match="could not be pickled"):
        list(pool.ordered([7]))
    with pytest.raises(TypeError):
        pickle.dumps(Unpicklable("x"))


def test_a_worker_that_dies_fails_only_its_task_and_is_replaced() -> None:
    with ForkPool(_exit_on_two, 1) as pool:
        tickets, outcomes = _outcomes_by_ticket(pool, list(range(5)))
        with pytest.raises(WorkerDied, match="exit code 3"):
            outcomes[tickets[2]].get()
        assert [outcomes[t].get() for t in tickets if t != tickets[2]] == [0, 1, 3, 4]
        assert pool.workers == 1


def test_cancel_drops_a_queued_task_and_kills_a_running_one() -> None:
    with ForkPool(_sleep, 1) as pool:
        running = pool.submit(60.0)
        queued = pool.submit(0.0)
        last = pool.submit(0.01)
        (pid,) = [w.process.pid for w in pool._workers]
        assert pool.cancel(queued) and pool.cancel(running)
        assert not pool.cancel(queued) and not pool.cancel(10_000)
        assert pid is not None and not _alive(pid)
        outcomes = []
        while pool.pending:
            outcomes += pool.wait(30)
        assert [(o.ticket, o.get()) for o in outcomes] == [(last, 0.01)]


@pytest.mark.timeout(60)
def test_closing_while_a_task_runs_kills_and_reaps_every_worker() -> None:
    pool: ForkPool[float, float] = ForkPool(_sleep, 2)
    pool.submit(60.0)
    pids = [w.process.pid for w in pool._workers]
    begin = time.monotonic()
    pool.close()
    # killed, not awaited: the task would run for 60 s
    assert time.monotonic() - begin < 45, "the idle worker exits when asked, the busy one is killed"
    assert all(pid is not None and not _alive(pid) for pid in pids)
    assert pool.pending == 0 and pool.workers == 0


@pytest.mark.timeout(120)
def test_stopping_while_workers_send_large_results_never_hangs() -> None:
    """The stdlib pool's failure (Q-83): stopping while a worker is part-way through writing a result.
    Each worker writes 4 MiB; the pool is closed as soon as the first result is in, repeatedly."""
    for round_ in range(25):
        with ForkPool(_big, 2) as pool:
            first = next(pool.unordered(range(round_, round_ + 8)))
            assert first[1][:1] == bytes([(round_ + first[0]) % 256])


@pytest.mark.timeout(60)
def test_workers_of_a_killed_parent_exit_on_their_own() -> None:
    """SIGKILL runs no cleanup in the parent: its idle workers see the end of their pipes and exit,
    which needs that no worker holds a sibling's parent end."""
    script = (
        "import os, sys, time\n"
        "from qlwf.conformance.processes.fork_pool import ForkPool\n"
        "pool = ForkPool(abs, 3)\n"
        "print(*[w.process.pid for w in pool._workers], flush=True)\n"
        "time.sleep(120)\n"
    )
    root = Path(__file__).resolve().parents[3]
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=root) as parent:
        try:
            assert parent.stdout is not None
            pids = [int(p) for p in parent.stdout.readline().split()]
            assert len(pids) == 3 and all(_alive(p) for p in pids)
        finally:
            parent.send_signal(signal.SIGKILL)
            parent.wait()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
