"""SQLite conformance schema and migration runner (storage.md §2, §6.1).

Rows are hand-built literals. The workflow used throughout is the derived admission of
records.md §8.2/§8.3 (plan `plan-0001`, Run `run-0001`, steps `fetch` and `report`), so every digest
below is the real one from the specification, although the schema only checks their shape.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from qlwf.impl.sqlite import migrations
from qlwf.impl.sqlite.migrations import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    SchemaVersionError,
    apply_migrations,
    iter_statements,
    open_database,
    schema_version,
)

# --------------------------------------------------------------------------------------------------
# Literal workflow data (records.md §8.2, §8.3)
# --------------------------------------------------------------------------------------------------

RUN_ID = "run-0001"
PLAN_ID = "plan-0001"
PLAN_DIGEST = "8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac3904300583c2d"
RECEIPT_DIGEST = "859d2325758e7c130cc6fe2c8b5ba472bb1e783ecda52bb832c2e8439e8a79a3"
PUBLICATION_DIGEST = "4" * 64
WORKFLOW_DEFINITION_DIGEST = "5" * 64
MATERIALIZED = "3" * 64

ADMISSION_EVENT_ID = "wfa:8f52bf506f9a5824edfd235258e2cace"
FETCH_MUTATION_ID = "wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:1"
FETCH_EVENT_ID = "wfe:8f52bf506f9a5824edfd235258e:1"
FETCH_DIGEST = "d91b792cb73f66df294415695ad64f1b3412f434d6d91c2190923970f3003a10"
FETCH_MUTATION_DIGEST = "a8c562852ab2cfce632a3bce2c8585d33cc59793cf13c275a52b3ac9f52801b6"
REPORT_MUTATION_ID = "wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:2"
REPORT_EVENT_ID = "wfe:8f52bf506f9a5824edfd235258e:2"
REPORT_DIGEST = "84f68d0304ead8f7853ef0e4161bfee6165fc051240df096ca93e735e23db054"
REPORT_MUTATION_DIGEST = "99f4bedcc2f96c6a6eb62e7d982ecaef8c784072b9380360213fe5d008379bc4"

ATTEMPT_ID = "wta:955364285ed507a7fdba9d43dbc8c10f"
ATTEMPT_EVENT_ID = "wte:955364285ed507a7fdba9d43dbc8c10f"
TASK_RECEIPT_DIGEST = "a850e847b992bdefd003c44f9877d33f1e5a894b7619c1d63c5b5b432ead624a"
LEASE_EVENT_ID = "wxa:f70954cfca5dc439deb48588b67afb61"

TABLES = (
    "Runs",
    "RunAttempts",
    "RunEvents",
    "StepRuns",
    "StepRunMutations",
    "QingLong3PluginPackageWorkflowAdmissions",
    "QingLong3PluginPackageWorkflowAdmissionSteps",
    "QingLong3PluginPackageWorkflowTaskAttemptAdmissions",
    "RunDispatchLeases",
)

NAMED_INDEXES = (
    "ql3_runs_project_idempotency_uidx",
    "ql3_local_runs_cancel_requested_idx",
    "ql3_run_attempts_run_attempt_uidx",
    "ql3_run_attempts_lease_idx",
    "ql3_run_events_run_sequence_uidx",
    "ql3_run_events_run_dedupe_uidx",
    "ql3_step_runs_run_id_uidx",
    "ql3_step_runs_run_step_uidx",
    "ql3_step_runs_run_status_idx",
    "ql3_step_runs_recovery_idx",
    "ql3_step_runs_task_candidate_idx",
    "ql3_step_run_mutations_event_uidx",
    "ql3_step_run_mutations_step_idx",
    "ql3_ppw_admissions_frontier_idx",
    "ql3_ppw_task_attempt_admissions_epoch_uidx",
    "ql3_run_dispatch_leases_worker_idx",
    "ql3_run_dispatch_leases_expiry_idx",
)

TRIGGERS = (
    "ql3_run_attempts_step_run_ref_insert_trg",
    "ql3_run_attempts_step_run_ref_update_trg",
    "ql3_run_events_step_run_ref_insert_trg",
    "ql3_run_events_step_run_ref_update_trg",
)

REFERENCE_MISMATCH = "ql3 StepRun reference mismatch"
SQLITE_CONSTRAINT = 19


def cjson(value: Any) -> str:
    """Canonical JSON text (records.md §5.1) of a dict built in canonical key order."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def run_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": RUN_ID,
        "project_id": "proj-1",
        "task_id": "nightly",
        "task_revision": PUBLICATION_DIGEST,
        "task_snapshot_ref": f"plugin-package:{PUBLICATION_DIGEST}:workflow:nightly",
        "trigger_type": "plugin_package_workflow",
        "execution_origin": "system",
        "execution_owner": "runtime",
        "request_id": PLAN_ID,
        "status": "running",
        "version": 3,
        "event_sequence": 3,
        "priority": 0,
        "idempotency_key": f"plugin-package-workflow:{PLAN_ID}",
        "created_at_ms": 1000,
        "started_at_ms": 1000,
        "cancel_requested_at_ms": None,
        "cancel_reason": None,
        "finished_at_ms": None,
        "error_code": None,
        "error_summary": None,
    }
    row.update(changes)
    return row


# StepRun records (records.md §6.3): exactly 24 keys in canonical order, nullable keys explicit.
FETCH_RECORD: dict[str, Any] = {
    "schema": "qinglong/step-run@v1",
    "id": "sr-fetch",
    "runId": RUN_ID,
    "parentStepRunId": None,
    "stepKey": "fetch",
    "kind": "task",
    "definitionRef": f"plugin-package:{MATERIALIZED}:task:fetcher",
    "definitionDigest": "6" * 64,
    "required": True,
    "status": "ready",
    "version": 1,
    "attemptCount": 0,
    "inputRef": None,
    "outputRef": None,
    "approvalRequestId": None,
    "readyAtMs": 1000,
    "startedAtMs": None,
    "finishedAtMs": None,
    "resultCode": None,
    "errorSummary": None,
    "createdAtMs": 1000,
    "updatedAtMs": 1000,
    "lastMutationId": FETCH_MUTATION_ID,
    "stepRunDigest": FETCH_DIGEST,
}

REPORT_RECORD: dict[str, Any] = {
    **FETCH_RECORD,
    "id": "sr-report",
    "stepKey": "report",
    "definitionRef": f"plugin-package:{MATERIALIZED}:task:reporter",
    "definitionDigest": "7" * 64,
    "status": "pending",
    "readyAtMs": None,
    "lastMutationId": REPORT_MUTATION_ID,
    "stepRunDigest": REPORT_DIGEST,
}

_RECORD_TO_COLUMN = {
    "id": "id",
    "runId": "run_id",
    "parentStepRunId": "parent_step_run_id",
    "stepKey": "step_key",
    "kind": "kind",
    "definitionRef": "definition_ref",
    "definitionDigest": "definition_digest",
    "required": "required",
    "status": "status",
    "version": "version",
    "attemptCount": "attempt_count",
    "inputRef": "input_ref",
    "outputRef": "output_ref",
    "approvalRequestId": "approval_request_id",
    "readyAtMs": "ready_at_ms",
    "startedAtMs": "started_at_ms",
    "finishedAtMs": "finished_at_ms",
    "resultCode": "result_code",
    "errorSummary": "error_summary",
    "createdAtMs": "created_at_ms",
    "updatedAtMs": "updated_at_ms",
    "lastMutationId": "last_mutation_id",
    "stepRunDigest": "step_run_digest",
}


def step_run_row(record: dict[str, Any], *, json_text: str | None = None) -> dict[str, Any]:
    """The StepRuns row of a record: columns equal to the keys, step_run_json = canonical JSON."""
    row: dict[str, Any] = {}
    for key, column in _RECORD_TO_COLUMN.items():
        value = record[key]
        row[column] = int(value) if isinstance(value, bool) else value
    row["step_run_json"] = cjson(record) if json_text is None else json_text
    return row


def step_created_event(record: dict[str, Any], event_id: str, sequence: int) -> dict[str, Any]:
    payload = {
        "stepRunId": record["id"],
        "stepKey": record["stepKey"],
        "kind": record["kind"],
        "from": None,
        "to": record["status"],
        "version": record["version"],
        "stepRunDigest": record["stepRunDigest"],
    }
    return event_row(event_id, sequence, "step.created", step_run_id=record["id"], payload=payload)


def event_row(
    event_id: str,
    sequence: int,
    type_: str,
    *,
    actor_type: str = "system",
    actor_id: str | None = None,
    attempt_id: str | None = None,
    step_run_id: str | None = None,
    payload: dict[str, Any] | None = None,
    created_at_ms: int = 1000,
    run_id: str = RUN_ID,
) -> dict[str, Any]:
    return {
        "id": event_id,
        "run_id": run_id,
        "sequence": sequence,
        "type": type_,
        "dedupe_key": event_id,
        "actor_type": actor_type,
        "actor_id": actor_id,
        "attempt_id": attempt_id,
        "step_run_id": step_run_id,
        "payload": cjson(payload if payload is not None else {}),
        "created_at_ms": created_at_ms,
    }


def mutation_row(record: dict[str, Any], event_id: str, sequence: int, digest: str) -> dict[str, Any]:
    return {
        "mutation_id": record["lastMutationId"],
        "mutation_digest": digest,
        "run_id": record["runId"],
        "step_run_id": record["id"],
        "step_run_digest": record["stepRunDigest"],
        "event_id": event_id,
        "event_sequence": sequence,
        "run_version": sequence,
        "step_run_json": cjson(record),
        "committed_at_ms": 1000,
    }


def plan_document() -> dict[str, Any]:
    def step(record: dict[str, Any], task_id: str, needs: list[str]) -> dict[str, Any]:
        return {
            "stepRunId": record["id"],
            "stepKey": record["stepKey"],
            "taskId": task_id,
            "taskDefinitionRef": record["definitionRef"],
            "taskDefinitionDigest": record["definitionDigest"],
            "needs": needs,
            "initialStatus": record["status"],
            "required": True,
        }

    return {
        "schema": "qinglong/plugin-package-workflow-execution-plan@v1",
        "planId": PLAN_ID,
        "runId": RUN_ID,
        "target": {
            "projectId": "proj-1",
            "packageName": "demo-pkg",
            "installationId": "inst-1",
            "lockDigest": "1" * 64,
            "generation": 1,
            "generationDigest": "2" * 64,
            "materializedRevisionDigest": MATERIALIZED,
            "publicationDigest": PUBLICATION_DIGEST,
            "workflowId": "nightly",
            "workflowDefinitionDigest": WORKFLOW_DEFINITION_DIGEST,
        },
        "steps": [step(FETCH_RECORD, "fetcher", []), step(REPORT_RECORD, "reporter", ["fetch"])],
        "plannedAtMs": 1000,
        "planDigest": PLAN_DIGEST,
    }


def admission_receipt_document() -> dict[str, Any]:
    return {
        "schema": "qinglong/plugin-package-workflow-admission-receipt@v1",
        "planId": PLAN_ID,
        "planDigest": PLAN_DIGEST,
        "runId": RUN_ID,
        "publicationDigest": PUBLICATION_DIGEST,
        "workflowId": "nightly",
        "steps": [
            {
                "stepKey": "fetch",
                "stepRunId": "sr-fetch",
                "stepRunDigest": FETCH_DIGEST,
                "mutationId": FETCH_MUTATION_ID,
                "eventId": FETCH_EVENT_ID,
            },
            {
                "stepKey": "report",
                "stepRunId": "sr-report",
                "stepRunDigest": REPORT_DIGEST,
                "mutationId": REPORT_MUTATION_ID,
                "eventId": REPORT_EVENT_ID,
            },
        ],
        "finalRunVersion": 3,
        "finalRunEventSequence": 3,
        "admittedAtMs": 1000,
        "receiptDigest": RECEIPT_DIGEST,
    }


def admission_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "plan_digest": PLAN_DIGEST,
        "plan_id": PLAN_ID,
        "run_id": RUN_ID,
        "project_id": "proj-1",
        "package_name": "demo-pkg",
        "installation_id": "inst-1",
        "lock_digest": "1" * 64,
        "generation": 1,
        "generation_digest": "2" * 64,
        "materialized_revision_digest": MATERIALIZED,
        "publication_digest": PUBLICATION_DIGEST,
        "workflow_id": "nightly",
        "workflow_definition_digest": WORKFLOW_DEFINITION_DIGEST,
        "step_count": 2,
        "admitted_at_ms": 1000,
        "final_run_version": 3,
        "final_run_event_sequence": 3,
        "receipt_digest": RECEIPT_DIGEST,
        "plan_json": cjson(plan_document()),
        "receipt_json": cjson(admission_receipt_document()),
    }
    row.update(changes)
    return row


def admission_step_row(
    record: dict[str, Any], task_id: str, needs: list[str], event_id: str
) -> dict[str, Any]:
    return {
        "plan_digest": PLAN_DIGEST,
        "run_id": RUN_ID,
        "step_key": record["stepKey"],
        "step_run_id": record["id"],
        "task_id": task_id,
        "task_definition_ref": record["definitionRef"],
        "task_definition_digest": record["definitionDigest"],
        "needs_json": cjson(needs),
        "initial_status": record["status"],
        "mutation_id": record["lastMutationId"],
        "event_id": event_id,
    }


def attempt_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": ATTEMPT_ID,
        "run_id": RUN_ID,
        "step_run_id": "sr-fetch",
        "attempt": 1,
        "status": "claimed",
        "executor_type": "remote_worker",
        "worker_id": None,
        "lease_generation": None,
        "lease_version": None,
        "lease_expires_at_ms": None,
        "deadline_at_ms": None,
        "callback_sequence": 0,
        "created_at_ms": 2000,
        "started_at_ms": None,
        "finished_at_ms": None,
        "exit_code": None,
        "error_code": None,
        "error_summary": None,
    }
    row.update(changes)
    return row


def task_receipt_document() -> dict[str, Any]:
    return {
        "schema": "qinglong/plugin-package-workflow-task-attempt-admission@v1",
        "attemptId": ATTEMPT_ID,
        "planDigest": PLAN_DIGEST,
        "runId": RUN_ID,
        "stepRunId": "sr-fetch",
        "stepRunVersion": 1,
        "stepRunDigest": FETCH_DIGEST,
        "resourceTaskId": "fetcher",
        "taskReconciliationReceiptDigest": "8" * 64,
        "taskId": "pkg:demo-pkg:fetcher",
        "taskRevision": "qltd:v1:1:" + "9" * 64,
        "taskDefinitionDigest": "9" * 64,
        "executorType": "remote_worker",
        "executionDigest": "e" * 64,
        "attemptNumber": 1,
        "eventId": ATTEMPT_EVENT_ID,
        "runVersion": 4,
        "runEventSequence": 4,
        "admittedAtMs": 2000,
        "receiptDigest": TASK_RECEIPT_DIGEST,
    }


def task_admission_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "receipt_digest": TASK_RECEIPT_DIGEST,
        "attempt_id": ATTEMPT_ID,
        "plan_digest": PLAN_DIGEST,
        "run_id": RUN_ID,
        "step_run_id": "sr-fetch",
        "step_run_version": 1,
        "step_run_digest": FETCH_DIGEST,
        "generation_digest": "2" * 64,
        "resource_task_id": "fetcher",
        "task_reconciliation_receipt_digest": "8" * 64,
        "project_id": "proj-1",
        "task_id": "pkg:demo-pkg:fetcher",
        "task_revision": "qltd:v1:1:" + "9" * 64,
        "task_definition_digest": "9" * 64,
        "executor_type": "remote_worker",
        "execution_digest": "e" * 64,
        "attempt_number": 1,
        "event_id": ATTEMPT_EVENT_ID,
        "run_version": 4,
        "run_event_sequence": 4,
        "admitted_at_ms": 2000,
        "receipt_json": cjson(task_receipt_document()),
    }
    row.update(changes)
    return row


def lease_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "attempt_id": ATTEMPT_ID,
        "run_id": RUN_ID,
        "status": "leased",
        "version": 0,
        "lease_generation": 1,
        "worker_id": "worker-1",
        "acquired_at_ms": 2100,
        "renewed_at_ms": 2100,
        "expires_at_ms": 7100,
        "released_at_ms": None,
        "release_reason": None,
        "completed_at_ms": None,
        "updated_at_ms": 2100,
    }
    row.update(changes)
    return row


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    conn.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({marks})', tuple(row.values()))


def count(conn: sqlite3.Connection, table: str) -> int:
    n: int = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    return n


def seed_admission(conn: sqlite3.Connection) -> None:
    """admit_workflow's write order (storage.md §4), in one IMMEDIATE transaction."""
    conn.execute("BEGIN IMMEDIATE")
    insert(conn, "Runs", run_row())
    insert(
        conn,
        "RunEvents",
        event_row(
            ADMISSION_EVENT_ID,
            1,
            "workflow.admitted",
            payload={
                "planId": PLAN_ID,
                "planDigest": PLAN_DIGEST,
                "publicationDigest": PUBLICATION_DIGEST,
                "workflowId": "nightly",
                "workflowDefinitionDigest": WORKFLOW_DEFINITION_DIGEST,
                "stepCount": 2,
            },
        ),
    )
    for record, event_id, sequence, digest in (
        (FETCH_RECORD, FETCH_EVENT_ID, 2, FETCH_MUTATION_DIGEST),
        (REPORT_RECORD, REPORT_EVENT_ID, 3, REPORT_MUTATION_DIGEST),
    ):
        insert(conn, "StepRuns", step_run_row(record))
        insert(conn, "RunEvents", step_created_event(record, event_id, sequence))
        insert(conn, "StepRunMutations", mutation_row(record, event_id, sequence, digest))
    insert(conn, "QingLong3PluginPackageWorkflowAdmissions", admission_row())
    insert(
        conn,
        "QingLong3PluginPackageWorkflowAdmissionSteps",
        admission_step_row(FETCH_RECORD, "fetcher", [], FETCH_EVENT_ID),
    )
    insert(
        conn,
        "QingLong3PluginPackageWorkflowAdmissionSteps",
        admission_step_row(REPORT_RECORD, "reporter", ["fetch"], REPORT_EVENT_ID),
    )
    conn.execute("COMMIT")


def seed_attempt_and_lease(conn: sqlite3.Connection) -> None:
    """admit_task_attempt then claim_lease (storage.md §4)."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute('UPDATE "Runs" SET version = 4, event_sequence = 4 WHERE id = ?', (RUN_ID,))
    insert(conn, "RunAttempts", attempt_row())
    receipt = task_receipt_document()
    insert(
        conn,
        "RunEvents",
        event_row(
            ATTEMPT_EVENT_ID,
            4,
            "workflow.task_attempt_admitted",
            attempt_id=ATTEMPT_ID,
            step_run_id="sr-fetch",
            created_at_ms=2000,
            payload={
                "planDigest": PLAN_DIGEST,
                "stepRunId": "sr-fetch",
                "stepRunVersion": 1,
                "resourceTaskId": receipt["resourceTaskId"],
                "taskId": receipt["taskId"],
                "taskRevision": receipt["taskRevision"],
                "executorType": receipt["executorType"],
                "executionDigest": receipt["executionDigest"],
                "attemptNumber": 1,
            },
        ),
    )
    insert(conn, "QingLong3PluginPackageWorkflowTaskAttemptAdmissions", task_admission_row())
    conn.execute("COMMIT")

    conn.execute("BEGIN IMMEDIATE")
    insert(conn, "RunDispatchLeases", lease_row())
    conn.execute(
        'UPDATE "RunAttempts" SET worker_id = ?, lease_generation = 1, lease_version = 0, '
        "lease_expires_at_ms = 7100 WHERE id = ?",
        ("worker-1", ATTEMPT_ID),
    )
    conn.execute('UPDATE "Runs" SET version = 5, event_sequence = 5 WHERE id = ?', (RUN_ID,))
    insert(
        conn,
        "RunEvents",
        event_row(
            LEASE_EVENT_ID,
            5,
            "workflow.task_dispatch_leased",
            actor_type="worker",
            actor_id="worker-1",
            attempt_id=ATTEMPT_ID,
            step_run_id="sr-fetch",
            created_at_ms=2100,
            payload={
                "attempt_id": ATTEMPT_ID,
                "lease_generation": 1,
                "execution_scope": "workflow_task",
                "from_status": "ready",
                "to_status": "ready",
            },
        ),
    )
    conn.execute("COMMIT")


def assert_constraint_error(excinfo: pytest.ExceptionInfo[sqlite3.IntegrityError]) -> None:
    """The error is in the constraint family (primary result code 19 → Conflict)."""
    assert excinfo.value.sqlite_errorcode & 0xFF == SQLITE_CONSTRAINT


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "qlwf.sqlite3"


@pytest.fixture
def conn(db_path: Path) -> Iterator[sqlite3.Connection]:
    connection = open_database(db_path)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture
def seeded(conn: sqlite3.Connection) -> sqlite3.Connection:
    seed_admission(conn)
    return conn


# --------------------------------------------------------------------------------------------------
# Migrations and connection settings
# --------------------------------------------------------------------------------------------------


def schema_objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return conn.execute(
        "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()


def test_schema_version_is_last_migration() -> None:
    assert SCHEMA_VERSION == MIGRATIONS[-1].version == len(MIGRATIONS)
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


def test_migrations_apply_and_create_every_object(conn: sqlite3.Connection) -> None:
    assert schema_version(conn) == SCHEMA_VERSION
    objects = {(kind, name) for kind, name, _ in schema_objects(conn)}
    for table in TABLES:
        assert ("table", table) in objects
    for index in NAMED_INDEXES:
        assert ("index", index) in objects
    for trigger in TRIGGERS:
        assert ("trigger", trigger) in objects
    assert {name for kind, name in objects if kind == "table"} == set(TABLES)


def test_open_is_idempotent(db_path: Path) -> None:
    first = open_database(db_path)
    before = schema_objects(first)
    first.close()
    second = open_database(db_path)
    try:
        assert schema_version(second) == SCHEMA_VERSION
        assert schema_objects(second) == before
        assert apply_migrations(second) == 0
        assert schema_objects(second) == before
    finally:
        second.close()


def test_second_connection_while_first_is_open(db_path: Path) -> None:
    first = open_database(db_path)
    try:
        second = open_database(db_path)
        try:
            assert schema_version(second) == SCHEMA_VERSION
            assert second.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            second.close()
    finally:
        first.close()


def test_open_keeps_data(db_path: Path) -> None:
    first = open_database(db_path)
    seed_admission(first)
    first.close()
    second = open_database(db_path)
    try:
        assert count(second, "StepRuns") == 2
        assert count(second, "RunEvents") == 3
    finally:
        second.close()


def test_user_version_is_set_on_fresh_file(db_path: Path) -> None:
    conn = open_database(db_path)
    conn.close()
    raw = sqlite3.connect(db_path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        raw.close()


def test_newer_user_version_is_refused(db_path: Path) -> None:
    raw = sqlite3.connect(db_path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(SchemaVersionError, match="newer"):
        open_database(db_path)
    raw = sqlite3.connect(db_path)
    try:
        # Nothing was created and the version was not touched.
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert raw.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0
    finally:
        raw.close()


def test_failed_migration_rolls_back_everything(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Migration(2, "broken", lambda: 'CREATE TABLE "Extra" (x INTEGER) STRICT; SELECT * FROM nowhere;')
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, broken))
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", 2)
    with pytest.raises(sqlite3.OperationalError, match="nowhere"):
        open_database(db_path)
    raw = sqlite3.connect(db_path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 0
        assert raw.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0
    finally:
        raw.close()


def test_later_migration_applies_on_top(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_database(db_path).close()
    extra = Migration(2, "extra", lambda: 'CREATE TABLE "Extra" (x INTEGER) STRICT;')
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, extra))
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", 2)
    conn = open_database(db_path)
    try:
        assert schema_version(conn) == 2
        assert conn.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'Extra'").fetchone()[0] == 1
    finally:
        conn.close()


def test_file_database_uses_wal(conn: sqlite3.Connection) -> None:
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_memory_database_stays_in_memory() -> None:
    conn = open_database(":memory:")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "memory"
        assert schema_version(conn) == SCHEMA_VERSION
    finally:
        conn.close()


def test_connection_settings(conn: sqlite3.Connection) -> None:
    assert conn.isolation_level is None
    assert not conn.in_transaction
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_foreign_keys_are_enforced(conn: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY") as excinfo:
        insert(conn, "RunEvents", event_row("ev-orphan", 1, "x", run_id="no-such-run"))
    assert_constraint_error(excinfo)


def test_tables_are_strict(conn: sqlite3.Connection) -> None:
    strict = {row[1]: row[5] for row in conn.execute("PRAGMA table_list") if row[1] in TABLES}
    assert strict == dict.fromkeys(TABLES, 1)


def test_iter_statements_keeps_trigger_bodies_whole() -> None:
    script = (
        "-- leading comment; with a semicolon\n"
        "CREATE TABLE t (x INTEGER);\n"
        "CREATE TRIGGER g BEFORE INSERT ON t BEGIN SELECT 1; SELECT RAISE(ABORT, 'a;b'); END;\n"
        "/* trailing ; comment */\n"
    )
    statements = list(iter_statements(script))
    assert len(statements) == 2
    assert statements[1].startswith("CREATE TRIGGER") and statements[1].endswith("END;")
    with pytest.raises(ValueError, match="incomplete"):
        list(iter_statements("CREATE TABLE t (x INTEGER); CREATE TABLE u (y"))
    assert list(iter_statements("SELECT 1; /* never closed")) == ["SELECT 1;"]  # a trailing comment is blank
    with pytest.raises(ValueError, match="incomplete"):  # text right after a block comment is not
        list(iter_statements("SELECT 1; /* c */x"))


def test_apply_migrations_counts_what_it_applied() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        assert apply_migrations(conn) == len(MIGRATIONS)
        assert apply_migrations(conn) == 0
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------------
# Valid rows are accepted
# --------------------------------------------------------------------------------------------------


def test_valid_workflow_rows_are_accepted(seeded: sqlite3.Connection) -> None:
    seed_attempt_and_lease(seeded)
    assert count(seeded, "Runs") == 1
    assert count(seeded, "StepRuns") == 2
    assert count(seeded, "RunEvents") == 5
    assert count(seeded, "StepRunMutations") == 2
    assert count(seeded, "QingLong3PluginPackageWorkflowAdmissions") == 1
    assert count(seeded, "QingLong3PluginPackageWorkflowAdmissionSteps") == 2
    assert count(seeded, "RunAttempts") == 1
    assert count(seeded, "QingLong3PluginPackageWorkflowTaskAttemptAdmissions") == 1
    assert count(seeded, "RunDispatchLeases") == 1
    assert seeded.execute("PRAGMA foreign_key_check").fetchall() == []
    # SQLite stores exactly the canonical JSON text (storage.md §3).
    stored = seeded.execute('SELECT step_run_json FROM "StepRuns" WHERE id = ?', ("sr-fetch",)).fetchone()[0]
    assert stored == cjson(FETCH_RECORD)
    assert len(json.loads(stored)) == 24


def test_step_run_transition_with_matching_json_is_accepted(seeded: sqlite3.Connection) -> None:
    running = {
        **FETCH_RECORD,
        "status": "running",
        "version": 2,
        "attemptCount": 1,
        "startedAtMs": 2500,
        "updatedAtMs": 2500,
        "lastMutationId": "wxm:b0a14f8f02d01327442341ba14232e7b",
        "stepRunDigest": "f" * 64,
    }
    row = step_run_row(running)
    sets = ", ".join(f"{column} = ?" for column in row)
    cur = seeded.execute(
        f'UPDATE "StepRuns" SET {sets} WHERE id = ? AND version = 1', (*row.values(), "sr-fetch")
    )
    assert cur.rowcount == 1


# --------------------------------------------------------------------------------------------------
# StepRun checks
# --------------------------------------------------------------------------------------------------


def test_step_run_json_disagreeing_with_status_is_rejected(conn: sqlite3.Connection) -> None:
    insert(conn, "Runs", run_row())
    row = step_run_row(FETCH_RECORD)
    row["status"] = "running"  # the column says running, the JSON says ready
    row["started_at_ms"] = 1000
    row["attempt_count"] = 1
    with pytest.raises(sqlite3.IntegrityError, match="ql3_step_runs_json_mirror_ck") as excinfo:
        insert(conn, "StepRuns", row)
    assert_constraint_error(excinfo)
    assert count(conn, "StepRuns") == 0


@pytest.mark.parametrize(
    ("description", "mutate"),
    [
        ("nullable key absent instead of null", lambda r: r.pop("inputRef")),
        ("extra key", lambda r: r.update(extra=1)),
        ("required as integer 1 instead of true", lambda r: r.update(required=1)),
        ("version as string", lambda r: r.update(version="1")),
        ("digest differs from column", lambda r: r.update(stepRunDigest="0" * 64)),
        ("wrong schema", lambda r: r.update(schema="qinglong/step-run@v2")),
        ("null where the column is set", lambda r: r.update(readyAtMs=None)),
    ],
)
def test_step_run_json_mirror_rejects(conn: sqlite3.Connection, description: str, mutate: Any) -> None:
    insert(conn, "Runs", run_row())
    record = dict(FETCH_RECORD)
    mutate(record)
    with pytest.raises(sqlite3.IntegrityError, match="ql3_step_runs_json_mirror_ck"):
        insert(conn, "StepRuns", step_run_row(FETCH_RECORD, json_text=cjson(record)))


@pytest.mark.parametrize("text", ["not json", "[]", '"x"', "{}"])
def test_step_run_json_malformed_is_a_constraint_error(conn: sqlite3.Connection, text: str) -> None:
    insert(conn, "Runs", run_row())
    with pytest.raises(sqlite3.IntegrityError) as excinfo:
        insert(conn, "StepRuns", step_run_row(FETCH_RECORD, json_text=text))
    assert_constraint_error(excinfo)


def test_step_run_timestamps_by_status_are_checked(conn: sqlite3.Connection) -> None:
    insert(conn, "Runs", run_row())
    record = {**FETCH_RECORD, "readyAtMs": None}  # ready without readyAtMs; JSON agrees
    with pytest.raises(sqlite3.IntegrityError, match="ql3_step_runs_status_times_ck"):
        insert(conn, "StepRuns", step_run_row(record))


def test_step_run_result_shape_is_checked(conn: sqlite3.Connection) -> None:
    insert(conn, "Runs", run_row())
    record = {**FETCH_RECORD, "status": "failed", "finishedAtMs": 1000}  # failed without resultCode
    with pytest.raises(sqlite3.IntegrityError, match="ql3_step_runs_result_shape_ck"):
        insert(conn, "StepRuns", step_run_row(record))


def test_duplicate_step_key_in_run_is_rejected(seeded: sqlite3.Connection) -> None:
    record = {**REPORT_RECORD, "id": "sr-report-2"}
    with pytest.raises(sqlite3.IntegrityError, match=r"StepRuns\.run_id, StepRuns\.step_key"):
        insert(seeded, "StepRuns", step_run_row(record))


@pytest.mark.parametrize(
    "digest",
    ["g" * 64, "A" * 64, "a" * 63, "a" * 65, "a" * 63 + " "],
    ids=["non-hex", "uppercase", "short", "long", "space"],
)
def test_non_hex_digest_is_rejected(conn: sqlite3.Connection, digest: str) -> None:
    insert(conn, "Runs", run_row())
    record = {**FETCH_RECORD, "definitionDigest": digest}  # JSON agrees: only the shape is wrong
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed") as excinfo:
        insert(conn, "StepRuns", step_run_row(record))
    assert_constraint_error(excinfo)


# --------------------------------------------------------------------------------------------------
# Events, references, attempts, leases
# --------------------------------------------------------------------------------------------------


def test_duplicate_event_sequence_is_rejected(seeded: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match=r"RunEvents\.run_id, RunEvents\.sequence") as excinfo:
        insert(seeded, "RunEvents", event_row("ev-dup-seq", 3, "workflow.cancel_requested"))
    assert_constraint_error(excinfo)


def test_duplicate_event_dedupe_key_is_rejected(seeded: sqlite3.Connection) -> None:
    row = event_row("ev-other", 4, "workflow.cancel_requested")
    row["dedupe_key"] = FETCH_EVENT_ID
    with pytest.raises(sqlite3.IntegrityError, match=r"RunEvents\.run_id, RunEvents\.dedupe_key"):
        insert(seeded, "RunEvents", row)


def test_event_payload_must_be_an_object(seeded: sqlite3.Connection) -> None:
    row = event_row("ev-bad-payload", 4, "workflow.cancel_requested")
    row["payload"] = "[1,2]"
    with pytest.raises(sqlite3.IntegrityError, match="ql3_run_events_payload_ck"):
        insert(seeded, "RunEvents", row)


def test_attempt_with_unknown_step_run_is_rejected_by_trigger(seeded: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match=REFERENCE_MISMATCH) as excinfo:
        insert(seeded, "RunAttempts", attempt_row(step_run_id="sr-missing"))
    assert_constraint_error(excinfo)
    assert count(seeded, "RunAttempts") == 0


def test_attempt_naming_a_step_run_of_another_run_is_rejected(seeded: sqlite3.Connection) -> None:
    insert(seeded, "Runs", run_row(id="run-0002", idempotency_key=None, request_id=None))
    with pytest.raises(sqlite3.IntegrityError, match=REFERENCE_MISMATCH):
        insert(seeded, "RunAttempts", attempt_row(run_id="run-0002", step_run_id="sr-fetch"))


def test_attempt_update_to_unknown_step_run_is_rejected(seeded: sqlite3.Connection) -> None:
    insert(seeded, "RunAttempts", attempt_row())
    with pytest.raises(sqlite3.IntegrityError, match=REFERENCE_MISMATCH):
        seeded.execute('UPDATE "RunAttempts" SET step_run_id = ? WHERE id = ?', ("sr-missing", ATTEMPT_ID))


def test_event_reference_triggers(seeded: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match=REFERENCE_MISMATCH):
        insert(seeded, "RunEvents", event_row("ev-bad-ref", 4, "x", step_run_id="sr-missing"))
    insert(seeded, "RunEvents", event_row("ev-good-ref", 4, "x", step_run_id="sr-report"))
    with pytest.raises(sqlite3.IntegrityError, match=REFERENCE_MISMATCH):
        seeded.execute('UPDATE "RunEvents" SET step_run_id = ? WHERE id = ?', ("sr-missing", "ev-good-ref"))
    # A NULL step_run_id is always allowed.
    insert(seeded, "RunEvents", event_row("ev-no-ref", 5, "x"))


def test_attempt_with_partial_lease_fields_is_rejected(seeded: sqlite3.Connection) -> None:
    row = attempt_row(worker_id="worker-1", lease_generation=None, lease_version=0, lease_expires_at_ms=7100)
    with pytest.raises(sqlite3.IntegrityError, match="ql3_run_attempts_lease_shape_ck") as excinfo:
        insert(seeded, "RunAttempts", row)
    assert_constraint_error(excinfo)


def test_duplicate_attempt_number_is_rejected(seeded: sqlite3.Connection) -> None:
    insert(seeded, "RunAttempts", attempt_row())
    with pytest.raises(sqlite3.IntegrityError, match=r"RunAttempts\.run_id, RunAttempts\.attempt"):
        insert(seeded, "RunAttempts", attempt_row(id="wta:other"))


def test_leased_lease_with_release_time_is_rejected(seeded: sqlite3.Connection) -> None:
    insert(seeded, "RunAttempts", attempt_row())
    with pytest.raises(sqlite3.IntegrityError, match="ql3_run_dispatch_leases_shape_ck") as excinfo:
        insert(seeded, "RunDispatchLeases", lease_row(released_at_ms=2200))
    assert_constraint_error(excinfo)


@pytest.mark.parametrize(
    "changes",
    [
        {"status": "released", "released_at_ms": 2200, "release_reason": None},
        {"status": "completed", "completed_at_ms": None},
        {"expires_at_ms": 2100},
        {"release_reason": "bored", "status": "released", "released_at_ms": 2200},
    ],
    ids=["released-without-reason", "completed-without-time", "expiry-not-after-renewal", "bad-reason"],
)
def test_lease_shape_checks(seeded: sqlite3.Connection, changes: dict[str, Any]) -> None:
    insert(seeded, "RunAttempts", attempt_row())
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        insert(seeded, "RunDispatchLeases", lease_row(**changes))


def test_released_lease_is_accepted(seeded: sqlite3.Connection) -> None:
    insert(seeded, "RunAttempts", attempt_row())
    insert(
        seeded,
        "RunDispatchLeases",
        lease_row(status="released", released_at_ms=2200, release_reason="declined", updated_at_ms=2200),
    )
    assert count(seeded, "RunDispatchLeases") == 1


# --------------------------------------------------------------------------------------------------
# Ledger and admissions
# --------------------------------------------------------------------------------------------------


def test_mutation_post_image_must_agree_with_columns(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    insert(conn, "Runs", run_row())
    insert(conn, "StepRuns", step_run_row(FETCH_RECORD))
    insert(conn, "RunEvents", step_created_event(FETCH_RECORD, FETCH_EVENT_ID, 2))
    row = mutation_row(FETCH_RECORD, FETCH_EVENT_ID, 2, FETCH_MUTATION_DIGEST)
    row["step_run_digest"] = "0" * 64
    with pytest.raises(sqlite3.IntegrityError, match="ql3_step_run_mutations_post_image_ck"):
        insert(conn, "StepRunMutations", row)
    conn.execute("ROLLBACK")


@pytest.mark.parametrize("key", ["schema", "id", "runId", "lastMutationId", "stepRunDigest"])
def test_mutation_post_image_key_must_be_present(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    insert(conn, "Runs", run_row())
    insert(conn, "StepRuns", step_run_row(FETCH_RECORD))
    insert(conn, "RunEvents", step_created_event(FETCH_RECORD, FETCH_EVENT_ID, 2))
    row = mutation_row(FETCH_RECORD, FETCH_EVENT_ID, 2, FETCH_MUTATION_DIGEST)
    record = dict(FETCH_RECORD)
    del record[key]
    row["step_run_json"] = cjson(record)
    with pytest.raises(sqlite3.IntegrityError, match="ql3_step_run_mutations_post_image_ck"):
        insert(conn, "StepRunMutations", row)
    conn.execute("ROLLBACK")


def test_second_mutation_for_one_event_is_rejected(seeded: sqlite3.Connection) -> None:
    row = mutation_row(FETCH_RECORD, FETCH_EVENT_ID, 2, FETCH_MUTATION_DIGEST)
    row["mutation_id"] = "wfm:other"
    row["step_run_json"] = cjson({**FETCH_RECORD, "lastMutationId": "wfm:other"})
    with pytest.raises(sqlite3.IntegrityError, match=r"StepRunMutations\.event_id"):
        insert(seeded, "StepRunMutations", row)


_ABSENT = object()


@pytest.mark.parametrize(
    ("column", "document", "key", "value"),
    [
        ("plan_json", plan_document, "plannedAtMs", 999),
        ("plan_json", plan_document, "plannedAtMs", _ABSENT),
        ("plan_json", plan_document, "runId", "run-0002"),
        ("plan_json", plan_document, "steps", _ABSENT),
        ("plan_json", plan_document, "target", {}),
        ("receipt_json", admission_receipt_document, "finalRunVersion", 4),
        ("receipt_json", admission_receipt_document, "receiptDigest", "0" * 64),
        ("receipt_json", admission_receipt_document, "steps", []),
        ("receipt_json", admission_receipt_document, "admittedAtMs", "1000"),
    ],
)
def test_admission_json_must_agree_with_columns(
    conn: sqlite3.Connection, column: str, document: Any, key: str, value: Any
) -> None:
    # The admission row is checked on its own (its foreign keys would also need the Run).
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        doc = document()
        if value is _ABSENT:
            del doc[key]
        else:
            doc[key] = value
        with pytest.raises(sqlite3.IntegrityError, match="ql3_ppw_admissions_"):
            insert(conn, "QingLong3PluginPackageWorkflowAdmissions", admission_row(**{column: cjson(doc)}))
        insert(conn, "QingLong3PluginPackageWorkflowAdmissions", admission_row())
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def test_admission_counters_must_equal_step_count_plus_one(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        with pytest.raises(sqlite3.IntegrityError, match="ql3_ppw_admissions_counters_ck"):
            insert(conn, "QingLong3PluginPackageWorkflowAdmissions", admission_row(final_run_version=4))
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def test_task_receipt_must_mirror_columns(seeded: sqlite3.Connection) -> None:
    insert(seeded, "RunAttempts", attempt_row())
    insert(
        seeded,
        "RunEvents",
        event_row(
            ATTEMPT_EVENT_ID,
            4,
            "workflow.task_attempt_admitted",
            attempt_id=ATTEMPT_ID,
            step_run_id="sr-fetch",
        ),
    )
    receipt = task_receipt_document()
    receipt["attemptNumber"] = 2
    with pytest.raises(sqlite3.IntegrityError, match="ql3_ppw_task_attempt_admissions_receipt_json_ck"):
        insert(
            seeded,
            "QingLong3PluginPackageWorkflowTaskAttemptAdmissions",
            task_admission_row(receipt_json=cjson(receipt)),
        )
    bad_revision = "qltd:v1:01:" + "9" * 64  # leading zero, and the JSON agrees
    receipt = {**task_receipt_document(), "taskRevision": bad_revision}
    with pytest.raises(sqlite3.IntegrityError, match="ql3_ppw_task_attempt_admissions_revision_ck"):
        insert(
            seeded,
            "QingLong3PluginPackageWorkflowTaskAttemptAdmissions",
            task_admission_row(task_revision=bad_revision, receipt_json=cjson(receipt)),
        )
    receipt = task_receipt_document()
    del receipt["admittedAtMs"]
    with pytest.raises(sqlite3.IntegrityError, match="ql3_ppw_task_attempt_admissions_receipt_json_ck"):
        insert(
            seeded,
            "QingLong3PluginPackageWorkflowTaskAttemptAdmissions",
            task_admission_row(receipt_json=cjson(receipt)),
        )
    insert(seeded, "QingLong3PluginPackageWorkflowTaskAttemptAdmissions", task_admission_row())


def test_admission_step_needs_must_match_initial_status(seeded: sqlite3.Connection) -> None:
    seeded.execute(
        'DELETE FROM "QingLong3PluginPackageWorkflowAdmissionSteps" WHERE step_key = ?', ("report",)
    )
    row = admission_step_row(REPORT_RECORD, "reporter", [], REPORT_EVENT_ID)  # pending without needs
    with pytest.raises(sqlite3.IntegrityError, match="ql3_ppw_admission_steps_needs_ck"):
        insert(seeded, "QingLong3PluginPackageWorkflowAdmissionSteps", row)


def test_workflow_run_cannot_be_deleted_under_its_admission(seeded: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        seeded.execute('DELETE FROM "Runs" WHERE id = ?', (RUN_ID,))
    assert count(seeded, "Runs") == 1


# --------------------------------------------------------------------------------------------------
# Candidate query plans use the candidate indexes (storage.md §8)
# --------------------------------------------------------------------------------------------------


def plan_details(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> str:
    return " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_candidate_queries_use_indexes(conn: sqlite3.Connection) -> None:
    cancel = plan_details(
        conn,
        "SELECT id FROM \"Runs\" WHERE status = 'running' AND cancel_requested_at_ms IS NOT NULL "
        "AND trigger_type = 'plugin_package_workflow' AND execution_owner = 'runtime' "
        "AND (cancel_requested_at_ms, id) > (?, ?) ORDER BY cancel_requested_at_ms, id LIMIT 3",
        (0, ""),
    )
    assert "ql3_local_runs_cancel_requested_idx" in cancel and "TEMP B-TREE" not in cancel
    recovery = plan_details(
        conn,
        "SELECT attempt_id FROM \"RunDispatchLeases\" WHERE status = 'leased' AND expires_at_ms <= ? "
        "ORDER BY expires_at_ms, attempt_id LIMIT 3",
        (0,),
    )
    assert "ql3_run_dispatch_leases_expiry_idx" in recovery and "TEMP B-TREE" not in recovery
    task = plan_details(
        conn,
        "SELECT id FROM \"StepRuns\" WHERE status = ? AND kind = 'task' AND ready_at_ms IS NOT NULL "
        "ORDER BY ready_at_ms, id LIMIT 3",
        ("ready",),
    )
    assert "ql3_step_runs_task_candidate_idx" in task and "TEMP B-TREE" not in task
    frontier = plan_details(
        conn,
        'SELECT plan_digest FROM "QingLong3PluginPackageWorkflowAdmissions" '
        "WHERE (admitted_at_ms, plan_digest) > (?, ?) ORDER BY admitted_at_ms, plan_digest LIMIT 3",
        (0, ""),
    )
    assert "ql3_ppw_admissions_frontier_idx" in frontier and "TEMP B-TREE" not in frontier


# --------------------------------------------------------------------------------------------------
# Every named constraint and unique index refuses a row that breaks it (issue 33)
#
# Each case writes ONE row, or changes one, on a valid store (the seeded workflow, its attempt and
# lease, and spare rows a copy can point at), breaking the constraint it names and nothing else
# where the schema allows that; the JSON mirror columns are kept in step with the changed columns.
# Which constraint refused the row is read from SQLite itself: the name in a CHECK's message, the
# unique index whose columns the UNIQUE message lists (PRAGMA index_list / index_info), the foreign
# key PRAGMA foreign_key_check reports once the same write is deferred. The completeness test runs
# every case and compares the names the database gave with every name the DDL declares, so a
# constraint dropped from the schema, or added without a case, fails it.
# --------------------------------------------------------------------------------------------------

ADMISSIONS = "QingLong3PluginPackageWorkflowAdmissions"
ADMISSION_STEPS = "QingLong3PluginPackageWorkflowAdmissionSteps"
TASK_ADMISSIONS = "QingLong3PluginPackageWorkflowTaskAttemptAdmissions"
FRESH_HEX = "f" * 64  # a well-formed digest no seeded row uses
SPARE_RECORD: dict[str, Any] = {**REPORT_RECORD, "id": "sr-spare", "stepKey": "spare", "lastMutationId": "wfm:spare"}

Write = Callable[[sqlite3.Connection], object]


class Case(NamedTuple):
    description: str
    write: Write
    constraint: str


# JSON columns that restate other columns of their row, and keys that are not the camelCase of theirs
_MIRRORS = {"StepRuns": ("step_run_json",), "StepRunMutations": ("step_run_json",),
            ADMISSIONS: ("plan_json", "receipt_json"), TASK_ADMISSIONS: ("receipt_json",)}
_KEY_OVERRIDES = {"StepRunMutations": {"mutation_id": "lastMutationId", "step_run_id": "id"}}


def _row(conn: sqlite3.Connection, table: str, where: dict[str, Any]) -> dict[str, Any]:
    clause = " AND ".join(f"{c} = ?" for c in where)
    cur = conn.execute(f'SELECT * FROM "{table}" WHERE {clause}', tuple(where.values()))
    rows = cur.fetchall()
    assert len(rows) == 1, (table, where)  # a case whose row is missing must not pass by writing nothing
    return dict(zip([d[0] for d in cur.description], rows[0], strict=True))


def _with(table: str, row: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """`row` with `values`, in its columns and in the keys of its JSON mirrors that restate them."""
    new = {**row, **values}
    for column in _MIRRORS.get(table, ()):
        document = json.loads(row[column])
        for name, value in values.items():
            key = _KEY_OVERRIDES.get(table, {}).get(name) or re.sub(r"_([a-z])", lambda m: m[1].upper(), name)
            target = document if key in document else document.get("target")
            if isinstance(target, dict) and key in target:
                target[key] = value
        new[column] = cjson(document)
    return new


def copied(table: str, where: dict[str, Any], **values: Any) -> Write:
    """INSERT a copy of the row selected by `where` with `values` replaced."""
    return lambda conn: insert(conn, table, _with(table, _row(conn, table, where), values))


def changed(table: str, where: dict[str, Any], **values: Any) -> Write:
    """UPDATE the row selected by `where` to `values`."""
    def write(conn: sqlite3.Connection) -> None:
        new = _with(table, _row(conn, table, where), values)
        changes = {c: v for c, v in new.items() if c in values or c in _MIRRORS.get(table, ())}
        sets = ", ".join(f"{c} = ?" for c in changes)
        clause = " AND ".join(f"{c} = ?" for c in where)
        conn.execute(f'UPDATE "{table}" SET {sets} WHERE {clause}', (*changes.values(), *where.values()))
    return write


def raw(sql: str, *params: Any) -> Write:
    """A statement as written (a JSON mirror made to disagree with its column)."""
    return lambda conn: conn.execute(sql, params)


RUN = {"id": RUN_ID}
FETCH, REPORT = {"id": "sr-fetch"}, {"id": "sr-report"}
ATTEMPT = {"id": ATTEMPT_ID}
ADMITTED = {"id": ADMISSION_EVENT_ID}
FETCH_MUTATION = {"mutation_id": FETCH_MUTATION_ID}
ADMISSION = {"plan_digest": PLAN_DIGEST}
FETCH_STEP = {"plan_digest": PLAN_DIGEST, "step_key": "fetch"}
TASK_ADMISSION = {"receipt_digest": TASK_RECEIPT_DIGEST}
LEASE = {"attempt_id": ATTEMPT_ID}

CASES: list[Case] = [
    # Runs
    Case("run id not an IDENTIFIER", copied("Runs", RUN, id="-run", idempotency_key=None), "ql3_runs_id_ck"),
    Case("unknown execution origin", changed("Runs", RUN, execution_origin="robot"), "ql3_runs_execution_origin_ck"),
    Case("unknown execution owner", changed("Runs", RUN, execution_owner="nobody"), "ql3_runs_execution_owner_ck"),
    Case("unknown run status", changed("Runs", RUN, status="paused"), "ql3_runs_status_ck"),
    Case("unknown cancel reason", changed("Runs", RUN, cancel_reason="whim"), "ql3_runs_cancel_reason_ck"),
    Case("idempotency key reused in the project", copied("Runs", RUN, id="run-0003"),
         "ql3_runs_project_idempotency_uidx"),
    # StepRuns (sr-report is pending)
    Case("step run id not an IDENTIFIER", copied("StepRuns", REPORT, id="-sr", step_key="other"),
         "ql3_step_runs_id_ck"),
    # a run id outside the alphabet names no Run either (Runs.id has the same check): the check decides first
    Case("step run's run id not an IDENTIFIER", copied("StepRuns", REPORT, id="sr-other", run_id="-run"),
         "ql3_step_runs_run_id_ck"),
    Case("step run is its own parent", changed("StepRuns", REPORT, parent_step_run_id="sr-report"),
         "ql3_step_runs_parent_ck"),
    Case("step key not an IDENTIFIER", changed("StepRuns", REPORT, step_key="-report"), "ql3_step_runs_step_key_ck"),
    Case("unknown step kind", changed("StepRuns", REPORT, kind="robot"), "ql3_step_runs_kind_ck"),
    Case("unknown step status", changed("StepRuns", REPORT, status="paused"), "ql3_step_runs_status_ck"),
    # any result code breaks the shape check of a pending step too: the column's check comes first
    Case("result code not lower case", changed("StepRuns", REPORT, result_code="OOPS"),
         "ql3_step_runs_result_code_ck"),
    Case("updated before created", changed("StepRuns", REPORT, updated_at_ms=999), "ql3_step_runs_time_order_ck"),
    Case("pending step with a ready time", changed("StepRuns", REPORT, ready_at_ms=1000),
         "ql3_step_runs_status_times_ck"),
    Case("pending step with an error summary", changed("StepRuns", REPORT, error_summary="boom"),
         "ql3_step_runs_result_shape_ck"),
    Case("step run json disagrees with its column",
         raw("UPDATE \"StepRuns\" SET step_run_json = json_set(step_run_json, '$.status', 'ready') WHERE id = ?",
             "sr-report"), "ql3_step_runs_json_mirror_ck"),
    Case("parent step run missing", changed("StepRuns", REPORT, parent_step_run_id="sr-missing"),
         "ql3_step_runs_parent_fk"),
    # (run_id, id) is unique by the primary key on id alone; SQLite checks the named index first
    Case("step run id taken in the run", copied("StepRuns", REPORT, step_key="other"), "ql3_step_runs_run_id_uidx"),
    Case("step key taken in the run", copied("StepRuns", REPORT, id="sr-other"), "ql3_step_runs_run_step_uidx"),
    # RunAttempts
    Case("attempt id not an IDENTIFIER", copied("RunAttempts", ATTEMPT, id="-wta", attempt=3),
         "ql3_run_attempts_id_ck"),
    Case("unknown attempt status", changed("RunAttempts", ATTEMPT, status="paused"), "ql3_run_attempts_status_ck"),
    Case("lease fields partly set", changed("RunAttempts", ATTEMPT, worker_id=None),
         "ql3_run_attempts_lease_shape_ck"),
    Case("attempt number taken in the run", copied("RunAttempts", ATTEMPT, id="wta:other"),
         "ql3_run_attempts_run_attempt_uidx"),
    # RunEvents
    Case("event id not an IDENTIFIER", copied("RunEvents", ADMITTED, id="-evt", sequence=99, dedupe_key=None),
         "ql3_run_events_id_ck"),
    Case("unknown actor type", changed("RunEvents", ADMITTED, actor_type="robot"), "ql3_run_events_actor_type_ck"),
    Case("payload not an object", changed("RunEvents", ADMITTED, payload="[]"), "ql3_run_events_payload_ck"),
    Case("event sequence taken in the run", copied("RunEvents", ADMITTED, id="evt-new", dedupe_key=None),
         "ql3_run_events_run_sequence_uidx"),
    Case("dedupe key taken in the run", copied("RunEvents", ADMITTED, id="evt-new", sequence=99),
         "ql3_run_events_run_dedupe_uidx"),
    # StepRunMutations (the spare event ev-spare has a mutation of its own, the lease event has none)
    Case("mutation id not an IDENTIFIER",
         copied("StepRunMutations", FETCH_MUTATION, mutation_id="-wfm", event_id=LEASE_EVENT_ID),
         "ql3_step_run_mutations_id_ck"),
    Case("post-image of another run",
         raw("UPDATE \"StepRunMutations\" SET step_run_json = json_set(step_run_json, '$.runId', 'run-0002') "
             "WHERE mutation_id = ?", FETCH_MUTATION_ID), "ql3_step_run_mutations_post_image_ck"),
    Case("mutation of a missing step run", changed("StepRunMutations", FETCH_MUTATION, step_run_id="sr-missing"),
         "ql3_step_run_mutations_step_run_fk"),
    Case("second mutation of one event", copied("StepRunMutations", FETCH_MUTATION, mutation_id="wfm:other"),
         "ql3_step_run_mutations_event_uidx"),
    # Workflow admissions (run-0002 is a Run without an admission)
    Case("package name not a PACKAGE_NAME", changed(ADMISSIONS, ADMISSION, package_name="-pkg"),
         "ql3_ppw_admissions_package_name_ck"),
    Case("final run version is not the step count plus one", changed(ADMISSIONS, ADMISSION, final_run_version=4),
         "ql3_ppw_admissions_counters_ck"),
    Case("plan json of another plan",
         raw(f"UPDATE \"{ADMISSIONS}\" SET plan_json = json_set(plan_json, '$.planId', 'plan-0002')"),
         "ql3_ppw_admissions_plan_json_ck"),
    Case("receipt json with another final version",
         raw(f"UPDATE \"{ADMISSIONS}\" SET receipt_json = json_set(receipt_json, '$.finalRunVersion', 9)"),
         "ql3_ppw_admissions_receipt_json_ck"),
    Case("plan id taken", copied(ADMISSIONS, ADMISSION, plan_digest=FRESH_HEX, run_id="run-0002",
                                 receipt_digest=FRESH_HEX), "ql3_ppw_admissions_plan_id_uidx"),
    Case("second admission of a run", copied(ADMISSIONS, ADMISSION, plan_digest=FRESH_HEX, plan_id="plan-0002",
                                             receipt_digest=FRESH_HEX), "ql3_ppw_admissions_run_id_uidx"),
    Case("receipt digest taken", copied(ADMISSIONS, ADMISSION, plan_digest=FRESH_HEX, plan_id="plan-0002",
                                        run_id="run-0002"), "ql3_ppw_admissions_receipt_digest_uidx"),
    # (plan_digest, run_id) is unique by the primary key and by run_id alone; SQLite checks it first
    Case("plan digest and run taken", copied(ADMISSIONS, ADMISSION, plan_id="plan-0002", receipt_digest=FRESH_HEX),
         "ql3_ppw_admissions_plan_run_uidx"),
    # Workflow admission steps (the spare step run, mutation and event belong to no admission step)
    Case("ready step that needs another", changed(ADMISSION_STEPS, FETCH_STEP, needs_json='["report"]'),
         "ql3_ppw_admission_steps_needs_ck"),
    Case("step of a missing admission", changed(ADMISSION_STEPS, FETCH_STEP, plan_digest=FRESH_HEX),
         "ql3_ppw_admission_steps_admission_fk"),
    Case("step names a missing step run", changed(ADMISSION_STEPS, FETCH_STEP, step_run_id="sr-missing"),
         "ql3_ppw_admission_steps_step_run_fk"),
    Case("step names a missing mutation", changed(ADMISSION_STEPS, FETCH_STEP, mutation_id="wfm:missing"),
         "ql3_ppw_admission_steps_mutation_fk"),
    Case("step names a missing event", changed(ADMISSION_STEPS, FETCH_STEP, event_id="evt-missing"),
         "ql3_ppw_admission_steps_event_fk"),
    Case("step run admitted twice", copied(ADMISSION_STEPS, FETCH_STEP, step_key="spare", mutation_id="wfm:spare",
                                           event_id="ev-spare"), "ql3_ppw_admission_steps_step_run_uidx"),
    Case("mutation admitted twice", copied(ADMISSION_STEPS, FETCH_STEP, step_key="spare", step_run_id="sr-spare",
                                           event_id="ev-spare"), "ql3_ppw_admission_steps_mutation_uidx"),
    Case("event admitted twice", copied(ADMISSION_STEPS, FETCH_STEP, step_key="spare", step_run_id="sr-spare",
                                        mutation_id="wfm:spare"), "ql3_ppw_admission_steps_event_uidx"),
    # Task attempt admissions (the spare attempt wta:spare, number 2, has no admission; nor has ev-spare)
    Case("event sequence differs from the run version", changed(TASK_ADMISSIONS, TASK_ADMISSION, run_event_sequence=9),
         "ql3_ppw_task_attempt_admissions_sequence_ck"),
    Case("task revision with a leading zero",
         changed(TASK_ADMISSIONS, TASK_ADMISSION, task_revision="qltd:v1:01:" + "9" * 64),
         "ql3_ppw_task_attempt_admissions_revision_ck"),
    Case("receipt json with another attempt number",
         raw(f"UPDATE \"{TASK_ADMISSIONS}\" SET receipt_json = json_set(receipt_json, '$.attemptNumber', 2)"),
         "ql3_ppw_task_attempt_admissions_receipt_json_ck"),
    Case("task admission of a missing workflow admission",
         changed(TASK_ADMISSIONS, TASK_ADMISSION, plan_digest=FRESH_HEX),
         "ql3_ppw_task_attempt_admissions_admission_fk"),
    Case("task admission of a missing step run", changed(TASK_ADMISSIONS, TASK_ADMISSION, step_run_id="sr-missing"),
         "ql3_ppw_task_attempt_admissions_step_run_fk"),
    Case("task admission of a missing attempt", changed(TASK_ADMISSIONS, TASK_ADMISSION, attempt_id="wta:missing"),
         "ql3_ppw_task_attempt_admissions_attempt_fk"),
    Case("task admission of a missing event", changed(TASK_ADMISSIONS, TASK_ADMISSION, event_id="evt-missing"),
         "ql3_ppw_task_attempt_admissions_event_fk"),
    Case("attempt admitted twice",
         copied(TASK_ADMISSIONS, TASK_ADMISSION, receipt_digest=FRESH_HEX, event_id="ev-spare", step_run_version=2,
                attempt_number=2), "ql3_ppw_task_attempt_admissions_attempt_uidx"),
    Case("admission event reused",
         copied(TASK_ADMISSIONS, TASK_ADMISSION, receipt_digest=FRESH_HEX, attempt_id="wta:spare",
                step_run_version=2, attempt_number=2), "ql3_ppw_task_attempt_admissions_event_uidx"),
    Case("second admission in one ready epoch",
         copied(TASK_ADMISSIONS, TASK_ADMISSION, receipt_digest=FRESH_HEX, attempt_id="wta:spare",
                event_id="ev-spare", attempt_number=2), "ql3_ppw_task_attempt_admissions_epoch_uidx"),
    Case("attempt number admitted twice in the run",
         copied(TASK_ADMISSIONS, TASK_ADMISSION, receipt_digest=FRESH_HEX, attempt_id="wta:spare",
                event_id="ev-spare", step_run_version=2), "ql3_ppw_task_attempt_admissions_attempt_number_uidx"),
    # Dispatch leases (the seeded one is leased)
    Case("unknown lease status", changed("RunDispatchLeases", LEASE, status="expired"),
         "ql3_run_dispatch_leases_status_ck"),
    Case("unknown release reason", changed("RunDispatchLeases", LEASE, status="released", released_at_ms=2200,
                                           release_reason="bored"), "ql3_run_dispatch_leases_release_reason_ck"),
    Case("lease expires when renewed", changed("RunDispatchLeases", LEASE, expires_at_ms=2100),
         "ql3_run_dispatch_leases_time_ck"),
    Case("live lease with a release time", changed("RunDispatchLeases", LEASE, released_at_ms=2200),
         "ql3_run_dispatch_leases_shape_ck"),
]


def seed_spares(conn: sqlite3.Connection) -> None:
    """Rows a case's copy can point at without taking a key of another row: a second Run (no admission),
    a step run with its own event and mutation that no admission step names, a second attempt of
    sr-fetch that no task attempt admission names."""
    conn.execute("BEGIN IMMEDIATE")
    insert(conn, "Runs", run_row(id="run-0002", idempotency_key=None, request_id=None))
    insert(conn, "StepRuns", step_run_row(SPARE_RECORD))
    insert(conn, "RunEvents", step_created_event(SPARE_RECORD, "ev-spare", 6))
    insert(conn, "StepRunMutations", mutation_row(SPARE_RECORD, "ev-spare", 6, "c" * 64))
    insert(conn, "RunAttempts", attempt_row(id="wta:spare", attempt=2))
    conn.execute("COMMIT")


@pytest.fixture
def full(conn: sqlite3.Connection) -> sqlite3.Connection:
    seed_admission(conn)
    seed_attempt_and_lease(conn)
    seed_spares(conn)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    return conn


def refused_by(conn: sqlite3.Connection, write: Write) -> str:
    """The named constraint or unique index SQLite refuses `write` with, as SQLite itself tells it (see
    above); the write runs in a transaction that is rolled back."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlite3.IntegrityError) as info:
            write(conn)
        assert_constraint_error(info)
        message = str(info.value)
        if (check := re.fullmatch(r"CHECK constraint failed: (\w+)", message)) is not None:
            return check[1]
        if (unique := re.fullmatch(r"UNIQUE constraint failed: (.+)", message)) is not None:
            return _unique_index(conn, [tuple(c.split(".", 1)) for c in unique[1].split(", ")])
        assert message == "FOREIGN KEY constraint failed", message
        return _violated_foreign_key(conn, write)
    finally:
        conn.execute("ROLLBACK")


def _unique_index(conn: sqlite3.Connection, columns: list[tuple[str, ...]]) -> str:
    """The unique index over exactly the columns a UNIQUE message lists."""
    (table,) = {t for t, _ in columns}
    wanted = [c for _, c in columns]
    found = [name for _, name, unique, _, _ in conn.execute(f'PRAGMA index_list("{table}")')
             if unique and [r[2] for r in conn.execute(f'PRAGMA index_info("{name}")')] == wanted]
    assert len(found) == 1, (table, wanted, found)
    return str(found[0])


def _violated_foreign_key(conn: sqlite3.Connection, write: Write) -> str:
    """The named foreign key the write breaks: the write again with foreign keys deferred to the commit,
    then PRAGMA foreign_key_check, which must report exactly one foreign key."""
    conn.execute("PRAGMA defer_foreign_keys = ON")  # until the transaction ends
    write(conn)
    (table, fkid), = {(row[0], row[3]) for row in conn.execute("PRAGMA foreign_key_check")}
    columns = tuple(row[3] for row in conn.execute(f'PRAGMA foreign_key_list("{table}")') if row[0] == fkid)
    (ddl,) = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchone()
    named = {tuple(c.strip() for c in cols.split(",")): name
             for name, cols in re.findall(r"CONSTRAINT\s+(\w+)\s+FOREIGN\s+KEY\s*\(([^)]*)\)", ddl)}
    return str(named.get(columns, f"an unnamed foreign key of {table} {columns}"))


def declared_constraints() -> set[str]:
    """Every name the schema's DDL gives a constraint (CHECK, FOREIGN KEY, UNIQUE, PRIMARY KEY) or a unique index."""
    text = re.sub(r"--[^\n]*", "", "\n".join(m.load_sql() for m in MIGRATIONS))
    names = set(re.findall(r"\bCONSTRAINT\s+(\w+)", text, re.IGNORECASE))
    return names | set(re.findall(r"\bCREATE\s+UNIQUE\s+INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", text, re.IGNORECASE))


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_a_violating_row_is_refused_by_its_constraint(full: sqlite3.Connection, case: Case) -> None:
    assert refused_by(full, case.write) == case.constraint


def test_every_named_constraint_and_unique_index_has_a_violating_row(full: sqlite3.Connection) -> None:
    """The names SQLite refused the cases' rows with cover every name the DDL declares (a case list
    alone would not do: a case counts only for the constraint the database named)."""
    refused = {refused_by(full, case.write) for case in CASES}
    declared = declared_constraints()
    assert len(declared) >= 60  # the parse found the schema's constraints
    assert sorted(declared - refused) == []  # a constraint no row was refused by
    assert sorted(refused - declared) == []  # a case refused by something the DDL does not name


def test_without_the_epoch_index_a_second_admission_of_one_ready_epoch_is_accepted(full: sqlite3.Connection) -> None:
    """The index is what refuses it (issue 33: no SQLite test stored a second admission of one epoch)."""
    (case,) = [c for c in CASES if c.constraint == "ql3_ppw_task_attempt_admissions_epoch_uidx"]
    full.execute("BEGIN IMMEDIATE")
    try:
        full.execute("DROP INDEX ql3_ppw_task_attempt_admissions_epoch_uidx")
        case.write(full)
        assert count(full, TASK_ADMISSIONS) == 2
    finally:
        full.execute("ROLLBACK")
