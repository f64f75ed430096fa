"""Several statements in one round trip: libpq's pipeline mode, driven directly (storage.md §6.2–§6.3).

Why not psycopg's own `Connection.pipeline()`: it creates a cursor, a result queue entry and a
generator step per statement, which on this project's statements cost more client CPU than the
round trips it saves (docs/decisions.md Q-51, Q-62: a pipeline of five FOR UPDATE reads took 283 µs
of CPU against 212 µs sequentially; this module takes about 70 µs). Here the statements go into
libpq's send buffer back to back, one Sync closes the batch, and the results are read in order.
Parameters are dumped and rows loaded by psycopg's own Transformer, so the values the server
receives and the Python values the store gets are exactly those of `conn.execute`.

The server runs a batch strictly in statement order. When a statement fails, the server skips
every later statement of the batch up to the Sync (they report "pipeline aborted"), and inside a
transaction block the transaction is aborted: a failing statement can never be followed by a
COMMIT of the same batch. `run` reads every result up to the Sync, then raises the first error.

Prepared statements: each connection keeps its own named statements (`qlwf_<n>`), keyed by the
SQL text and the parameter types psycopg chose (an int may travel as int2, int4 or int8), and
prepares a statement the first time it is sent, in the same batch. A name is recorded only when
the server answered its Parse with success, so a Parse skipped by an aborted batch is simply sent
again next time. psycopg's automatic preparation is switched off on these connections
(database.py): psycopg answers a ROLLBACK with `DEALLOCATE ALL` when it has prepared statements of
its own, which would silently drop ours.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import generators, pq
from psycopg.adapt import PyFormat, Transformer

Row = tuple[Any, ...]
MAX_PREPARED = 512  # per connection; past it statements are sent unnamed (the set of our statements is far smaller)

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement of a batch: SQL with `%s` placeholders, and its parameters."""

    sql: str
    params: tuple[Any, ...] = ()


@functools.lru_cache(maxsize=1024)
def numbered(sql: str) -> bytes:
    """`%s` placeholders as `$1`, `$2`, …, as the extended protocol wants them (`%%` is a literal `%`)."""
    counter = iter(range(1, 10_000))

    def replace(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        if m.group(0) != "%s":
            raise ValueError(f"unsupported placeholder {m.group(0)!r} in {sql!r}")
        return f"${next(counter)}"

    return re.sub(r"%.", replace, sql).encode()


class _Prepared:
    """The named statements one connection holds, and the next free name."""

    __slots__ = ("names", "next")

    def __init__(self) -> None:
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self.next = 0


_PREPARED: weakref.WeakKeyDictionary[psycopg.Connection[Any], _Prepared] = weakref.WeakKeyDictionary()
_PREPARED_LOCK = threading.Lock()


def _prepared(conn: psycopg.Connection[Any]) -> _Prepared:
    with _PREPARED_LOCK:
        found = _PREPARED.get(conn)
        if found is None:
            found = _PREPARED[conn] = _Prepared()
        return found


def run(conn: psycopg.Connection[Any], statements: Sequence[Statement]) -> list[list[Row] | None]:
    """Send `statements` as one pipeline (one round trip) and return each one's rows (None for a
    statement that returns no rows). After every result up to the Sync was read, the first error
    is raised; the statements after it did not run."""
    if not statements:
        return []
    pgconn = conn.pgconn
    encoding = conn.info.encoding
    tx = Transformer(conn)
    cache = _prepared(conn)
    # What each expected result belongs to: ("prepare", key, name) or ("query", index).
    expected: list[tuple[Any, ...]] = []
    preparing: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
    with conn.lock:
        pgconn.enter_pipeline_mode()
        try:
            for i, st in enumerate(statements):
                query = numbered(st.sql)
                values = tx.dump_sequence(st.params, [PyFormat.AUTO] * len(st.params)) if st.params else None
                types = tuple(tx.types or ()) if st.params else ()  # dump_sequence set them
                formats = tx.formats if st.params else None
                key = (query, types)
                name = cache.names.get(key) or preparing.get(key)
                if name is None and len(cache.names) + len(preparing) < MAX_PREPARED:
                    name = f"qlwf_{cache.next}".encode()
                    cache.next += 1
                    preparing[key] = name
                    pgconn.send_prepare(name, query, param_types=types or None)
                    expected.append(("prepare", key, name))
                if name is None:
                    pgconn.send_query_params(query, values, param_types=types or None, param_formats=formats)
                else:
                    pgconn.send_query_prepared(name, values, param_formats=formats)
                expected.append(("query", i))
            pgconn.pipeline_sync()
            conn.wait(generators.send(pgconn))
            rows: list[list[Row] | None] = [None] * len(statements)
            error: psycopg.Error | None = None
            for what in expected:
                results = conn.wait(generators.fetch_many(pgconn))
                result = results[-1] if results else None
                if result is None:
                    continue
                if result.status == pq.ExecStatus.FATAL_ERROR:
                    if error is None:
                        error = psycopg.errors.error_from_result(result, encoding=encoding)
                    continue
                if result.status not in _OK:
                    continue  # PIPELINE_ABORTED: skipped after an earlier error
                if what[0] == "prepare":
                    cache.names[what[1]] = what[2]
                elif result.status == pq.ExecStatus.TUPLES_OK:
                    tx.set_pgresult(result)
                    rows[what[1]] = tx.load_rows(0, result.ntuples, tuple)
            conn.wait(generators.fetch_many(pgconn))  # the Sync
        finally:
            _leave_pipeline(conn)
    if error is not None:
        raise error
    return rows


def _leave_pipeline(conn: psycopg.Connection[Any]) -> None:
    """Leave pipeline mode; a connection that cannot (it broke mid-batch, or the wait was interrupted
    with results still unread) is unusable: a broken one stays broken for the pool to discard (so a
    lost commit response still shows as `conn.broken`), an interrupted one is closed."""
    pgconn = conn.pgconn
    if pgconn.pipeline_status == pq.PipelineStatus.OFF:
        return
    if pgconn.status != pq.ConnStatus.OK:
        return
    try:
        pgconn.exit_pipeline_mode()
    except psycopg.OperationalError:
        conn.close()
