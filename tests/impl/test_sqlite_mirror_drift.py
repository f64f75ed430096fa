"""Mirror-only drift on SQLite: stored JSON text that disagrees with what the record's columns say.

The lockstep harness injects record-level drift only (columns and JSON rewritten together, so the model
can mirror it); these cases corrupt one stored text alone, in each direction a comparison can be
wrong in, and require the command to refuse with the spec's Unavailable reason and write nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from qlwf.conformance.generate import plans
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.model.canonical import canonical_text
from qlwf.model.errors import QlwfError

T0 = 1_000_000
ADMISSIONS = "QingLong3PluginPackageWorkflowAdmissions"
RECEIPTS = "QingLong3PluginPackageWorkflowTaskAttemptAdmissions"


@pytest.fixture
def port() -> Iterator[SqliteAdapter]:
    with SqliteAdapter() as p:
        p.execute("admit_workflow", {"plan": plans.make_plan("run-1", "plan-1", {"a": [], "b": ["a"]}, T0)}, now=T0)
        yield p


def raw_update(port: SqliteAdapter, sql: str, params: tuple[Any, ...] = ()) -> None:
    conn: sqlite3.Connection = port.connection
    conn.execute("PRAGMA ignore_check_constraints = ON")
    try:
        conn.execute(sql, params)
    finally:
        conn.execute("PRAGMA ignore_check_constraints = OFF")


def refusal(port: SqliteAdapter, name: str, args: dict[str, Any]) -> tuple[str, str]:
    before = list(port.connection.iterdump())  # raw rows: the snapshot reader would refuse this store
    with pytest.raises(QlwfError) as err:
        port.execute(name, args, now=T0)
    assert list(port.connection.iterdump()) == before  # one transaction: nothing half-written
    return err.value.error_class, err.value.reason


def admit_attempt(port: SqliteAdapter) -> str:
    out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a",
                                              "binding": plans.binding("a")}, now=T0)
    return str(out["attempt"]["id"])


@pytest.mark.parametrize("column", ["plan_json", "receipt_json"])
@pytest.mark.parametrize("text", ["{", "not json", "[1, 2"])
def test_admission_text_that_is_not_json_is_plan_drift(port: SqliteAdapter, column: str, text: str) -> None:
    raw_update(port, f'UPDATE "{ADMISSIONS}" SET {column} = ?', (text,))
    assert refusal(port, "advance_frontier", {"runId": "run-1"}) == ("Unavailable", "plan_drift")


@pytest.mark.parametrize("edit", ["' ' || receipt_json", "receipt_json || ' '", "replace(receipt_json, ':', ': ')"],
                         ids=["sorts-before", "sorts-after", "spaced"])
def test_a_receipt_text_that_is_not_its_canonical_form_is_receipt_drift(port: SqliteAdapter, edit: str) -> None:
    """The same receipt, re-spaced: it parses and normalizes, but the stored text must be byte-canonical.
    A leading space sorts before the canonical text, a trailing one after it: both must be refused."""
    aid = admit_attempt(port)
    raw_update(port, f'UPDATE "{RECEIPTS}" SET receipt_json = {edit} WHERE attempt_id = ?', (aid,))
    assert refusal(port, "claim_lease", {"attemptId": aid, "workerId": "w1", "durationMs": 5000}) == (
        "Unavailable", "receipt_drift")


def test_a_receipt_drifting_after_it_was_loaded_is_still_receipt_drift(port: SqliteAdapter) -> None:
    """Loads remember a normalized receipt by its exact stored text; a text changed after a command
    loaded the receipt is another key, so the next command reads and refuses it."""
    aid = admit_attempt(port)
    port.execute("claim_lease", {"attemptId": aid, "workerId": "w1", "durationMs": 5000}, now=T0)
    raw_update(port, f'UPDATE "{RECEIPTS}" SET receipt_json = receipt_json || \' \' WHERE attempt_id = ?', (aid,))
    assert refusal(port, "claim_lease", {"attemptId": aid, "workerId": "w1", "durationMs": 5000}) == (
        "Unavailable", "receipt_drift")


def test_drift_injection_rewrites_a_step_runs_json_mirror_with_its_columns(port: SqliteAdapter) -> None:
    """impl.port.FaultInjection: a record-level drift rewrites columns and JSON mirror together, so the
    drift the model mirrors is the only one stored (no extra mirror-only drift)."""
    port.corrupt("stepRuns", ["run-1:b"], {"resultCode": "tampered"})
    (text,) = port.connection.execute('SELECT step_run_json FROM "StepRuns" WHERE id = ?', ("run-1:b",)).fetchone()
    record = next(s for s in port.snapshot()["stepRuns"] if s["id"] == "run-1:b")
    assert record["resultCode"] == "tampered" and text == canonical_text(record)
