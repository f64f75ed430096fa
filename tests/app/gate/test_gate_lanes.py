"""The gate's two lanes (qlwf/gate/lanes.py): same results in the same order as one lane, the checks that
own a server stay in this process, a lane that dies fails only what it had claimed, and an interrupt
here ends the lane with everything it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from qlwf.gate.verdict import Check, Evidence, run_checks

FLOORS = {name: {"n": 1} for name in ("a", "b", "c", "s", "x", "y", "z")}


def _pid_check(n: int) -> Any:
    def run(_o: dict[str, Any]) -> Evidence:
        return Evidence(f"looked at {n}", {"n": n, "pid": os.getpid()})

    return run


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.01)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")  # a zombie waiting for a reaper that is not ours is gone too
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def _eventually_gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _assert_lane_and_its_child_gone(pids: Path) -> None:
    """The lane and the child it started (their pids, as the lane wrote them) end; a failing run
    leaves nothing behind either."""
    lane, sleeper = map(int, pids.read_text().split())
    try:
        assert _eventually_gone(lane) and _eventually_gone(sleeper), (lane, sleeper)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(lane, signal.SIGKILL)


def test_two_lanes_give_one_lanes_results_in_the_same_order(tmp_path: Path) -> None:
    started = tmp_path / "lane-started"

    def first(_o: dict[str, Any]) -> Evidence:
        started.touch()
        return Evidence("first", {"n": 1, "pid": os.getpid()})

    def server(_o: dict[str, Any]) -> Evidence:
        if os.environ.get("QLWF_TEST_LANES") == "2":
            _wait_for(started)  # the forked lane has claimed the first shared check
        return Evidence("server", {"n": 2, "pid": os.getpid()})

    checks = [Check("a", "", first), Check("s", "", server, leg="postgres", owns_server=True),
              Check("b", "", _pid_check(3)), Check("c", "", _pid_check(4))]
    one = run_checks(checks, {}, floors=FLOORS, lanes=1)
    started.unlink()
    os.environ["QLWF_TEST_LANES"] = "2"
    try:
        two = run_checks(checks, {}, floors=FLOORS, lanes=2)
    finally:
        del os.environ["QLWF_TEST_LANES"]

    def without_pid(r: Any) -> tuple[str, str, str, dict[str, int]]:
        return r.name, r.status, r.summary, {k: v for k, v in r.evidence.items() if k != "pid"}

    assert [without_pid(r) for r in two] == [without_pid(r) for r in one]
    assert [r.name for r in two] == ["a", "s", "b", "c"] and all(r.status == "passed" for r in two)
    assert {r.evidence["pid"] for r in one} == {os.getpid()}
    assert two[1].evidence["pid"] == os.getpid()  # the server's check never leaves this process
    assert two[0].evidence["pid"] != os.getpid()  # the forked lane ran the first shared check


def test_skipped_checks_stay_skipped_and_in_place() -> None:
    checks = [Check("a", "", _pid_check(1)), Check("s", "", _pid_check(2), leg="postgres", owns_server=True),
              Check("b", "", _pid_check(3))]
    results = run_checks(checks, {}, floors=FLOORS, skip=frozenset({"postgres"}), lanes=2)
    assert [(r.name, r.status) for r in results] == [("a", "passed"), ("s", "skipped"), ("b", "passed")]


def test_a_lane_that_dies_fails_what_it_had_claimed_and_this_process_runs_the_rest(tmp_path: Path) -> None:
    parent = os.getpid()
    claimed = tmp_path / "claimed"

    def dies_in_the_lane(_o: dict[str, Any]) -> Evidence:
        if os.getpid() != parent:
            claimed.touch()
            os._exit(7)
        return Evidence("ran here", {"n": 1})

    def server(_o: dict[str, Any]) -> Evidence:
        _wait_for(claimed)
        return Evidence("server", {"n": 1})

    checks = [Check("x", "", dies_in_the_lane), Check("s", "", server, owns_server=True),
              Check("y", "", _pid_check(5))]
    x, s, y = run_checks(checks, {}, floors=FLOORS, lanes=2)
    assert x.status == "failed" and "exited with status 7" in x.summary, x
    assert (s.status, y.status) == ("passed", "passed")
    assert y.evidence["pid"] == parent  # the lane was gone, so this process claimed it


def test_an_interrupt_here_ends_the_lane_and_what_it_started(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    def starts_a_child_and_hangs(_o: dict[str, Any]) -> Evidence:
        child = subprocess.Popen(["sleep", "300"])
        tmp = pids.with_suffix(".tmp")
        tmp.write_text(f"{os.getpid()} {child.pid}")
        tmp.rename(pids)
        time.sleep(300)
        return Evidence("never", {"n": 1})

    def interrupted(_o: dict[str, Any]) -> Evidence:
        _wait_for(pids)
        raise KeyboardInterrupt  # what the CLI's handlers raise on SIGINT (Interrupted on SIGTERM)

    checks = [Check("z", "", starts_a_child_and_hangs), Check("s", "", interrupted, owns_server=True)]
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_checks(checks, {}, floors=FLOORS, lanes=2)
    _assert_lane_and_its_child_gone(pids)
    assert time.monotonic() - t0 < 60  # nobody waited for the 300 s check


_KILLED_GATE = """
import os, subprocess, sys, time
from pathlib import Path
from qlwf.gate.verdict import Check, Evidence, run_checks

pids = Path(sys.argv[1])

def hangs_with_a_child(_o):
    child = subprocess.Popen(["sleep", "300"])
    pids.with_suffix(".tmp").write_text(f"{os.getpid()} {child.pid}")
    pids.with_suffix(".tmp").rename(pids)
    time.sleep(300)
    return Evidence("never", {"n": 1})

def hangs(_o):
    time.sleep(300)
    return Evidence("never", {"n": 1})

run_checks([Check("z", "", hangs_with_a_child), Check("s", "", hangs, owns_server=True)], {},
           floors={"z": {"n": 1}, "s": {"n": 1}}, lanes=2)
"""


def test_a_gate_killed_outright_takes_its_lane_along(tmp_path: Path) -> None:
    """SIGKILL runs no handler here: the lane's own watch thread ends the lane's group."""
    pids = tmp_path / "pids"
    gate = subprocess.Popen([sys.executable, "-c", _KILLED_GATE, str(pids)])
    try:
        _wait_for(pids)
    finally:
        gate.kill()
        gate.wait()
    _assert_lane_and_its_child_gone(pids)
