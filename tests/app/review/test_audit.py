"""`qlwf audit` (issue 14 §2): stores written by conformance runs audit clean on both backends; hand corruptions
applied with direct SQL are each found, at the right Run and step; the audit never writes; bad input exits 2.

Each corruption names what the spec says it breaks (the expected Run, step and rule come from the corruption
itself: the sequences it moved, the row it edited), not what the audit happens to print.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from qlwf.conformance.backends.postgres import PostgresBackend
from qlwf.conformance.generate import plans
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import run_lockstep
from qlwf.conformance.lockstep.model_port import ModelPort
from qlwf.conformance.provision import PgServer, unique_database_name
from qlwf.impl.commands.columns import STEP_RUNS
from qlwf.impl.postgres import readonly as pg_readonly
from qlwf.impl.readonly import UnreadableDatabase
from qlwf.impl.sqlite import readonly as sqlite_readonly
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.model.canonical import canonical_text
from qlwf.model.records import seal_step_run

from qlwf.cli.entry import main as cli_main
from qlwf.review.audit import RunAudit, audit_snapshot

Record = dict[str, Any]
CORPUS = {t.name: t for t in runner.corpus_traces()}
DRIFT = sorted(n for n, t in CORPUS.items() if any(s["op"] == "corrupt" for s in t.steps))
CLEAN = sorted(set(CORPUS) - set(DRIFT))
# Five running Runs side by side: a corruption of one must leave the other four clean.
BASE = "adr0226-bounded-candidate-paging"
TARGET_RUN = "run-2"


def by_run(results: list[RunAudit]) -> dict[str, RunAudit]:
    return {r.run_id: r for r in results}


def write_sqlite(trace_name: str, path: Path) -> SqliteAdapter:
    """A file-backed store holding the trace's end state; lockstep proves it equals the model's."""
    adapter = SqliteAdapter(path)
    result = run_lockstep(CORPUS[trace_name], adapter)
    assert result.passed, result.divergence.render() if result.divergence else ""
    return adapter


@pytest.fixture(scope="module")
def sqlite_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("audit-sqlite")
    out = {}
    for name in CORPUS:
        out[name] = directory / f"{name}.db"
        write_sqlite(name, out[name]).close()
    return out


# ------------------------------------------------------------------------------------------------
# Clean stores
def test_stores_written_by_the_corpus_audit_clean_on_sqlite(sqlite_stores: dict[str, Path]) -> None:
    for name in CLEAN:
        snap = sqlite_readonly.load(sqlite_stores[name])
        results = audit_snapshot(snap)
        assert [r.run_id for r in results] == [r["id"] for r in snap["runs"]] and results
        assert all(r.events == sum(e["runId"] == r.run_id for e in snap["events"]) for r in results)
        assert [f for r in results for f in r.findings] == [], name


def test_stores_corrupted_by_drift_injection_are_not_clean(sqlite_stores: dict[str, Path]) -> None:
    """The corpus's drift traces overwrite stored records behind the commands' back."""
    assert DRIFT
    for name in DRIFT:
        assert not all(r.ok for r in audit_snapshot(sqlite_readonly.load(sqlite_stores[name]))), name


def test_cli_exit_codes_and_lines(sqlite_stores: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = sqlite_stores[BASE]
    assert cli_main(["audit", "--sqlite", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [r["id"] for r in sqlite_readonly.load(path)["runs"]]
    assert [line.split(":")[0] for line in lines[:-1]] == runs and all(": ok (" in line for line in lines[:-1])
    assert cli_main(["audit", "--sqlite", str(path), "--run", TARGET_RUN, "--json"]) == 0
    assert '"runId": "run-2"' in capsys.readouterr().out
    assert cli_main(["audit", "--sqlite", str(sqlite_stores[DRIFT[0]])]) == 1
    assert "FAIL" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# The catalogue of corruptions, for both dialects
@dataclass(frozen=True)
class Expected:
    run_id: str
    where: str
    check: str


class Store(ABC):
    """Direct SQL on one dialect: `?` placeholders, PascalCase table names; every write commits."""

    dialect: str

    @abstractmethod
    def table(self, name: str) -> str:
        """Per dialect."""

    @abstractmethod
    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Per dialect."""

    @abstractmethod
    def write(self, statements: list[tuple[str, tuple[Any, ...]]], *, bypass_checks_on: str | None = None) -> None:
        """Per dialect."""

    @abstractmethod
    def json_key_set(self, column: str, key: str) -> str:
        """Per dialect."""

    @abstractmethod
    def schema(self, statements: list[str]) -> None:
        """DDL, per dialect, committed."""

    json_param = "?"


class SqliteStore(Store):
    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def table(self, name: str) -> str:
        return f'"{name}"'

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.path)) as conn:  # `with connect()` alone does not close
            return conn.execute(sql, params).fetchall()

    def write(self, statements: list[tuple[str, tuple[Any, ...]]], *, bypass_checks_on: str | None = None) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            if bypass_checks_on is not None:  # the schema allows it: CHECKs are off for this connection only
                conn.execute("PRAGMA ignore_check_constraints = ON")
            conn.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                assert conn.execute(sql, params).rowcount >= 1, sql
            conn.execute("COMMIT")
        finally:
            conn.close()

    def json_key_set(self, column: str, key: str) -> str:
        return f"json_set({column}, '$.{key}', ?)"

    def schema(self, statements: list[str]) -> None:
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            for sql in statements:
                conn.execute(sql)


_PG_TABLES = {"Runs": "ql3.runs", "RunEvents": "ql3.run_events", "StepRuns": "ql3.step_runs",
              "RunAttempts": "ql3.run_attempts",
              "RunDispatchLeases": "ql3.run_dispatch_leases", "StepRunMutations": "ql3.step_run_mutations"}


def _pg(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class PgStore(Store):
    dialect = "postgres"
    json_param = "?::jsonb"

    def __init__(self, backend: PostgresBackend) -> None:
        self.backend = backend
        self.dsn = backend.database.conninfo

    def table(self, name: str) -> str:
        return _PG_TABLES[name]

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(_pg(sql), params).fetchall()

    def write(self, statements: list[tuple[str, tuple[Any, ...]]], *, bypass_checks_on: str | None = None) -> None:
        with psycopg.connect(self.dsn) as conn, conn.transaction():
            checks = []
            if bypass_checks_on is not None:
                # PostgreSQL cannot switch CHECKs off per statement: drop them for this write and add them back
                # NOT VALID (later writes are checked again); the reset of the next case revalidates them.
                table = self.table(bypass_checks_on)
                checks = conn.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                                      "WHERE conrelid = %s::regclass AND contype = 'c'", (table,)).fetchall()
                for name, _ in checks:
                    conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
                self.backend.database.mark_checks_invalidated()
            for sql, params in statements:
                assert conn.execute(_pg(sql), params).rowcount >= 1, sql
            for name, definition in checks:
                conn.execute(f'ALTER TABLE {self.table(bypass_checks_on or "")} ADD CONSTRAINT "{name}" '
                             f'{definition.removesuffix(" NOT VALID")} NOT VALID')

    def json_key_set(self, column: str, key: str) -> str:
        return f"jsonb_set({column}, '{{{key}}}', to_jsonb(?::text))"

    def schema(self, statements: list[str]) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)


Corruption = Callable[[Store, Callable[[], dict[str, Any]]], Expected]


def swap_two_step_events(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """Two step events of one Run exchange their sequences; each ledger entry still names the old one."""
    (i, j), = store.rows(f"SELECT min(sequence), max(sequence) FROM {store.table('RunEvents')} "
                         "WHERE run_id = ? AND type LIKE 'step.%'", TARGET_RUN)
    t = store.table("RunEvents")
    store.write([(f"UPDATE {t} SET sequence = 1000000 WHERE run_id = ? AND sequence = ?", (TARGET_RUN, i)),
                 (f"UPDATE {t} SET sequence = ? WHERE run_id = ? AND sequence = ?", (i, TARGET_RUN, j)),
                 (f"UPDATE {t} SET sequence = ? WHERE run_id = ? AND sequence = 1000000", (j, TARGET_RUN))])
    return Expected(TARGET_RUN, f"event {i}", "INV-8")


def skip_a_sequence(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """Every event from the middle of the log on moves up by one: sequence k is missing."""
    (n,), = store.rows(f"SELECT count(*) FROM {store.table('RunEvents')} WHERE run_id = ?", TARGET_RUN)
    k = n // 2
    t = store.table("RunEvents")
    store.write([(f"UPDATE {t} SET sequence = sequence + 1000000 WHERE run_id = ? AND sequence >= ?", (TARGET_RUN, k)),
                 (f"UPDATE {t} SET sequence = sequence - 999999 WHERE run_id = ? AND sequence >= 1000000",
                  (TARGET_RUN,))])
    return Expected(TARGET_RUN, f"event {k}", "INV-2")


def forge_a_terminal(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """A running Run is marked succeeded, with a plausible finish time, but no workflow.succeeded event."""
    (last,), = store.rows(f"SELECT max(created_at_ms) FROM {store.table('RunEvents')} WHERE run_id = ?", TARGET_RUN)
    store.write([(f"UPDATE {store.table('Runs')} SET status = 'succeeded', finished_at_ms = ? "
                  "WHERE id = ? AND status = 'running'", (last, TARGET_RUN))])
    return Expected(TARGET_RUN, "Run", "INV-12")


def edit_a_step_run_digest(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """stepRunDigest edited in the column and its JSON mirror alike (the row checks hold)."""
    step_id = f"{TARGET_RUN}:a"
    forged = "0" * 64
    store.write([(f"UPDATE {store.table('StepRuns')} SET step_run_digest = ?, "
                  f"step_run_json = {store.json_key_set('step_run_json', 'stepRunDigest')} WHERE id = ?",
                  (forged, forged, step_id))])
    return Expected(TARGET_RUN, f"StepRun {step_id}", "digest")


def edit_a_step_run_without_its_ledger(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """A StepRun's status changed (ready → pending) with its JSON mirror and a recomputed digest, but no
    ledger entry or event: a self-consistent row that no model step produced."""
    step = next(s for s in snapshot()["stepRuns"] if s["runId"] == TARGET_RUN and s["status"] == "ready")
    edited = seal_step_run(dict(step, status="pending", readyAtMs=None))
    values = STEP_RUNS.to_row(edited, bools_as_int=store.dialect == "sqlite")
    assignments = ", ".join(f"{c} = ?" for c in STEP_RUNS.columns)
    store.write([(f"UPDATE {store.table('StepRuns')} SET {assignments}, step_run_json = {store.json_param} "
                  "WHERE id = ?", (*values, canonical_text(edited), step["id"]))])
    return Expected(TARGET_RUN, f"StepRun {step['id']}", "replay")


def decrement_a_lease_version(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """The lease's version goes back by one; its mirror on the attempt (D-10) keeps the real one."""
    lease = next(x for x in snapshot()["leases"] if x["version"] >= 1)
    store.write([(f"UPDATE {store.table('RunDispatchLeases')} SET version = version - 1 WHERE attempt_id = ?",
                  (lease["attemptId"],))])
    return Expected(lease["runId"], "state", "INV-25")


def expire_a_lease_before_its_renewal(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """expiresAtMs moved before renewedAtMs: the row CHECK refuses it, so checks are bypassed for this write."""
    lease = next(x for x in snapshot()["leases"] if x["status"] == "leased")
    store.write([(f"UPDATE {store.table('RunDispatchLeases')} SET expires_at_ms = renewed_at_ms - 1 "
                  "WHERE attempt_id = ?", (lease["attemptId"],))], bypass_checks_on="RunDispatchLeases")
    return Expected(lease["runId"], f"lease {lease['attemptId']}", "INV-26")


def break_a_ledger_post_image(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """A ledger entry's post-image is not even an object (checks bypassed): the audit reports the step, it
    does not crash on the row."""
    entry = max((m for m in snapshot()["mutations"] if m["runId"] == TARGET_RUN), key=lambda m: m["eventSequence"])
    store.write([(f"UPDATE {store.table('StepRunMutations')} SET step_run_json = {store.json_param} "
                  "WHERE mutation_id = ?", ("[]", entry["mutationId"]))], bypass_checks_on="StepRunMutations")
    return Expected(TARGET_RUN, f"event {entry['eventSequence']}", "INV-8")


def edit_a_json_mirror_alone(store: Store, snapshot: Callable[[], dict[str, Any]]) -> Expected:
    """Only step_run_json changes (status); the mirror CHECK refuses that, so checks are bypassed for it."""
    step_id = f"{TARGET_RUN}:a"
    store.write([(f"UPDATE {store.table('StepRuns')} SET step_run_json = "
                  f"{store.json_key_set('step_run_json', 'status')} WHERE id = ?", ("failed", step_id))],
                bypass_checks_on="StepRuns")
    return Expected(TARGET_RUN, f"StepRun {step_id}", "mirror")


CORRUPTIONS: list[Corruption] = [swap_two_step_events, skip_a_sequence, forge_a_terminal, edit_a_step_run_digest,
                                 edit_a_step_run_without_its_ledger, decrement_a_lease_version,
                                 expire_a_lease_before_its_renewal, break_a_ledger_post_image,
                                 edit_a_json_mirror_alone]


def assert_found_alone(results: list[RunAudit], want: Expected) -> None:
    runs = by_run(results)
    first = runs[want.run_id].first
    assert first is not None, f"{want} not found"
    assert (first.where, first.check) == (want.where, want.check), str(first)
    assert [r for r in runs.values() if not r.ok] == [runs[want.run_id]], "another Run has a finding"


@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda c: c.__name__)
def test_sqlite_corruption_is_found(corruption: Corruption, sqlite_stores: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    shutil.copy(sqlite_stores[BASE], path)
    assert audit_snapshot(sqlite_readonly.load(path)) and all(r.ok for r in audit_snapshot(sqlite_readonly.load(path)))
    want = corruption(SqliteStore(path), lambda: sqlite_readonly.load(path))
    assert_found_alone(audit_snapshot(sqlite_readonly.load(path)), want)


# ------------------------------------------------------------------------------------------------
# The stored text itself (SQLite only: storage.md §1 stores the canonical JSON text; jsonb keeps no text)
def _rewrite_text(path: Path, table: str, column: str, key_column: str, edit: Callable[[str], str]) -> str:
    """Rewrites one JSON text of the target Run (the first by key) with `edit`; returns the row's key. The
    value stays the same, so no CHECK of the schema can see it; they are off all the same, as a foreign
    writer's would be."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        key, text = conn.execute(f'SELECT {key_column}, {column} FROM "{table}" WHERE run_id = ? ORDER BY '
                                 f"{key_column} LIMIT 1", (TARGET_RUN,)).fetchone()
        edited = edit(text)
        assert edited != text and json.loads(edited) == json.loads(text), "the value is unchanged"
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(f'UPDATE "{table}" SET {column} = ? WHERE {key_column} = ?', (edited, key))
    return str(key)


def _sorted_keys(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _repeat_first_key(text: str) -> str:  # the repeated member comes first, so the value stays the stored one
    first: str = next(iter(json.loads(text)))
    return '{"' + first + '":"an earlier value",' + text[1:]


def _escape_a_letter(text: str) -> str:  # "runId" spelled with an escape: same JSON value, other bytes
    return text.replace('"runId"', '"run\\u0049d"', 1)


@pytest.mark.parametrize(("table", "column", "key_column", "edit", "reason"), [
    ("StepRuns", "step_run_json", "id", _sorted_keys, "not the canonical JSON of its value: byte 2"),
    ("RunEvents", "payload", "id", _repeat_first_key, "not strict JSON: duplicate key"),
    ("QingLong3PluginPackageWorkflowAdmissions", "plan_json", "plan_digest", _escape_a_letter,
     "not the canonical JSON of its value"),
    ("QingLong3PluginPackageWorkflowTaskAttemptAdmissions", "receipt_json", "attempt_id", _sorted_keys,
     "not the canonical JSON of its value"),
])
def test_a_json_text_that_is_not_canonical_is_found(table: str, column: str, key_column: str,
                                                    edit: Callable[[str], str], reason: str,
                                                    sqlite_stores: dict[str, Path], tmp_path: Path) -> None:
    """Decisions Q-116: the same value in other bytes (another key order, a repeated key, an escape) passed."""
    path = tmp_path / "store.db"
    shutil.copy(sqlite_stores[BASE], path)
    key = _rewrite_text(path, table, column, key_column, edit)
    results = audit_snapshot(sqlite_readonly.load(path))
    assert_found_alone(results, Expected(TARGET_RUN, f"{table}.{column} {key}", "json_text"))
    assert [f for r in results for f in r.findings if f.check == "json_text"] == [by_run(results)[TARGET_RUN].first]
    assert reason in str(by_run(results)[TARGET_RUN].first)


# ------------------------------------------------------------------------------------------------
# Runs of other trigger types (decisions Q-118)
OTHER_RUN_IDS = ("cron-1", "manual-2")


def add_runs_of_other_trigger_types(store: Store) -> None:
    """What a live ql3 database holds beside workflow Runs: a cron Run with an event and an attempt of its
    own shape, and a manual Run that ended. None of them is the model's; before Q-118 the audit called each
    a failing workflow Run (no admission, no terminal event), so every real database audited with exit 1."""
    run_columns = ("id, project_id, task_id, task_revision, trigger_type, execution_origin, execution_owner, "
                   "status, version, event_sequence, created_at_ms, finished_at_ms")
    store.write([
        (f"INSERT INTO {store.table('Runs')} ({run_columns}) VALUES "
         "(?, 'proj-1', 'backup', 'r1', 'cron', 'scheduled_system', 'runtime', 'running', 1, 1, 5, NULL)",
         (OTHER_RUN_IDS[0],)),
        (f"INSERT INTO {store.table('Runs')} ({run_columns}) VALUES "
         "(?, 'proj-1', 'sync', 'r1', 'manual', 'manual', 'runtime', 'succeeded', 0, 0, 5, 9)", (OTHER_RUN_IDS[1],)),
        (f"INSERT INTO {store.table('RunEvents')} (id, run_id, sequence, type, actor_type, payload, created_at_ms) "
         "VALUES ('cron-1-e1', ?, 1, 'run.started', 'scheduler', '{\"note\":\"legacy\"}', 6)", (OTHER_RUN_IDS[0],)),
        (f"INSERT INTO {store.table('RunAttempts')} (id, run_id, attempt, status, executor_type, callback_sequence, "
         "created_at_ms) VALUES ('cron-1-a1', ?, 1, 'running', 'shell', 0, 6)", (OTHER_RUN_IDS[0],)),
    ])


def assert_others_not_audited(load: Callable[[], dict[str, Any]], argv: list[str],
                              capsys: pytest.CaptureFixture[str]) -> None:
    results = audit_snapshot(load())
    assert results and all(r.ok for r in results), [str(r.first) for r in results if r.first]
    assert not {r.run_id for r in results} & set(OTHER_RUN_IDS)
    assert cli_main(["audit", *argv]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("; 2 Runs of other trigger types not audited")
    assert cli_main(["audit", *argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["otherRuns"] == 2
    assert cli_main(["audit", *argv, "--run", OTHER_RUN_IDS[0]]) == 2
    assert "no workflow Run 'cron-1' in the database" in capsys.readouterr().err
    assert cli_main(["audit", *argv, "--run", TARGET_RUN, "--json"]) == 0  # one Run's rows alone
    one = json.loads(capsys.readouterr().out)
    assert (one["runs"], [r["runId"] for r in one["results"]]) == (1, [TARGET_RUN])
    assert one["results"][0]["events"] == sum(e["runId"] == TARGET_RUN for e in load()["events"])


def test_runs_of_other_trigger_types_are_not_audited_on_sqlite(sqlite_stores: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "store.db"
    shutil.copy(sqlite_stores[BASE], path)
    add_runs_of_other_trigger_types(SqliteStore(path))
    assert_others_not_audited(lambda: sqlite_readonly.load(path), ["--sqlite", str(path)], capsys)


def test_a_database_without_a_workflow_run_is_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An audit of nothing is no evidence: exit 3, not the 0 of "every Run is clean" (Q-118)."""
    path = tmp_path / "empty.db"
    SqliteAdapter(str(path)).close()  # the layout, no Run
    assert cli_main(["audit", "--sqlite", str(path)]) == 3
    assert capsys.readouterr().err == "qlwf audit: no workflow Run in the database: nothing audited, no verdict\n"
    add_runs_of_other_trigger_types(SqliteStore(path))
    assert cli_main(["audit", "--sqlite", str(path), "--json"]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and "; 2 Runs of other trigger types not audited: nothing audited" in captured.err


# ------------------------------------------------------------------------------------------------
# Columns beyond the v1 subset (storage.md §9; decisions Q-119)
EXTRA_COLUMNS = {"Runs": ("node_id", "id", "Run"), "RunAttempts": ("log_path", "id", "attempt {}"),
                 "RunDispatchLeases": ("shard", "attempt_id", "lease {}")}


def widen_the_generic_tables(store: Store) -> list[str]:
    """ql3's generic tables with one more nullable column each, as §9 allows; returns the DDL that undoes it."""
    store.schema([f"ALTER TABLE {store.table(t)} ADD COLUMN {c} {'TEXT' if store.dialect == 'sqlite' else 'text'}"
                  for t, (c, _, _) in EXTRA_COLUMNS.items()])
    return [f"ALTER TABLE {store.table(t)} DROP COLUMN {c}" for t, (c, _, _) in EXTRA_COLUMNS.items()]


def fill_an_extra_column(store: Store, table: str) -> Expected:
    """One row of the target Run gets a value in its table's extra column: §9 allows none for workflow data."""
    column, key, where = EXTRA_COLUMNS[table]
    run_column = "id" if table == "Runs" else "run_id"
    (row_key,), = store.rows(f"SELECT min({key}) FROM {store.table(table)} WHERE {run_column} = ?", TARGET_RUN)
    store.write([(f"UPDATE {store.table(table)} SET {column} = 'set by a foreign writer' WHERE {key} = ?",
                  (row_key,))])
    return Expected(TARGET_RUN, where.format(row_key), "storage")


@pytest.mark.parametrize("table", list(EXTRA_COLUMNS))
def test_a_value_in_a_column_beyond_the_v1_subset_is_found(table: str, sqlite_stores: dict[str, Path],
                                                           tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    shutil.copy(sqlite_stores[BASE], path)
    store = SqliteStore(path)
    widen_the_generic_tables(store)
    assert all(r.ok for r in audit_snapshot(sqlite_readonly.load(path))), "NULL in an extra column is allowed"
    want = fill_an_extra_column(store, table)
    assert_found_alone(audit_snapshot(sqlite_readonly.load(path)), want)


def test_stored_terminal_escapes_are_shown_not_obeyed(sqlite_stores: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Decisions Q-124: a finding quotes stored text, which went to the terminal as it was."""
    path = tmp_path / "store.db"
    shutil.copy(sqlite_stores[BASE], path)
    SqliteStore(path).write([("UPDATE \"Runs\" SET status = 'x' || char(27) || '[2J' WHERE id = ?", (TARGET_RUN,))],
                            bypass_checks_on="Runs")
    assert cli_main(["audit", "--sqlite", str(path)]) == 1
    out = capsys.readouterr().out
    assert "status x\\x1b[2J is not a workflow Run status" in out and "\x1b" not in out


def test_an_intent_without_its_reason_still_has_the_later_identifiers_checked() -> None:
    """The cancel request id recipe needs the stored reason: without it that one recipe is skipped (INV-14 reports
    the unpaired intent), and the identifiers of the events after it are still checked."""
    port = ModelPort(1000)
    port.execute("admit_workflow", {"plan": plans.make_plan("run-1", "plan-1", {"a": []}, 1000)})
    admitted = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": plans.step_run_id("run-1", "a"),
                                                   "binding": plans.binding("a")}, now=1001)
    aid = admitted["attempt"]["id"]
    lease = port.execute("claim_lease", {"attemptId": aid, "workerId": "w1", "durationMs": 30000}, now=1002)["lease"]
    fence = {"attemptId": aid, "workerId": "w1", "leaseGeneration": lease["leaseGeneration"]}
    port.execute("start_attempt", {**fence, "timeoutMs": None}, now=1003)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "system"}}, now=1004)
    port.execute("complete_attempt", {**fence, "exitCode": 0}, now=1005)
    snap = port.snapshot()
    snap["runs"] = [{k: v for k, v in r.items() if k != "cancelReason"} for r in snap["runs"]]
    [cancelled] = [i for i, e in enumerate(snap["events"]) if e["type"] == "workflow.task_attempt.cancelled"]
    forged = "wxa:" + "0" * 32
    snap["events"][cancelled] |= {"id": forged, "dedupeKey": forged}
    [result] = audit_snapshot(snap)
    assert [(f.where, f.check) for f in result.findings] == [(f"event {cancelled + 1}", "identifier"),
                                                             ("state", "INV-14")], [str(f) for f in result.findings]


# ------------------------------------------------------------------------------------------------
# The audit writes nothing
def sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def test_auditing_a_live_sqlite_store_changes_neither_the_file_nor_its_wal(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    wal = Path(f"{path}-wal")
    adapter = write_sqlite("adr0227-worker-protocol", path)  # kept open: committed pages still sit in the WAL
    try:
        assert wal.exists() and wal.stat().st_size > 0
        before = (sha256(path), sha256(wal))
        assert cli_main(["audit", "--sqlite", str(path), "--json"]) == 0
        assert (sha256(path), sha256(wal)) == before
    finally:
        adapter.close()


def test_the_sqlite_connection_of_the_audit_refuses_writes(sqlite_stores: dict[str, Path]) -> None:
    conn = sqlite_readonly.open_read_only(sqlite_stores[BASE])
    try:
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only"):
            conn.execute('DELETE FROM "Runs"')
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------------
# Bad input
def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    return captured.err


def test_bad_sqlite_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such file" in one_line_exit_2(["audit", "--sqlite", str(tmp_path / "missing.db")], capsys)
    assert not (tmp_path / "missing.db").exists()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all, just text" * 64)
    assert "not a database" in one_line_exit_2(["audit", "--sqlite", str(garbage)], capsys)
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert "not a qlwf/ql3" in one_line_exit_2(["audit", "--sqlite", str(other)], capsys)


def test_a_record_nested_past_the_decoders_limit_is_unreadable_not_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A StepRun's JSON mirror nested 100,000 deep (decisions Q-104): before, a RecursionError traceback."""
    path = tmp_path / "deep.db"
    port = SqliteAdapter(str(path))
    try:
        port.execute("admit_workflow", {"plan": plans.make_plan("run-1", "plan-1", {"a": []}, 1_000_000)},
                     now=1_000_000)
    finally:
        port.close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute('UPDATE "StepRuns" SET step_run_json = ?', ("[" * 100_000 + "]" * 100_000,))
    assert "not a readable qlwf/ql3 SQLite database" in one_line_exit_2(["audit", "--sqlite", str(path)], capsys)


def test_malformed_dsn_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert "malformed DSN" in one_line_exit_2(["audit", "--pg", "dbname='unterminated"], capsys)
    assert "cannot connect" in one_line_exit_2(["audit", "--pg", "host=127.0.0.1 port=1 dbname=x"], capsys)


# ------------------------------------------------------------------------------------------------
# PostgreSQL
def write_postgres(backend: PostgresBackend, trace_name: str) -> None:
    """The trace's end state kept in the backend's database (the next `open()` empties it)."""
    port = backend.open()
    try:
        result = run_lockstep(CORPUS[trace_name], port)
    finally:
        port.close()
    assert result.passed, result.divergence.render() if result.divergence else ""


@pytest.mark.postgres
def test_stores_written_by_the_corpus_audit_clean_on_postgres(pg_backend: PostgresBackend,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    dsn = pg_backend.database.conninfo
    for name in (BASE, "adr0227-worker-protocol", "adr0228-timeout-mapping", "adr0226-failure-skips-chain"):
        write_postgres(pg_backend, name)
        results = audit_snapshot(pg_readonly.load(dsn))
        assert results and [f for r in results for f in r.findings] == [], name
    assert cli_main(["audit", "--pg", dsn]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("audit: ")


@pytest.mark.postgres
@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda c: c.__name__)
def test_postgres_corruption_is_found(corruption: Corruption, pg_backend: PostgresBackend) -> None:
    write_postgres(pg_backend, BASE)
    dsn = pg_backend.database.conninfo
    assert all(r.ok for r in audit_snapshot(pg_readonly.load(dsn)))
    want = corruption(PgStore(pg_backend), lambda: pg_readonly.load(dsn))
    assert_found_alone(audit_snapshot(pg_readonly.load(dsn)), want)


@pytest.mark.postgres
def test_runs_of_other_trigger_types_are_not_audited_on_postgres(pg_backend: PostgresBackend,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write_postgres(pg_backend, BASE)
    add_runs_of_other_trigger_types(PgStore(pg_backend))
    dsn = pg_backend.database.conninfo
    assert_others_not_audited(lambda: pg_readonly.load(dsn), ["--pg", dsn], capsys)


@pytest.mark.postgres
def test_a_value_in_a_column_beyond_the_v1_subset_is_found_on_postgres(pg_backend: PostgresBackend) -> None:
    write_postgres(pg_backend, BASE)
    store = PgStore(pg_backend)
    undo = widen_the_generic_tables(store)
    try:
        dsn = pg_backend.database.conninfo
        assert all(r.ok for r in audit_snapshot(pg_readonly.load(dsn))), "NULL in an extra column is allowed"
        wanted = [fill_an_extra_column(store, table) for table in EXTRA_COLUMNS]
        found = by_run(audit_snapshot(pg_readonly.load(dsn)))[TARGET_RUN].findings
        assert sorted((f.where, f.check) for f in found) == sorted((w.where, w.check) for w in wanted)
    finally:
        store.schema(undo)


@pytest.mark.postgres
def test_the_postgres_audit_reads_in_a_read_only_transaction(pg_backend: PostgresBackend,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    write_postgres(pg_backend, BASE)
    dsn = pg_backend.database.conninfo
    seen: list[bool] = []
    read = pg_readonly.PgRuns.parts

    def spy(self: pg_readonly.PgRuns, run_id: str | None = None) -> Iterator[dict[str, list[Record]]]:
        row = self.conn.execute("SELECT current_setting('transaction_read_only')").fetchone()
        seen.append(row is not None and row[0] == "on")
        return read(self, run_id)

    monkeypatch.setattr(pg_readonly.PgRuns, "parts", spy)
    assert all(r.ok for r in audit_snapshot(pg_readonly.load(dsn)))
    assert seen == [True]
    conn = pg_readonly.open_read_only(dsn)
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM ql3.runs")
    finally:
        conn.rollback()
        conn.close()


@pytest.mark.postgres
def test_a_postgres_database_without_the_ql3_layout_is_exit_2(pg_server: PgServer,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_database_name("qlwf_auditempty")
    dsn = pg_server.create_database(name)
    try:
        with pytest.raises(UnreadableDatabase, match="not a qlwf/ql3"):
            pg_readonly.load(dsn)
        assert "not a qlwf/ql3" in one_line_exit_2(["audit", "--pg", dsn], capsys)
    finally:
        pg_server.drop_database(name)



@pytest.mark.postgres
@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, '{"n": ' + "7" * 5000 + "}"], ids=["deep", "long-int"])
def test_a_jsonb_value_python_cannot_decode_is_unreadable_not_a_crash(
        pg_backend: PostgresBackend, capsys: pytest.CaptureFixture[str], value: str) -> None:
    """jsonb takes what Python's decoder refuses: nesting past its recursion limit, an integer past its
    4,300-digit limit. Before Q-108: a RecursionError or ValueError traceback, exit 1."""
    write_postgres(pg_backend, BASE)
    store = PgStore(pg_backend)
    store.write([(f"UPDATE {store.table('StepRuns')} SET step_run_json = ?::jsonb", (value,))],
                bypass_checks_on="StepRuns")
    message = one_line_exit_2(["audit", "--pg", pg_backend.database.conninfo], capsys)
    assert "not a readable qlwf/ql3 PostgreSQL database: a stored JSON value Python cannot decode" in message
