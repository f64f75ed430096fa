"""Standard output whose reader went away (`qlwf … | head`), and output that cannot be written."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import select
import sys

# Errors of the storage under an output (a full disk or quota, a file past its size limit, a failing
# device): no verdict can be delivered, and none is a verdict itself (decisions Q-117).
IO_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on its write end)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a descriptor (a test's capture)
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def discard_stdout() -> None:
    """Point fd 1 at /dev/null, so that Python's flush at exit does not fail again on the closed pipe
    (Python docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def settle_stdout() -> None:
    """Flush stdout; if that fails too, drop what it holds, so the interpreter's own flush at exit
    does not fail again and turn the exit status into 120."""
    try:
        sys.stdout.flush()
    except OSError:
        with contextlib.suppress(AttributeError, OSError, ValueError):  # a test's capture: nothing to drop
            discard_stdout()


def write_report(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write a report file whole or not at all (decisions Q-117): into a temporary file beside it, then
    renamed over it. If that fails, neither a partial report nor an earlier run's is left at `path`
    (a CI job reading it must not take a stale "passed" for this run's), and the OSError names `path`.
    A target that is not a regular file (a device, a pipe) is written directly; a symbolic link is written
    through, as open() would."""
    target = os.fspath(path)
    if os.path.islink(target):  # the rename replaces the file the link names, not the link
        target = os.path.realpath(target)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        if os.path.exists(target) and not os.path.isfile(target):
            with open(target, "wb") as f:
                f.write(raw)
            return
        directory, name = os.path.split(os.path.abspath(target))
        temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        # O_EXCL: never another's file; mode 0o666 under the umask, as open(target, "w") would create it
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError as e:
        if os.path.isfile(target):
            with contextlib.suppress(OSError):
                os.unlink(target)
        raise OSError(e.errno, e.strerror, target) from e
