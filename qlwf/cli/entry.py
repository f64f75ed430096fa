"""The `qlwf` command line: one sub-command module per area, registered here."""

from __future__ import annotations

import argparse
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from types import FrameType

from qlwf.conformance.processes import sweep as process_sweep
from qlwf.conformance.report.visible import visible
from qlwf.support import stdio
from qlwf.support.system_stops import system_stop

# Each module defines `register(subparsers)`; its parsers set `func(args) -> int`. Command name → the
# module that registers it: a command imports only its own module (a `qlwf oracle` process need not
# load Z3, Hypothesis or the backends), help and unknown names build the whole parser.
# tests/app/cli/test_cli_commands.py keeps this map equal to what each module registers.
SUBCOMMANDS: dict[str, str] = {
    "check": "qlwf.cli.check",
    "oracle": "qlwf.cli.oracle",
    "conform": "qlwf.cli.conform",
    "replay": "qlwf.cli.conform",
    "prove": "qlwf.cli.prove",
    "explore": "qlwf.cli.explore",
    "audit": "qlwf.cli.audit",
    "traces": "qlwf.cli.traces",
    "show": "qlwf.cli.show",
    "diff": "qlwf.cli.diff",
    "regenerate": "qlwf.cli.regenerate",
    "campaign": "qlwf.cli.campaign",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone when it is one (the others are not imported)."""
    parser = argparse.ArgumentParser(prog="qlwf", description="Formal-model-first verification gate for the ql3 "
                                     "Workflow runtime (ADR-0226 frontier, ADR-0228 cancellation convergence).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = [SUBCOMMANDS[command]] if command in SUBCOMMANDS else dict.fromkeys(SUBCOMMANDS.values())
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command an argument list names: its first argument (qlwf itself takes no options but -h)."""
    return argv[0] if argv and argv[0] in SUBCOMMANDS else None


# -- signals: SIGTERM/SIGINT unwind like an exception, so every finally and context manager runs
# (throwaway clusters, databases on QLWF_PG_DSN), then one line and 128 + signal number.


class Interrupted(BaseException):
    """Raised by the signal handler; a BaseException so no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The handlers main() has installed, and those registered by reset_at_fork
_handlers: set[Callable[[int, FrameType | None], None]] = set()


_masks_at_fork: dict[int, set[int | signal.Signals]] = {}  # per forking thread: its signal mask before the fork


def reset_at_fork(handler: Callable[[int, FrameType | None], None]) -> None:
    """Treat `handler` at forks as main()'s own handlers are treated (Q-70, Q-77): SIGINT/SIGTERM are
    blocked over the fork and a child takes the default dispositions back. For a process that installs
    its own interrupt handler and forks pool workers (the test session's SIGTERM handler)."""
    _handlers.add(handler)


def _ours() -> bool:
    return any(signal.getsignal(sig) in _handlers for sig in _INTERRUPT_SIGNALS)


def _block_signals_for_fork() -> None:
    """Before a fork under main()'s handlers: SIGINT/SIGTERM are blocked in the forking thread, so the
    child starts with them blocked. A signal reaching the child before CPython's after-fork code ran
    would otherwise be caught by the inherited handler and then dropped (CPython clears the pending
    flags in a new child), and whoever joins the child would wait forever (the interrupt handler's
    terminate() signals workers that may not have run a bytecode yet, as a stdlib pool's terminate()
    did); blocked, it stays pending until the default disposition is back (decisions Q-77)."""
    if _ours():
        _masks_at_fork[threading.get_ident()] = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPT_SIGNALS)


def _unblock_signals_after_fork() -> None:
    """In the parent, after the fork: the mask it had (a signal that came meanwhile is delivered now)."""
    mask = _masks_at_fork.pop(threading.get_ident(), None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _default_signals_in_child() -> None:
    """After a fork: a worker (explorer, campaign or conform pool) takes the default dispositions back,
    then the mask its parent had before the fork, so a SIGTERM that came in between ends it.
    A Python-level handler runs only between bytecodes, so a SIGTERM (the interrupt handler's
    terminate(), or a stdlib pool's) arriving just before the worker blocks in a system call would be
    consumed without waking it, and the join would wait forever; the default disposition ends the
    worker wherever it is."""
    for sig in _INTERRUPT_SIGNALS:
        if signal.getsignal(sig) in _handlers:
            try:
                signal.signal(sig, signal.SIG_DFL)
            except ValueError:  # forked from a thread other than the main one: nothing can be set here
                break
    mask = _masks_at_fork.pop(threading.get_ident(), None)
    _masks_at_fork.clear()  # entries of the parent's other threads mean nothing here
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


os.register_at_fork(before=_block_signals_for_fork, after_in_parent=_unblock_signals_after_fork,
                    after_in_child=_default_signals_in_child)


def _install_interrupt_handlers() -> Callable[[], None]:
    owner = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:  # forked, and signalled before the at-fork reset ran: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for sig in _INTERRUPT_SIGNALS:  # teardown must not be cut short by a second one
            signal.signal(sig, signal.SIG_IGN)
        # Teardown abandons connections mid-query; the library warnings saying so are noise.
        logging.disable(logging.WARNING)
        # Pool workers (conform --jobs) would hold the unwinding until their whole chunk is done.
        for child in multiprocessing.active_children():
            child.terminate()
        raise Interrupted(signum)

    _handlers.add(handler)
    previous = {sig: signal.signal(sig, handler) for sig in _INTERRUPT_SIGNALS}
    logging_disabled = logging.root.manager.disable

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _handlers.discard(handler)
        logging.disable(logging_disabled)

    return restore


# The servers this process started (conformance/provision/servers.py), looked up only if it was imported:
# a command that never provisioned a server does not import psycopg for its cleanup.
SERVERS_MODULE = "qlwf.conformance.provision.servers"


def _servers_running() -> frozenset[int]:
    server = sys.modules.get(SERVERS_MODULE)
    return server.live_servers() if server is not None else frozenset()


def _stop_servers(keep: frozenset[int] = frozenset()) -> str:
    """Stop what atexit would stop later, so 'cleaned up' is true when it is printed; servers in
    `keep` were running before the command (an in-process caller's, e.g. a test session's)."""
    for child in multiprocessing.active_children():  # terminated by the handler; their databases go below
        child.join(10)
    server = sys.modules.get(SERVERS_MODULE)
    try:
        if server is not None:
            server.stop_all(keep)
    except Exception as e:  # report, do not mask the interrupt with a traceback
        return f"cleanup failed: {type(e).__name__}: {e}"
    return "cleaned up"


def _exit_if_threads_linger(code: int, grace_s: float = 1.0) -> None:
    """Worker threads (e.g. the concurrency check's) keep looping over their remaining operations
    after the interrupt; everything is torn down already, so do not let the exit wait for them."""
    deadline = time.monotonic() + grace_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. ``argv=None`` means we are the program (sys.argv); callers passing argv
    keep their process: an interrupt then only returns the exit code."""
    args = build_parser(command_of(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    if threading.current_thread() is not threading.main_thread():  # signal handlers need the main thread
        return int(args.func(args))
    restore = _install_interrupt_handlers()
    before = _servers_running()
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, where a reader that went away is caught, not in the interpreter's exit
        return code
    except (Interrupted, KeyboardInterrupt) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        print(f"qlwf: interrupted ({signal.Signals(signum).name}); {_stop_servers(before)}", file=sys.stderr)
        _sweep_drivers()  # here too: a lingering thread ends the process below, past `finally`
        if argv is None:
            _exit_if_threads_linger(128 + signum)
        return 128 + signum
    except Exception as e:  # never exit 1, the code of a counterexample, for what is not one
        return _stopped_by(e, command_of(sys.argv[1:] if argv is None else argv) or "", before)
    finally:
        _sweep_drivers()
        restore()


def _sweep_drivers() -> None:
    """Kill what drivers of this run left outside their process groups (decisions Q-126): each
    driver's own end sweeps its token, but a `--jobs` worker terminated under its driver cannot."""
    left = process_sweep.sweep_run()
    if left:
        print(f"qlwf: killed {len(left)} process(es) that drivers of this run left running: "
              f"{visible(', '.join(left))}", file=sys.stderr)


EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in qlwf, no verdict
EXIT_OS = 71  # EX_OSERR: the system took the process's memory or a worker process, no verdict
EXIT_IO = 74  # EX_IOERR: the storage under an output failed, no verdict


def _stopped_by(e: Exception, command: str, before: frozenset[int]) -> int:
    """The exit of a command stopped by an exception that no command turned into a verdict."""
    if isinstance(e, BrokenPipeError) and stdio.reader_gone():
        # The reader of stdout went away (`qlwf … | head`): stop as a pipeline's writer killed by SIGPIPE
        # would, without a traceback, and with its code, not one of the verdict codes (decisions Q-114).
        stdio.discard_stdout()
        _stop_servers(before)
        return 128 + signal.SIGPIPE
    if isinstance(e, OSError) and e.errno in stdio.IO_ERRNOS:  # a full disk is not a bug (decisions Q-117)
        code, message = EXIT_IO, f"stopped by an I/O error, no verdict: {e}"
    elif (system := system_stop(e)) is not None:  # memory gone, a worker killed (decisions Q-132)
        code, message = EXIT_OS, f"stopped by the system, no verdict: {system}"
    else:
        traceback.print_exc()
        code, message = EXIT_INTERNAL, f"internal error (a bug in qlwf), no verdict: {type(e).__name__}: {e}"
    stdio.settle_stdout()
    print(f"qlwf{' ' + command if command else ''}: {message}", file=sys.stderr)
    _stop_servers(before)
    return code



if __name__ == "__main__":
    sys.exit(main())
