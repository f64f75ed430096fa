"""What one writing try already knows about its rows, so the shared command logic's reads of them
cost no round trip (docs/decisions.md Q-62).

Entries come from:

* lock statements (`SELECT <columns> … FOR UPDATE`, storage.md §6.3): a row locked by this
  transaction cannot change until it ends, except by this transaction's own writes;
* reads sent ahead of their use, and a read repeated with nothing in between (convergence's
  active attempts), only while the transaction reads one snapshot (SERIALIZABLE, REPEATABLE READ):
  every plain read of the transaction then returns the same rows whenever it is sent, again except
  for the transaction's own writes.

So every write of the store drops the entries it could change (`drop`) before it is queued, and a
read finds either an entry written by a statement that went out before that write, or nothing and
reads the database (after the queued writes, which it then sees, as before).

An entry is `pending` from the moment its statement is queued until that statement's rows arrive;
a read of a pending entry sends the queue first. Rows arriving for an entry that a write dropped
meanwhile are discarded (the token no longer matches), so a stale read can never land after a write.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

Key = tuple[str, Hashable]  # (what, key): ("run", id), ("lease", attempt id), ("steps_of_run", run id), …


class _Pending:
    """A statement on its way that will fill the entry (compared by identity)."""

    __slots__ = ()


MISSING = object()


class RowCache:
    def __init__(self, flush: Callable[[], None]) -> None:
        self._entries: dict[Key, Any] = {}
        self._flush = flush  # sends the queued statements

    def expect(self, key: Key) -> _Pending:
        """A statement about to be queued will fill `key`; returns its token for `fill`."""
        token = _Pending()
        self._entries[key] = token
        return token

    def fill(self, key: Key, token: _Pending, value: Any) -> None:
        """The rows of the statement behind `token` arrived: keep them unless a write dropped the entry."""
        if self._entries.get(key) is token:
            self._entries[key] = value

    def unfilled(self, key: Key, token: _Pending) -> None:
        """The statement behind `token` did not decide this key (e.g. a StepRun not of the locked Run)."""
        if self._entries.get(key) is token:
            del self._entries[key]

    def get(self, key: Key) -> Any:
        """The entry's value (None is a real answer: no such row), or MISSING: read the database.
        Entries of different kinds have different types: the reader names its kind's type."""
        value = self._entries.get(key, MISSING)
        if isinstance(value, _Pending):
            self._flush()
            value = self._entries.get(key, MISSING)
            if isinstance(value, _Pending):  # a failed batch raises before this; never reached
                return MISSING
        return value

    def drop(self, *keys: Key) -> None:
        """A write of this transaction may change these entries: forget them."""
        for key in keys:
            self._entries.pop(key, None)

    def drop_all(self, what: str) -> None:
        """Forget every entry of one kind (`what`, any key)."""
        for key in [k for k in self._entries if k[0] == what]:
            del self._entries[key]
