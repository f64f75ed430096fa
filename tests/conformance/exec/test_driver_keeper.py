"""The keeper between the harness and a driver (conformance/exec/driver_keeper.py, decisions Q-134): the
driver's status comes through it unchanged, a driver that cannot start is reported as such, orphans
are reaped while the driver runs, and what a driver left is killed even when the harness itself is
killed. The escape cases through the CLI are in tests/conformance/exec/test_exec_backend.py."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from qlwf.conformance.exec.process import DriverFailure, DriverProcess
from qlwf.conformance.processes import sweep as process_sweep

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the keeper is a Linux subreaper")

REPO = Path(__file__).resolve().parents[3]
BROKEN = [sys.executable, str(REPO / "tests" / "support" / "broken_driver.py")]


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize(("code", "status"), [("raise SystemExit(7)", 7), ("pass", 0),
                                              ("import os, signal; os.kill(os.getpid(), signal.SIGUSR2)",
                                               -signal.SIGUSR2)])
def test_the_drivers_exit_status_is_the_keepers(code: str, status: int) -> None:
    driver = DriverProcess(_python(code), 5.0)
    assert process_sweep._parent_of(driver.driver_pid) == driver.proc.pid  # the keeper's child, not ours
    assert driver.finish(2.0) == status


def test_a_driver_that_cannot_be_started_is_reported_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(DriverFailure) as caught:
        DriverProcess([str(tmp_path / "no-such-driver")], 5.0)
    assert caught.value.problem == "exited"
    assert "cannot start" in caught.value.message and "No such file or directory" in caught.value.message


def test_the_keeper_explains_its_usage() -> None:
    done = subprocess.run([sys.executable, "-m", "qlwf.conformance.exec.driver_keeper"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 2 and "usage: python -m qlwf.conformance.exec.driver_keeper" in done.stderr


def test_the_keeper_reaps_what_the_driver_orphans_while_it_runs() -> None:
    """A driver's child that exits after its parent became the keeper's: no zombie piles up while the
    driver runs (a long session through pg_ctl would otherwise fill the process table)."""
    orphaner = ("import os, sys, time\n"
                "for _ in range(5):\n"
                "    if os.fork() == 0:\n"
                "        if os.fork() == 0:\n"
                "            time.sleep(0.2)\n"
                "        os._exit(0)\n"
                "sys.stdin.read()\n")
    driver = DriverProcess(_python(orphaner), 5.0)
    try:
        deadline = time.monotonic() + 10
        while _children(driver.proc.pid) != [driver.driver_pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _children(driver.proc.pid) == [driver.driver_pid]
    finally:
        assert driver.finish(2.0) == 0


def test_what_a_driver_left_is_killed_when_the_harness_is_killed(tmp_path: Path) -> None:
    """The harness killed by SIGKILL runs no clean-up of its own: its death sends the keeper SIGTERM,
    which ends the driver and kills what it started, here a process that left the driver's session
    with a cleared environment (no token to find it by). Before the keeper it outlived everything."""
    marker = f"qlwf-keeper-test-{os.getpid()}"
    with subprocess.Popen([sys.executable, "-m", "qlwf.cli", "conform", "--backend", "exec", "--driver",
                           shlex.join([*BROKEN, "escape-env", marker]), "--traces", "400"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path) as proc:
        try:
            deadline = time.monotonic() + 30
            while len(_marked(marker)) < 2 and time.monotonic() < deadline:  # the driver and its escapee
                time.sleep(0.05)
            assert len(_marked(marker)) == 2, "the driver did not start its escapee"
            proc.kill()
            proc.wait()
            deadline = time.monotonic() + 10  # the keeper's grace, its sweep
            while _marked(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _marked(marker) == []
        finally:
            for pid in _marked(marker):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
