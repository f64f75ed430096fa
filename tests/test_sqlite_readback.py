"""Reading back only the rows the database logged as changed (impl/sqlite/changes.py,
impl/sqlite/readback.py, decisions Q-65). A pool's store must answer `snapshot_kinds` exactly as a
whole read of the same kinds at that moment, after every step of the corpus and of generated traces,
on broken stores, and whatever changes rows underneath it (raw SQL, REPLACE deletions); and its
write account must include every kind the database saw change."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from qlwf.conformance import lockstep, runner
from qlwf.conformance.trace import Trace, model_step
from qlwf.impl.port import SNAPSHOT_KINDS
from qlwf.impl.sqlite import changes
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.codec import EVENTS
from qlwf.impl.sqlite.memory import MemoryStorePool
from qlwf.impl.sqlite.snapshot import read_snapshot
from qlwf.impl.sqlite.store import SqliteStore
from qlwf.model.state import State

SEED = 20261129


def _exact(snapshot: dict[str, list[dict[str, Any]]]) -> bytes:
    return orjson.dumps(sorted(snapshot.items()))


@contextmanager
def pooled(store_factory: Any = SqliteStore) -> Iterator[SqliteAdapter]:
    pool = MemoryStorePool()
    port = SqliteAdapter(store_factory=store_factory, pool=pool)
    try:
        assert port._changes is not None  # the pool's stores log their changed rows
        yield port
    finally:
        port.close()
        pool.close()


def _agrees(port: SqliteAdapter, kinds: frozenset[str]) -> None:
    """snapshot_kinds(kinds) against a whole read of the raw connection (which a plain reader does)."""
    whole = read_snapshot(port._conn)
    assert _exact(port.snapshot_kinds(kinds)) == _exact({k: v for k, v in whole.items() if k in kinds})


def _run(trace: Trace, port: SqliteAdapter, check_every_step: bool = True) -> int:
    state, steps = State(clock=trace.initial_clock), 0
    port.snapshot()  # the first read is whole, as in lockstep
    for step in trace.steps:
        done = model_step(state, step)
        if step["op"] == "command":
            lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
        elif step["op"] == "corrupt":
            port.corrupt(step["kind"], step["key"], step["patch"])
        written = port.written_kinds()
        if check_every_step:
            # what lockstep reads (the written kinds), and other subsets: kinds not written keep their base
            for kinds in (written, frozenset(SNAPSHOT_KINDS[steps % 4::4]), frozenset(SNAPSHOT_KINDS)):
                _agrees(port, kinds)
        state, steps = done.state, steps + 1
    return steps


@pytest.mark.parametrize("trace", [*runner.corpus_traces(), *runner.generated_traces(8, SEED)],
                         ids=lambda t: t.name or t.description[:40])
def test_changed_rows_reads_equal_whole_reads_after_every_step(trace: Trace) -> None:
    with pooled() as port:
        assert _run(trace, port) == len(trace.steps)


class LedgerSkippingStore(SqliteStore):
    """Broken: forgets the ledger entries of frontier mutations."""

    def insert_mutation(self, entry: dict[str, Any]) -> None:
        if not entry["mutationId"].startswith("workflow-frontier:"):
            super().insert_mutation(entry)


class SilentEventWriter(SqliteStore):
    """Broken: stamps each event it inserts on the previous event too, by raw SQL no account names
    (the Store protocol's account says "events", which is what the insert writes anyway)."""

    def insert_event(self, event: dict[str, Any]) -> None:
        super().insert_event(event)
        self.conn.execute('UPDATE "RunEvents" SET created_at_ms = created_at_ms + 1 WHERE run_id = ? AND '
                          "sequence = ?", (event["runId"], event["sequence"] - 1))


@pytest.mark.parametrize("store", [LedgerSkippingStore, SilentEventWriter])
def test_broken_stores_are_read_back_exactly(store: type[SqliteStore]) -> None:
    for trace in [*runner.corpus_traces()[:4], *runner.generated_traces(3, SEED)]:
        with pooled(store) as port:
            _run(trace, port)


class RunTouchingStore(SqliteStore):
    """Writes a Run row behind the Store protocol: no account of the command logic names "runs"."""

    def insert_event(self, event: dict[str, Any]) -> None:
        super().insert_event(event)
        self.conn.execute('UPDATE "Runs" SET priority = priority WHERE id = ?', (event["runId"],))


def test_the_write_account_includes_every_kind_the_database_saw_change() -> None:
    trace = next(iter(runner.generated_traces(1, SEED)))
    with pooled(RunTouchingStore) as port:
        state, seen = State(clock=trace.initial_clock), 0
        for step in trace.steps:
            done = model_step(state, step)
            if step["op"] == "command":
                got = lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
                written = port.written_kinds()
                if "ok" in got and "events" in written:
                    assert "runs" in written
                    seen += 1
                port.snapshot_kinds(written)
            state = done.state
        assert seen


def _replace_last_event_under_another_key(port: SqliteAdapter) -> None:
    """INSERT OR REPLACE a copy of the newest event with a new id and sequence but the same dedupe
    key: the unique (run_id, dedupe_key) conflict deletes the original, which fires no trigger."""
    conn = port._conn
    columns = list(EVENTS.columns)
    values = ["'replaced-event'" if c == "id" else "sequence + 1000" if c == "sequence" else c for c in columns]
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA ignore_check_constraints = ON")
    try:
        conn.execute(f'INSERT OR REPLACE INTO "RunEvents" ({", ".join(columns)}) SELECT {", ".join(values)} '
                     'FROM "RunEvents" WHERE rowid = (SELECT max(rowid) FROM "RunEvents")')
    finally:
        conn.execute("PRAGMA ignore_check_constraints = OFF")
        conn.execute("PRAGMA foreign_keys = ON")


def test_a_row_deleted_by_replace_without_a_trigger_is_still_read_right() -> None:
    trace = runner.corpus_traces()[0]
    with pooled() as port:
        _run(trace, port, check_every_step=False)
        port.snapshot()
        before = port.snapshot_kinds(frozenset({"events"}))["events"]
        _replace_last_event_under_another_key(port)
        assert port.written_kinds() == frozenset({"events"})
        logged = changes.take(port._conn)
        assert logged == {}  # written_kinds took the log: one key, the inserted row's
        after = read_snapshot(port._conn)["events"]
        assert len(after) == len(before)  # one row replaced by another
        _agrees(port, frozenset({"events"}))  # the count tells, and the kind is read whole


def test_a_connection_handed_out_turns_every_read_into_a_whole_read() -> None:
    with pooled() as port:
        port.connection  # noqa: B018 - the handing out is the point
        assert port._changes is None


def test_only_a_pools_stores_log_their_rows() -> None:
    with SqliteAdapter() as plain:
        assert plain._changes is None
        assert not changes.installed(plain._conn)


def test_a_correct_store_is_never_read_whole_by_a_changed_rows_read(monkeypatch: Any) -> None:
    """The fallback (a whole read when the count disagrees) must stay the exception: on correct
    stores every changed-rows read merges the logged rows alone."""
    from qlwf.impl.sqlite.readback import ChangedRowsReader

    fallbacks: list[Any] = []
    real = ChangedRowsReader.whole

    def whole(self: ChangedRowsReader, conn: Any, kinds: Any = None) -> Any:
        if kinds is not None:
            fallbacks.append(kinds)
        return real(self, conn, kinds)

    monkeypatch.setattr(ChangedRowsReader, "whole", whole)
    for trace in [*runner.corpus_traces()[:3], *runner.generated_traces(3, SEED)]:
        with pooled() as port:
            _run(trace, port)
    assert fallbacks == []
