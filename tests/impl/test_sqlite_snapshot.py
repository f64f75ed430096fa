"""The SQLite read-back with decoded rows reused (impl/sqlite/snapshot.py SnapshotReader): after every
step of the corpus and of generated traces, and on stores broken underneath it, it must give exactly
what a plain read (`read_snapshot` with `json.loads`) gives: the same records, key order and JSON
types, for the whole store and for any subset of kinds."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

import orjson
import pytest
from qlwf.conformance.lockstep import compare as lockstep
from qlwf.conformance.lockstep import runner
from qlwf.conformance.traces.format import Trace, model_step
from qlwf.impl.port import SNAPSHOT_KINDS
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.codec import STEP_RUNS
from qlwf.impl.sqlite.memory import open_memory_database
from qlwf.impl.sqlite.snapshot import READERS, SnapshotReader, read_snapshot
from qlwf.model.state import State

SEED = 20261129


def _exact(snapshot: dict[str, list[dict[str, Any]]]) -> bytes:
    """Key order and JSON types kept apart (True vs 1, 1 vs 1.0), kinds in order."""
    return orjson.dumps(list(snapshot.items()))


def _check_every_step(trace: Trace) -> int:
    reader = SnapshotReader()
    steps = 0
    with SqliteAdapter() as port:
        conn = port.connection
        state = State(clock=trace.initial_clock)
        for step in trace.steps:
            done = model_step(state, step)
            if step["op"] == "command":
                lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
            elif step["op"] == "corrupt":
                port.corrupt(step["kind"], step["key"], step["patch"])
            plain = read_snapshot(conn)
            assert _exact(reader(conn)) == _exact(plain)
            some = frozenset(SNAPSHOT_KINDS[steps % 3::3])
            assert _exact(reader(conn, some)) == _exact({k: v for k, v in plain.items() if k in some})
            state, steps = done.state, steps + 1
    return steps


@pytest.mark.parametrize("trace", [*runner.corpus_traces(), *runner.generated_traces(6, SEED)],
                         ids=lambda t: t.name or t.description[:40])
def test_the_reader_equals_a_plain_read_after_every_step(trace: Trace) -> None:
    assert _check_every_step(trace) == len(trace.steps)


def test_unchanged_rows_come_back_as_the_same_records_and_changed_rows_anew() -> None:
    trace = next(iter(runner.generated_traces(1, SEED)))
    with SqliteAdapter() as port:
        state = State(clock=trace.initial_clock)
        for step in trace.steps[:12]:
            done = model_step(state, step)
            if step["op"] == "command":
                lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
            state = done.state
        conn = port.connection
        reader = SnapshotReader()
        first = reader(conn)
        step_run = first["stepRuns"][0]
        conn.execute("PRAGMA ignore_check_constraints = ON")  # the JSON mirror would refuse a column alone
        conn.execute('UPDATE "StepRuns" SET updated_at_ms = updated_at_ms + 1 WHERE id = ?', (step_run["id"],))
        second = reader(conn)
        assert second["stepRuns"][0] is not step_run
        assert second["stepRuns"][0]["updatedAtMs"] == step_run["updatedAtMs"] + 1
        assert all(a is b for a, b in zip(first["stepRuns"][1:], second["stepRuns"][1:], strict=True))
        assert all(a is b for a, b in zip(first["events"], second["events"], strict=True))


def test_the_reader_sees_every_change_underneath_it() -> None:
    """A store changed behind the adapter's back (raw SQL, checks off): still exactly a plain read."""
    trace = runner.corpus_traces()[0]
    with SqliteAdapter() as port:
        state = State(clock=trace.initial_clock)
        for step in trace.steps:
            done = model_step(state, step)
            if step["op"] == "command":
                lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
            state = done.state
        conn = port.connection
        reader = SnapshotReader()
        reader(conn)
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute('UPDATE "StepRuns" SET required = 7, error_summary = ? WHERE rowid = (SELECT min(rowid) '
                     'FROM "StepRuns")', ("broken",))
        conn.execute('UPDATE "RunEvents" SET payload = ? WHERE rowid = (SELECT max(rowid) FROM "RunEvents")',
                     ('{"b":1,"a":[true,1,1.0,-0.0]}',))
        conn.execute('DELETE FROM "RunDispatchLeases"')
        assert _exact(reader(conn)) == _exact(read_snapshot(conn))


def test_a_full_memo_starts_over_and_still_reads_exactly() -> None:
    trace = runner.corpus_traces()[1]
    with SqliteAdapter() as port:
        state = State(clock=trace.initial_clock)
        reader = SnapshotReader(limit=3)
        for step in trace.steps:
            done = model_step(state, step)
            if step["op"] == "command":
                lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
            assert _exact(reader(port.connection)) == _exact(read_snapshot(port.connection))
            assert all(len(decoded) <= 3 + 64 for decoded in reader._decoded.values())
            state = done.state


def test_every_table_holds_only_integers_and_text() -> None:
    """The reader's premise: rows compare with `==` exactly only if no value can be a float (1 == 1.0).
    STRICT tables store a column's declared type only; every column here is INTEGER or TEXT."""
    conn = open_memory_database()
    try:
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        read = {m.group(1) for sql, _ in READERS.values() for m in re.finditer(r'FROM "(\w+)"', sql)}
        assert read <= set(tables)
        for table in tables:
            (sql,) = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (table,)).fetchone()
            assert sql.rstrip().endswith("STRICT"), table
            types = {t.upper() for (_, _, t, *_) in conn.execute(f'PRAGMA table_info("{table}")')}
            assert types <= {"INTEGER", "TEXT"}, (table, types)
        with pytest.raises(sqlite3.Error):  # what STRICT buys: a float never lands in an INTEGER column
            conn.execute(f'INSERT INTO "StepRuns" ({", ".join(STEP_RUNS.columns)}) VALUES '
                         f'({", ".join("1.5" for _ in STEP_RUNS.columns)})')
    finally:
        conn.close()


def test_the_plain_reader_decodes_json_with_the_given_parser() -> None:
    seen: list[str] = []

    def parse(text: str) -> Any:
        seen.append(text)
        return json.loads(text)

    with SqliteAdapter() as port:
        trace = runner.corpus_traces()[0]
        state = State(clock=trace.initial_clock)
        for step in trace.steps:
            done = model_step(state, step)
            if step["op"] == "command":
                lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
            state = done.state
        assert read_snapshot(port.connection, parse) == read_snapshot(port.connection)
    assert seen
