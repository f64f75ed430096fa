"""A check's time limit (decisions Q-85): a hang is stopped and reported unknown, never held for ever."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from qlwf.conformance.processes.fork_pool import ForkPool

from qlwf.gate import selftest
from qlwf.gate.verdict import Check, Evidence, run_checks, time_limit

FLOORS = {"hangs": {"n": 1}, "answers": {"n": 1}, "pool": {"n": 1}}
POOL_PIDS: list[int] = []


def _hangs(opts: dict[str, Any]) -> Evidence:
    while True:
        try:
            time.sleep(60)
        except Exception:  # a check's own broad handler cannot swallow the stop
            continue


def _answers(opts: dict[str, Any]) -> Evidence:
    return Evidence("answered", {"n": 1})


def _pool(opts: dict[str, Any]) -> Evidence:
    with ForkPool(time.sleep, 2) as pool:
        POOL_PIDS.extend(w.process.pid or 0 for w in pool._workers)
        list(pool.ordered([60.0, 60.0]))
    return Evidence("slept", {"n": 1})


@pytest.fixture
def outer_timer() -> Iterator[None]:
    """Whatever SIGALRM handler and real-time timer the session has (pytest-timeout's), back afterwards."""
    handler, (delay, interval) = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    yield
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, delay, interval)


@pytest.mark.timeout(120)  # a regression would otherwise wait for the suite's ten-minute limit
@pytest.mark.parametrize("lanes", [1, 2])
def test_a_check_past_its_limit_is_stopped_unknown_and_the_next_one_runs(lanes: int) -> None:
    checks = [Check("hangs", "never answers", _hangs), Check("answers", "answers at once", _answers)]
    begin = time.monotonic()
    results = run_checks(checks, {"check_timeout": 0.5}, floors=FLOORS, lanes=lanes)
    assert [r.status for r in results] == ["unknown", "passed"]
    assert results[0].summary.startswith("no verdict within 0.5 s: the check was stopped")
    assert results[0].gaps == [results[0].summary]
    assert time.monotonic() - begin < 60, "stopped at its limit, not after the hang's own sleep"


@pytest.mark.timeout(120)
def test_a_stopped_check_leaves_no_pool_worker_behind() -> None:
    POOL_PIDS.clear()
    (result,) = run_checks([Check("pool", "waits on its workers", _pool)], {"check_timeout": 0.5}, floors=FLOORS)
    assert result.status == "unknown" and len(POOL_PIDS) == 2
    assert multiprocessing.active_children() == []
    for pid in POOL_PIDS:
        with pytest.raises(ChildProcessError):  # reaped: no longer a child of this process
            os.waitpid(pid, os.WNOHANG)


@pytest.mark.usefixtures("outer_timer")
def test_an_outer_timer_is_rearmed_with_what_is_left_and_a_sooner_one_is_left_alone() -> None:
    fired: list[int] = []

    def outer(signum: int, frame: object) -> None:
        fired.append(signum)

    signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 100)
    with time_limit(5):
        pass  # a check that answers at once: the outer timer must come back with what is left of it
    assert signal.getsignal(signal.SIGALRM) is outer and 90 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    with time_limit(5):
        time.sleep(0.5)  # the outer timer fires first and is not replaced; the limit is not armed
    assert fired == [signal.SIGALRM]
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


@pytest.mark.timeout(120)
def test_a_planted_fault_whose_check_hangs_is_not_counted_as_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    hang = selftest.Fault("hang", "test layer", "hangs", "nothing", lambda: None)
    monkeypatch.setattr(selftest, "CHECKS", [Check("hangs", "never answers", _hangs)])
    monkeypatch.setattr(selftest, "FAULTS", (hang,))
    (result,) = selftest.self_test(timeout=2.0)
    assert result.status == "unknown", result
    assert "no verdict within 1 s" in result.summary


def test_the_cli_refuses_a_limit_that_is_not_a_positive_number_of_seconds(
        capsys: pytest.CaptureFixture[str]) -> None:
    from qlwf.cli.entry import main

    for bad in ("0", "-3", "soon"):
        with pytest.raises(SystemExit) as ended:
            main(["check", "--only", "spec-vectors", "--check-timeout", bad])
        assert ended.value.code == 2 and "--check-timeout" in capsys.readouterr().err, bad
    assert main(["check", "--only", "spec-vectors", "--check-timeout", "60"]) == 0
