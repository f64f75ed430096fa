"""conformance/processes/sweep.py on its own: reading /proc, sweeping from a root, a quiet group (decisions
Q-130, Q-134). The end-to-end cases (drivers that leave processes behind) are in
tests/conformance/exec/test_exec_backend.py
and tests/conformance/exec/test_driver_keeper.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from qlwf.conformance.processes import sweep as process_sweep

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sweep reads Linux's /proc")

SLEEP = "import time\nwhile True: time.sleep(60)"


@pytest.fixture
def awkward_python(tmp_path: Path) -> Path:
    """The interpreter under a name that puts spaces and parentheses into /proc/PID/stat's command field."""
    link = tmp_path / "a) 1 2 (b"
    link.symlink_to(sys.executable)
    return link


@pytest.fixture
def tree(awkward_python: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A child that starts a grandchild, both under the awkward name, and the grandchild's pid; both
    killed afterwards (the grandchild through a pin taken while its parent, which never reaps, runs)."""
    with subprocess.Popen(
            [str(awkward_python), "-c", f"import subprocess, sys\n"
                                        f"p = subprocess.Popen([sys.executable, '-c', {SLEEP!r}])\n"
                                        f"print(p.pid, flush=True)\n{SLEEP}"],
            stdout=subprocess.PIPE) as parent:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        pin = process_sweep.Pinned(grandchild)
        try:
            yield parent, grandchild
        finally:
            pin.signal(signal.SIGKILL)
            pin.close()
            parent.kill()


def test_a_parent_is_read_whatever_the_command_name_holds(tree: tuple[subprocess.Popen[bytes], int]) -> None:
    child, grandchild = tree
    assert process_sweep._parent_of(child.pid) == os.getpid()
    assert process_sweep._parent_of(grandchild) == child.pid
    assert process_sweep._parent_of(2**22 + 1) is None  # above pid_max: no such process


def test_a_sweep_from_a_root_kills_its_descendants_only(tree: tuple[subprocess.Popen[bytes], int]) -> None:
    child, grandchild = tree
    name = process_sweep._command_name(grandchild)
    assert process_sweep.sweep(lambda _token: False, roots={child.pid}) == [f"{grandchild} ({name})"]
    # dead when the sweep returns, not merely signalled (its parent has not reaped it: a zombie)
    assert process_sweep._stat_fields(grandchild)[:1] in ([], [b"Z"])
    assert child.poll() is None  # the root itself is not swept


def test_an_exited_child_of_a_root_is_not_killed_or_named(tree: tuple[subprocess.Popen[bytes], int]) -> None:
    child, grandchild = tree
    os.kill(grandchild, signal.SIGKILL)
    deadline = time.monotonic() + 5  # a SIGKILL takes effect when the process next runs
    while process_sweep._stat_fields(grandchild)[:1] not in ([], [b"Z"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process_sweep.sweep(lambda _token: False, roots={child.pid}) == []  # a zombie, its parent's to reap


def test_a_pin_of_a_process_that_exited_is_not_running(awkward_python: Path) -> None:
    child = subprocess.Popen([str(awkward_python), "-c", SLEEP])
    pin = process_sweep.Pinned(child.pid)
    try:
        assert pin.running()
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert not pin.running()
        assert process_sweep.sweep(lambda _token: False, [pin]) == []  # nothing left to stop or kill
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_members_of_the_quiet_group_are_killed_but_not_named(awkward_python: Path) -> None:
    leader = subprocess.Popen([str(awkward_python), "-c", SLEEP], start_new_session=True)
    outsider = subprocess.Popen([str(awkward_python), "-c", SLEEP], start_new_session=True)
    try:
        pins = [process_sweep.Pinned(leader.pid), process_sweep.Pinned(outsider.pid)]
        name = pins[1].name
        assert process_sweep.sweep(lambda _token: False, pins, quiet_group=leader.pid) == [f"{outsider.pid} ({name})"]
        assert leader.wait(5) == outsider.wait(5) == -signal.SIGKILL
    finally:
        for proc in (leader, outsider):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
