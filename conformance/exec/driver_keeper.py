"""The keeper between the harness and a driver: nothing a driver starts can leave its tree (Q-134).

    python -m qlwf.conformance.exec.driver_keeper REPORT_FD -- COMMAND [ARG...]

The harness does not start a driver itself: it starts this keeper in a session of its own, as a child
subreaper with a parent-death signal, and the keeper starts the driver in a process group of its own
and stays its parent. A subreaper becomes the parent of every process of its tree whose own parent
exits, so whatever the driver starts stays in the keeper's tree -- through setsid, a cleared
environment, or the driver's own death -- for as long as the keeper lives. When the driver has exited,
the keeper kills the driver's process group and everything else left in its tree, reaps what it can,
reports what it killed outside the group and exits with the driver's status (the same exit code, or
killed by the same signal), which the harness takes as the driver's own.

The harness's signals: SIGTERM is passed on to the driver's process group (a driver may release what it
holds); SIGUSR1 kills that group now. When the harness is gone (its death sends the keeper SIGTERM) the
keeper passes the SIGTERM on and kills the group itself `GRACE_S` later.

REPORT_FD is a pipe to the harness: first "started PID" (or "failed REASON", and exit 127), then at the end
one line "PID (NAME)" per process killed outside the driver's process group.

Only the standard library and `process_sweep` are imported: this runs once per driver.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import NoReturn

from qlwf.conformance.processes import sweep as process_sweep

GRACE_S = 1.0  # from an orphaned keeper's SIGTERM to its SIGKILL: the harness's own grace
_POLL_S = 0.2  # wake-ups besides the signals (a lost SIGCHLD, a harness that went away)
_REAP_S = 2.0  # for the killed to be reaped before the keeper exits
_WATCHED = {signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD}


def _driver_setup(mask: Iterable[int]) -> None:
    """In the driver before exec: the keeper's signal mask undone (a mask outlives exec), and SIGTERM
    when the keeper dies (only a SIGKILL stops a keeper before its driver)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    process_sweep.bind_to_parent()


def _write(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):  # a harness that went away reads nothing: the clean-up goes on
        os.write(fd, text.encode(errors="replace"))


def _exited(pid: int) -> bool:
    """Whether the driver has exited, without reaping it: until it is reaped its pid, which is also its
    process group's id, cannot be reused, so signalling the group never reaches a stranger."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _reap_others(driver: int) -> None:
    """Reap every exited child but the driver (adopted orphans), so the process table holds no zombies."""
    while True:
        try:
            found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if found is None or found.si_pid == driver:
            return  # the driver is reaped last, with its status
        with contextlib.suppress(ChildProcessError):
            os.waitpid(found.si_pid, 0)


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _serve(driver: int) -> None:
    """Until the driver has exited: pass SIGTERM on, kill on SIGUSR1, and unasked once orphaned."""
    harness = os.getppid()
    kill_at: float | None = None
    while not _exited(driver):
        _reap_others(driver)
        timeout = _POLL_S if kill_at is None else max(0.0, min(_POLL_S, kill_at - time.monotonic()))
        info = signal.sigtimedwait(_WATCHED, timeout)
        orphaned = os.getppid() != harness
        asked = None if info is None else info.si_signo
        if asked == signal.SIGTERM or (orphaned and kill_at is None):
            _signal_group(driver, signal.SIGTERM)
            if orphaned and kill_at is None:
                kill_at = time.monotonic() + GRACE_S
        if asked == signal.SIGUSR1 or (kill_at is not None and time.monotonic() >= kill_at):
            _signal_group(driver, signal.SIGKILL)


def _end(driver: int) -> tuple[int, list[str]]:
    """Kill the driver's group and everything else in the tree; the driver's wait status and the
    processes killed outside its group."""
    _signal_group(driver, signal.SIGKILL)  # its group: dying with it, not left behind
    left = process_sweep.sweep(lambda _token: False, roots={os.getpid()}, quiet_group=driver)
    _, status = os.waitpid(driver, 0)
    deadline = time.monotonic() + _REAP_S
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.01)
        except ChildProcessError:
            break
    return status, left


def _exit_like(status: int) -> NoReturn:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's disposition cannot be set (nor need be)
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to terminate
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> NoReturn:
    if len(argv) < 4 or argv[2] != "--" or not argv[1].isdigit():
        print("usage: python -m qlwf.conformance.exec.driver_keeper REPORT_FD -- COMMAND [ARG...]", file=sys.stderr)
        os._exit(2)
    report = int(argv[1])
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)  # taken by sigtimedwait, never by a handler
    try:
        driver = subprocess.Popen(argv[3:], process_group=0, preexec_fn=lambda: _driver_setup(mask))
    except (OSError, ValueError) as e:
        _write(report, f"failed {e}\n")
        os._exit(127)
    for fd in (0, 1):  # only the driver holds the harness's pipes: its exit is their end of file
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, fd)
        os.close(null)
    _write(report, f"started {driver.pid}\n")
    _serve(driver.pid)
    status, left = _end(driver.pid)
    _write(report, "".join(f"{line}\n" for line in left))
    os.close(report)
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv)
