"""One pooled connection for one try, query or read-back, with statements queued into round trips.

A writing try sends few round trips (docs/decisions.md Q-62): statements whose results nobody
waits for — BEGIN with its SET LOCAL limits, the lock statements, reads fetched ahead, the deferred
writes, COMMIT — are queued, and go out together, in the order they were queued, with the next
statement whose rows are needed (`fetchall`/`fetchone`), or at `flush`/`commit`. The server runs
them strictly in that order, so queueing never reorders a lock, a read or a write.

`execute` is psycopg's own `Connection.execute`, after the queue went out: code that talks to the
connection directly (scripts, tests' stores that change a row underneath) sees every earlier
statement done, as if nothing had been queued.

A compare-and-set that matched no row fails on the server with SQLSTATE `CAS_FAILED` (schema.sql
`ql3.require_one_row`), which aborts the rest of its batch, COMMIT included; it is raised here as
`ConcurrentChange` (storage.md §5).

`Boundaries` is the crash harness's hook (conformance/faults/pg_crashes.py): it sees every statement just
before it goes out and may interrupt there; the statements of the batch before that point are sent
first (the server ran them), the rest after the interruption.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from psycopg.pq import TransactionStatus
from qlwf.impl.commands.failures import ConcurrentChange

from . import wire
from .failures import CAS_FAILED, sqlstate
from .wire import Row, Statement

RowsCallback = Callable[[list[Row]], None]


class Boundaries(Protocol):
    """Sees every statement of a session just before it is sent."""

    def interrupt_before(self, sql: str, first: bool) -> bool:
        """True: interrupt the session before this statement (`first`: it opens a round trip)."""
        ...

    def interrupt(self, conn: psycopg.Connection[Any]) -> None:
        """The interruption (kill the backend, crash the server); may raise to end the caller."""
        ...

    def sent(self, statements: Sequence[str]) -> None:
        """These statements went out and their results came back."""
        ...


@dataclass
class WireStats:
    """Round trips and statements per command name, over every session of one adapter (thread-safe)."""

    commands: Counter[str] = field(default_factory=Counter)
    round_trips: Counter[str] = field(default_factory=Counter)
    statements: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @contextmanager
    def command(self, name: str) -> Iterator[None]:
        """Count the round trips of this thread under `name` while it lasts."""
        outer = getattr(self._local, "name", None)
        self._local.name = name
        with self._lock:
            self.commands[name] += 1
        try:
            yield
        finally:
            self._local.name = outer

    def add(self, round_trips: int, statements: int) -> None:
        name = getattr(self._local, "name", None) or "read-back"
        with self._lock:
            self.round_trips[name] += round_trips
            self.statements[name] += statements



@dataclass(slots=True)
class Queued:
    statement: Statement
    on_rows: RowsCallback | None = None


class PgSession:
    """A pooled connection seen through a statement queue (see the module docstring)."""

    def __init__(self, conn: psycopg.Connection[Any], stats: WireStats | None = None,
                 boundaries: Boundaries | None = None, pinned_snapshot: bool = False) -> None:
        self.conn = conn
        self.stats = stats
        self.boundaries = boundaries
        # SERIALIZABLE and REPEATABLE READ read one snapshot for the whole transaction: a read sent
        # ahead of its use returns what it would have returned later (own writes aside, which the
        # store accounts for). Under READ COMMITTED every statement sees a new snapshot.
        self.pinned_snapshot = pinned_snapshot
        self.pending: list[Queued] = []
        self.round_trips = 0
        self.statements = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)  # info, pgconn, broken, …: the connection's own

    # ---- queueing -------------------------------------------------------------------------------
    def queue(self, sql: str, params: Sequence[Any] = (), on_rows: RowsCallback | None = None) -> None:
        """Send `sql` with the next round trip; `on_rows` gets its rows once the whole batch succeeded."""
        self.pending.append(Queued(Statement(sql, tuple(params)), on_rows))

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """The rows of `sql`, sent in one round trip with everything queued before it."""
        rows = self._send([*self.pending, Queued(Statement(sql, tuple(params)))])[-1]
        return rows if rows is not None else []

    def fetch_each(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Row]]:
        """The rows of each statement, all sent in one round trip with everything queued before them."""
        batch = [*self.pending, *(Queued(Statement(sql, tuple(params))) for sql, params in statements)]
        results = self._send(batch)[len(batch) - len(statements):]
        return [rows if rows is not None else [] for rows in results]

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        rows = self.fetchall(sql, params)
        return rows[0] if rows else None

    def flush(self) -> None:
        if self.pending:
            self._send(self.pending)

    def commit(self) -> None:
        """The queued statements and COMMIT, in one round trip."""
        self.queue("COMMIT")
        self.flush()

    def rollback(self) -> None:
        """Forget the queue and roll back whatever is open; never raises."""
        self.pending = []
        try:
            if self.conn.info.transaction_status != TransactionStatus.IDLE:
                self.execute("ROLLBACK")
        except psycopg.Error:
            pass  # a broken connection is discarded by the pool

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> psycopg.Cursor[Any]:
        """psycopg's `execute`, after the queue went out (scripts, psycopg.sql objects, direct access)."""
        self.flush()
        text = query if isinstance(query, str) else repr(query)
        if self.boundaries is not None and self.boundaries.interrupt_before(text, True):
            self.boundaries.interrupt(self.conn)
        self._count(1, 1)
        cursor = self.conn.execute(query, params, **kwargs)
        if self.boundaries is not None:
            self.boundaries.sent([text])
        return cursor

    # ---- round trips ------------------------------------------------------------------------------
    def _send(self, batch: list[Queued]) -> list[list[Row] | None]:
        self.pending = []
        statements = [q.statement for q in batch]
        rows: list[list[Row] | None] = []
        start = 0
        if self.boundaries is not None:
            for i, st in enumerate(statements):
                if self.boundaries.interrupt_before(st.sql, i == 0):
                    if i > start:
                        rows += self._round_trip(statements[start:i])
                    start = i
                    self.boundaries.interrupt(self.conn)
        rows += self._round_trip(statements[start:])
        for queued, result in zip(batch, rows, strict=True):
            if queued.on_rows is not None:
                queued.on_rows(result if result is not None else [])
        return rows

    def _round_trip(self, statements: list[Statement]) -> list[list[Row] | None]:
        self._count(1, len(statements))
        try:
            rows = wire.run(self.conn, statements)
        except psycopg.Error as e:
            if sqlstate(e) == CAS_FAILED:
                raise ConcurrentChange(e.diag.message_primary or "a row") from e
            raise
        if self.boundaries is not None:
            self.boundaries.sent([st.sql for st in statements])
        return rows

    def _count(self, round_trips: int, statements: int) -> None:
        self.round_trips += round_trips
        self.statements += statements
        if self.stats is not None:
            self.stats.add(round_trips, statements)
