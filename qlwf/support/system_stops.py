"""Telling what the system did to a command from what qlwf did wrong (decisions Q-132).

Memory runs out as a MemoryError in the process itself; a worker process the system kills (the
kernel's OOM killer sends SIGKILL, an allocation under a memory limit may die of SIGSEGV, an operator
may send anything) dies of a signal. Neither is evidence about the code under test nor a bug in qlwf:
no verdict. A worker that exited with a status of its own ran qlwf's code to its end: that is a bug.
"""

from __future__ import annotations

import signal

from qlwf.conformance.processes.fork_pool import WorkerDied


def system_stop(e: BaseException) -> str | None:
    """Why the system, not qlwf, stopped the work that raised `e`, or None."""
    if isinstance(e, MemoryError):
        return "out of memory"
    if isinstance(e, WorkerDied) and e.exitcode is not None and e.exitcode < 0:
        try:
            name = signal.Signals(-e.exitcode).name
        except ValueError:
            name = f"signal {-e.exitcode}"
        return (f"a worker process was killed by {name} (out of memory? the kernel's OOM killer and memory "
                f"limits end processes so): {e}")
    return None
