"""The operation authority of one SQLite database (storage.md §6.1).

Every operation on the single connection is serialized through one FIFO queue (a fair lock with a
bounded number of waiters). More than 256 waiting operations fail with Unavailable
`storage_busy`; after `close()` every operation fails with Unavailable `storage_closed`; close
waits until the queue has drained.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors


class OperationAuthority:
    def __init__(self, max_pending: int = T.SQLITE_MAX_PENDING_OPERATIONS) -> None:
        self.max_pending = max_pending
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @contextmanager
    def operation(self, fail: CommandErrors) -> Iterator[None]:
        """Hold the connection for one operation, in arrival order."""
        ticket = object()
        with self._cond:
            if self._closed:
                raise fail.unavailable("storage_closed", "the SQLite store is closed")
            # The running operation is the queue head; the others are waiting.
            if len(self._queue) > self.max_pending:
                raise fail.unavailable("storage_busy", f"more than {self.max_pending} operations are waiting")
            self._queue.append(ticket)
            while self._queue[0] is not ticket:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._queue.popleft()
                self._cond.notify_all()

    def close(self) -> None:
        """Refuse new operations, then wait for the queued ones to finish."""
        with self._cond:
            self._closed = True
            while self._queue:
                self._cond.wait()
