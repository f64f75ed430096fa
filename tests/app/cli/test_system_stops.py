"""A command the system stops (memory gone, a worker process killed) ends without a verdict and without
being called a bug in qlwf: exit 71 and one line saying what happened; in the gate, that check is
unknown, not failed (decisions Q-132)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from qlwf.conformance.checkers import explore
from qlwf.conformance.checkers.explore import driver
from qlwf.conformance.processes.fork_pool import WorkerDied

from qlwf.cli import entry as cli
from qlwf.cli.entry import EXIT_INTERNAL, EXIT_OS, main
from qlwf.gate.verdict import EXIT_UNKNOWN, Check, Evidence, exit_code, run_checks


def _killed_on_the_two_step_chain(job: tuple[Any, ...]) -> Any:
    if explore.shape_name(job[1]) == "2:a>b":
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer ends a process
    return _explore_one(job)


_explore_one = driver._explore_one


def test_an_explorer_worker_killed_by_the_system_is_no_verdict_and_no_bug(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a traceback and "internal error (a bug in qlwf)", exit 70."""
    monkeypatch.setattr(driver, "_explore_one", _killed_on_the_two_step_chain)
    assert main(["explore", "--max-steps", "2", "--jobs", "2"]) == EXIT_OS
    err = capsys.readouterr().err
    assert "Traceback" not in err and "bug" not in err
    assert err.splitlines()[-1].startswith(
        "qlwf explore: stopped by the system, no verdict: a worker process was killed by SIGKILL (out of memory?")


def test_running_out_of_memory_is_no_verdict_and_no_bug(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(driver, "_explore_one", no_memory)
    assert main(["explore", "--max-steps", "1", "--jobs", "1"]) == EXIT_OS
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "qlwf explore: stopped by the system, no verdict: out of memory"


@pytest.mark.parametrize(("error", "code"), [
    (WorkerDied("the worker (pid 1) ended with exit code -9 before sending its result", -9), EXIT_OS),
    (WorkerDied("the worker (pid 1) ended with exit code -11 before sending its result", -11), EXIT_OS),
    (WorkerDied("the worker (pid 1) ended with exit code 3 before sending its result", 3), EXIT_INTERNAL),
    (WorkerDied("no exit code known"), EXIT_INTERNAL),
    (MemoryError(), EXIT_OS),
    (ZeroDivisionError("a bug"), EXIT_INTERNAL),
])
def test_only_what_the_system_does_is_blamed_on_it(error: Exception, code: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A worker that exited with a status of its own ran qlwf's code to its end: that is a bug."""
    # the servers running now are not this command's: the test session's own cluster must stay up
    assert cli._stopped_by(error, "explore", cli._servers_running()) == code
    assert ("a bug in qlwf" in capsys.readouterr().err) == (code == EXIT_INTERNAL)


def _out_of_memory(_options: dict[str, Any]) -> Evidence:
    raise MemoryError


def _worker_killed(_options: dict[str, Any]) -> Evidence:
    raise WorkerDied("the worker (pid 1) ended with exit code -9 before sending its result", -9)


def _bug(_options: dict[str, Any]) -> Evidence:
    raise WorkerDied("the worker (pid 1) ended with exit code 1 before sending its result", 1)


def test_a_gate_check_the_system_stops_is_unknown_not_failed() -> None:
    """Before: "failed", as if the code under test were wrong; a time limit was already unknown."""
    results = run_checks([Check("oom", "", _out_of_memory), Check("killed", "", _worker_killed),
                          Check("bug", "", _bug)], {}, floors={"oom": {"n": 1}, "killed": {"n": 1}, "bug": {"n": 1}})
    assert [r.status for r in results] == ["unknown", "unknown", "failed"]
    assert results[0].gaps == ["stopped by the system: out of memory"]
    assert results[1].summary.startswith("stopped by the system: a worker process was killed by SIGKILL")
    assert exit_code(results[:2]) == EXIT_UNKNOWN
