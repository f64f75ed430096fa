"""conformance/process_sweep.py on its own: reading a process's family from /proc (decisions Q-130).
The end-to-end cases (drivers that leave processes behind) are in tests/test_exec_backend.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from qlwf.conformance import process_sweep

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


def test_the_family_is_every_running_descendant_pinned(tree: tuple[subprocess.Popen[bytes], int]) -> None:
    child, grandchild = tree
    pinned = process_sweep.family(os.getpid())
    try:
        assert {child.pid, grandchild} <= {p.pid for p in pinned}
        assert all(p.running() for p in pinned if p.pid in (child.pid, grandchild))
    finally:
        for p in pinned:
            p.close()
    # the sweep takes the pins over: the grandchild is stopped and killed, the child (ours) too
    mine = process_sweep.family(child.pid)
    assert [p.pid for p in mine] == [grandchild]
    assert process_sweep.sweep(lambda _token: False, mine) == [f"{grandchild} ({mine[0].name})"]
    # dead when the sweep returns, not merely signalled (its parent has not reaped it: a zombie)
    assert process_sweep._stat_fields(grandchild)[:1] in ([], [b"Z"])
    assert child.poll() is None  # only what was pinned


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


def test_the_members_of_a_killed_group_are_not_counted_as_left_behind(awkward_python: Path) -> None:
    leader = subprocess.Popen([str(awkward_python), "-c", SLEEP], start_new_session=True)
    outsider = subprocess.Popen([str(awkward_python), "-c", SLEEP], start_new_session=True)
    pins = [process_sweep.Pinned(leader.pid), process_sweep.Pinned(outsider.pid)]
    try:
        kept = process_sweep.outside_group(pins, leader.pid)
        assert [p.pid for p in kept] == [outsider.pid]
        for p in kept:
            p.close()
    finally:
        for proc in (leader, outsider):
            proc.kill()
            proc.wait()
