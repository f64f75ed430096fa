"""Throwaway PostgreSQL server manager and the ql3 conformance schema (storage.md §2).

The constraint tests insert hand-built rows derived from the S-16 vectors of records.md §8.2/§8.3:
first a complete valid admission bundle (proving the checks accept real records), then single-field
corruptions that each must be rejected with the expected SQLSTATE.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb
from qlwf.conformance.provision import (
    UNAVAILABLE_MESSAGE,
    PgServer,
    PostgresUnavailable,
    ThrowawayCluster,
    binaries,
    external,
    find_pg_bin,
    server_from_env,
    unique_database_name,
)

Row = dict[str, Any]

CHECK_VIOLATION = "23514"
UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    try:
        server = server_from_env()
    except PostgresUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield server
    server.stop()


@pytest.fixture()
def db_name(pg: PgServer) -> Iterator[str]:
    name = unique_database_name("qlwf_pgtest")
    pg.create_database(name)
    yield name
    pg.drop_database(name)


@pytest.fixture()
def conn(pg: PgServer, db_name: str) -> Iterator[psycopg.Connection[Any]]:
    """Autocommit connection to a fresh database: every statement is its own transaction."""
    with psycopg.connect(pg.dsn(db_name), autocommit=True) as connection:
        yield connection


@pytest.fixture()
def schema_conn(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute(schema_sql())
    return conn


@pytest.fixture()
def seeded(schema_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    for table, row in bundle():
        insert(schema_conn, table, row)
    return schema_conn


def schema_sql() -> str:
    return resources.files("qlwf.impl.postgres").joinpath("schema.sql").read_text(encoding="utf-8")


def insert(conn: psycopg.Connection[Any], table: str, row: Row) -> None:
    query = sql.SQL("INSERT INTO ql3.{} ({}) VALUES ({})").format(
        sql.Identifier(table),
        sql.SQL(", ").join(sql.Identifier(c) for c in row),
        sql.SQL(", ").join(sql.Placeholder() * len(row)),
    )
    conn.execute(query, [Jsonb(v) if isinstance(v, dict | list) else v for v in row.values()])


def rejected(conn: psycopg.Connection[Any], table: str, row: Row, sqlstate: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        insert(conn, table, row)
    assert info.value.sqlstate == sqlstate, info.value
    return info.value


# ---------------------------------------------------------------------------------------------
# Canonical JSON and the S-16 admission bundle (records.md §5, §8.2, §8.3)


def canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def json_digest(domain: str, value: Any) -> str:
    return hashlib.sha256(domain.encode() + b"\x00" + canonical(value)).hexdigest()


PD = "8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac3904300583c2d"
RUN_ID = "run-0001"
MRD = "3" * 64
PUB = "4" * 64
ATTEMPT_ID = "wta:955364285ed507a7fdba9d43dbc8c10f"
ATTEMPT_EVENT_ID = "wte:955364285ed507a7fdba9d43dbc8c10f"
STEP_RUN_DOMAIN = "qinglong/step-run-digest@v1"

TARGET = {
    "projectId": "proj-1",
    "packageName": "demo-pkg",
    "installationId": "inst-1",
    "lockDigest": "1" * 64,
    "generation": 1,
    "generationDigest": "2" * 64,
    "materializedRevisionDigest": MRD,
    "publicationDigest": PUB,
    "workflowId": "nightly",
    "workflowDefinitionDigest": "5" * 64,
}

STEPS = [  # (stepRunId, stepKey, taskId, taskDefinitionDigest, needs, initialStatus, index)
    ("sr-fetch", "fetch", "fetcher", "6" * 64, [], "ready", 1),
    ("sr-report", "report", "reporter", "7" * 64, ["fetch"], "pending", 2),
]


def mutation_id(i: int) -> str:
    return f"wfm:{PD[:56]}:{i}"


def step_event_id(i: int) -> str:
    return f"wfe:{PD[:27]}:{i}"


def plan() -> dict[str, Any]:
    unsigned = {
        "schema": "qinglong/plugin-package-workflow-execution-plan@v1",
        "planId": "plan-0001",
        "runId": RUN_ID,
        "target": TARGET,
        "steps": [
            {
                "stepRunId": sr,
                "stepKey": key,
                "taskId": task,
                "taskDefinitionRef": f"plugin-package:{MRD}:task:{task}",
                "taskDefinitionDigest": tdd,
                "needs": needs,
                "initialStatus": status,
                "required": True,
            }
            for sr, key, task, tdd, needs, status, _ in STEPS
        ],
        "plannedAtMs": 1000,
    }
    assert len(canonical(unsigned)) == 1345
    digest = json_digest("qinglong/plugin-package-workflow-execution-plan-digest@v1", unsigned)
    assert digest == PD
    return {**unsigned, "planDigest": digest}


def step_run_record(sr: str, key: str, task: str, tdd: str, status: str, i: int) -> dict[str, Any]:
    unsigned = {
        "schema": "qinglong/step-run@v1",
        "id": sr,
        "runId": RUN_ID,
        "parentStepRunId": None,
        "stepKey": key,
        "kind": "task",
        "definitionRef": f"plugin-package:{MRD}:task:{task}",
        "definitionDigest": tdd,
        "required": True,
        "status": status,
        "version": 1,
        "attemptCount": 0,
        "inputRef": None,
        "outputRef": None,
        "approvalRequestId": None,
        "readyAtMs": 1000 if status == "ready" else None,
        "startedAtMs": None,
        "finishedAtMs": None,
        "resultCode": None,
        "errorSummary": None,
        "createdAtMs": 1000,
        "updatedAtMs": 1000,
        "lastMutationId": mutation_id(i),
    }
    return {**unsigned, "stepRunDigest": json_digest(STEP_RUN_DOMAIN, unsigned)}


def step_run_row(record: dict[str, Any]) -> Row:
    """Columns from a StepRun record (camelCase key -> snake_case column), plus the JSON mirror."""
    columns = {
        "".join("_" + ch.lower() if ch.isupper() else ch for ch in key): value
        for key, value in record.items()
        if key != "schema"
    }
    return {**columns, "step_run_json": record}


def bundle() -> list[tuple[str, Row]]:
    """Rows of an admitted two-step workflow plus one admitted, leased task attempt."""
    the_plan = plan()
    records = [step_run_record(sr, key, task, tdd, status, i) for sr, key, task, tdd, _, status, i in STEPS]
    assert records[0]["stepRunDigest"] == "d91b792cb73f66df294415695ad64f1b3412f434d6d91c2190923970f3003a10"
    assert records[1]["stepRunDigest"] == "84f68d0304ead8f7853ef0e4161bfee6165fc051240df096ca93e735e23db054"
    mutation_digests = [
        "a8c562852ab2cfce632a3bce2c8585d33cc59793cf13c275a52b3ac9f52801b6",
        "99f4bedcc2f96c6a6eb62e7d982ecaef8c784072b9380360213fe5d008379bc4",
    ]
    unsigned_receipt = {
        "schema": "qinglong/plugin-package-workflow-admission-receipt@v1",
        "planId": "plan-0001",
        "planDigest": PD,
        "runId": RUN_ID,
        "publicationDigest": PUB,
        "workflowId": "nightly",
        "steps": [
            {
                "stepKey": rec["stepKey"],
                "stepRunId": rec["id"],
                "stepRunDigest": rec["stepRunDigest"],
                "mutationId": mutation_id(i),
                "eventId": step_event_id(i),
            }
            for rec, (*_, i) in zip(records, STEPS, strict=True)
        ],
        "finalRunVersion": 3,
        "finalRunEventSequence": 3,
        "admittedAtMs": 1000,
    }
    receipt_digest = json_digest(
        "qinglong/plugin-package-workflow-admission-receipt-digest@v1", unsigned_receipt
    )
    assert receipt_digest == "859d2325758e7c130cc6fe2c8b5ba472bb1e783ecda52bb832c2e8439e8a79a3"

    rows: list[tuple[str, Row]] = [
        ("runs", {
            "id": RUN_ID, "project_id": "proj-1", "task_id": "nightly", "task_revision": PUB,
            "task_snapshot_ref": f"plugin-package:{PUB}:workflow:nightly",
            "trigger_type": "plugin_package_workflow", "execution_origin": "system",
            "execution_owner": "runtime", "request_id": "plan-0001", "status": "running",
            "version": 4, "event_sequence": 4, "priority": 0,
            "idempotency_key": "plugin-package-workflow:plan-0001",
            "created_at_ms": 1000, "started_at_ms": 1000,
        }),
        ("run_events", {
            "id": f"wfa:{PD[:32]}", "run_id": RUN_ID, "sequence": 1, "type": "workflow.admitted",
            "dedupe_key": f"wfa:{PD[:32]}", "actor_type": "system",
            "payload": {
                "planId": "plan-0001", "planDigest": PD, "publicationDigest": PUB,
                "workflowId": "nightly", "workflowDefinitionDigest": "5" * 64, "stepCount": 2,
            },
            "created_at_ms": 1000,
        }),
    ]
    for rec, mdigest, (*_, i) in zip(records, mutation_digests, STEPS, strict=True):
        rows.append(("step_runs", step_run_row(rec)))
        rows.append(("run_events", {
            "id": step_event_id(i), "run_id": RUN_ID, "sequence": i + 1, "type": "step.created",
            "dedupe_key": step_event_id(i), "actor_type": "system", "step_run_id": rec["id"],
            "payload": {
                "stepRunId": rec["id"], "stepKey": rec["stepKey"], "kind": "task", "from": None,
                "to": rec["status"], "version": 1, "stepRunDigest": rec["stepRunDigest"],
            },
            "created_at_ms": 1000,
        }))
        rows.append(("step_run_mutations", {
            "mutation_id": mutation_id(i), "mutation_digest": mdigest, "run_id": RUN_ID,
            "step_run_id": rec["id"], "step_run_digest": rec["stepRunDigest"],
            "event_id": step_event_id(i), "event_sequence": i + 1, "run_version": i + 1,
            "step_run_json": rec, "committed_at_ms": 1000,
        }))
    rows.append(("plugin_package_workflow_admissions", {
        "plan_digest": PD, "plan_id": "plan-0001", "run_id": RUN_ID, "project_id": "proj-1",
        "package_name": "demo-pkg", "installation_id": "inst-1", "lock_digest": "1" * 64,
        "generation": 1, "generation_digest": "2" * 64, "materialized_revision_digest": MRD,
        "publication_digest": PUB, "workflow_id": "nightly", "workflow_definition_digest": "5" * 64,
        "step_count": 2, "admitted_at_ms": 1000, "final_run_version": 3,
        "final_run_event_sequence": 3, "receipt_digest": receipt_digest, "plan_json": the_plan,
        "receipt_json": {**unsigned_receipt, "receiptDigest": receipt_digest},
    }))
    for sr, key, task, tdd, needs, status, i in STEPS:
        rows.append(("plugin_package_workflow_admission_steps", {
            "plan_digest": PD, "run_id": RUN_ID, "step_key": key, "step_run_id": sr,
            "task_id": task, "task_definition_ref": f"plugin-package:{MRD}:task:{task}",
            "task_definition_digest": tdd, "needs_json": needs, "initial_status": status,
            "mutation_id": mutation_id(i), "event_id": step_event_id(i),
        }))

    unsigned_task_receipt = {
        "schema": "qinglong/plugin-package-workflow-task-attempt-admission@v1",
        "attemptId": ATTEMPT_ID,
        "planDigest": PD,
        "runId": RUN_ID,
        "stepRunId": "sr-fetch",
        "stepRunVersion": 1,
        "stepRunDigest": records[0]["stepRunDigest"],
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
    }
    task_digest = json_digest(
        "qinglong/plugin-package-workflow-task-attempt-receipt@v1", unsigned_task_receipt
    )
    assert task_digest == "a850e847b992bdefd003c44f9877d33f1e5a894b7619c1d63c5b5b432ead624a"
    rows += [
        ("run_attempts", {
            "id": ATTEMPT_ID, "run_id": RUN_ID, "step_run_id": "sr-fetch", "attempt": 1,
            "status": "claimed", "executor_type": "remote_worker", "worker_id": "worker-1",
            "lease_generation": 1, "lease_version": 0, "lease_expires_at_ms": 32000,
            "callback_sequence": 0, "created_at_ms": 2000,
        }),
        ("run_events", {
            "id": ATTEMPT_EVENT_ID, "run_id": RUN_ID, "sequence": 4,
            "type": "workflow.task_attempt_admitted", "dedupe_key": ATTEMPT_EVENT_ID,
            "actor_type": "system", "attempt_id": ATTEMPT_ID, "step_run_id": "sr-fetch",
            "payload": {"planDigest": PD, "stepRunId": "sr-fetch", "stepRunVersion": 1},
            "created_at_ms": 2000,
        }),
        ("plugin_package_workflow_task_attempt_admissions", {
            "receipt_digest": task_digest, "attempt_id": ATTEMPT_ID, "plan_digest": PD,
            "run_id": RUN_ID, "step_run_id": "sr-fetch", "step_run_version": 1,
            "step_run_digest": records[0]["stepRunDigest"], "generation_digest": "2" * 64,
            "resource_task_id": "fetcher", "task_reconciliation_receipt_digest": "8" * 64,
            "project_id": "proj-1", "task_id": "pkg:demo-pkg:fetcher",
            "task_revision": "qltd:v1:1:" + "9" * 64, "source_revision": 1,
            "task_definition_digest": "9" * 64, "executor_type": "remote_worker",
            "execution_digest": "e" * 64, "attempt_number": 1, "event_id": ATTEMPT_EVENT_ID,
            "run_version": 4, "run_event_sequence": 4, "admitted_at_ms": 2000,
            "receipt_json": {**unsigned_task_receipt, "receiptDigest": task_digest},
        }),
        ("run_dispatch_leases", lease_row()),
    ]
    return rows


def lease_row(**changes: Any) -> Row:
    row: Row = {
        "attempt_id": ATTEMPT_ID, "run_id": RUN_ID, "status": "leased", "version": 0,
        "lease_generation": 1, "worker_id": "worker-1", "acquired_at_ms": 2000,
        "renewed_at_ms": 2000, "expires_at_ms": 32000, "updated_at_ms": 2000,
    }
    return {**row, **changes}


def bundle_row(table: str, index: int = 0) -> Row:
    """A deep copy of the index-th bundle row of ``table`` (to corrupt one field of it)."""
    return copy.deepcopy([row for t, row in bundle() if t == table][index])


def extra_step_run(**changes: Any) -> Row:
    """A third StepRun row (new id/key) of the seeded Run, with column and JSON changes applied."""
    record = step_run_record("sr-extra", "extra", "extra", "a" * 64, "ready", 3)
    record.update(changes)
    return step_run_row(record)


# ---------------------------------------------------------------------------------------------
# Server


@pytest.mark.postgres
def test_server_answers_select_1_over_unix_socket(pg: PgServer) -> None:
    with psycopg.connect(pg.dsn("postgres")) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
        if isinstance(pg, ThrowawayCluster):
            assert c.info.host.startswith("/")
            # inet_server_addr() is NULL on a Unix-socket connection
            assert c.execute("SELECT inet_server_addr()").fetchone() == (None,)
            assert c.execute("SHOW listen_addresses").fetchone() == ("",)
            assert c.execute("SHOW fsync").fetchone() == ("off",)
            assert c.execute("SELECT current_user").fetchone() == ("qlwf",)


_seen_databases: list[str] = []


@pytest.mark.postgres
@pytest.mark.parametrize("round_", [1, 2])
def test_each_test_gets_a_fresh_database(conn: psycopg.Connection[Any], db_name: str, round_: int) -> None:
    assert db_name not in _seen_databases
    _seen_databases.append(db_name)
    assert conn.execute("SELECT current_database()").fetchone() == (db_name,)
    # nothing left over from the previous round, which created the same table
    assert conn.execute("SELECT to_regclass('public.marker')").fetchone() == (None,)
    conn.execute("CREATE TABLE public.marker (round integer)")
    # created with C collation and UTF8, so text order is code-point order
    row = conn.execute(
        "SELECT datcollate, pg_encoding_to_char(encoding) FROM pg_database WHERE datname = %s",
        (db_name,),
    ).fetchone()
    assert row == ("C", "UTF8")


@pytest.mark.postgres
def test_throwaway_cluster_lifecycle() -> None:
    if find_pg_bin() is None:
        pytest.skip(UNAVAILABLE_MESSAGE)
    with ThrowawayCluster() as cluster:
        base = cluster.base_dir
        assert cluster.running and (base / "data" / "postmaster.pid").exists()
        dsn = cluster.create_database("lifecycle")
        with psycopg.connect(dsn) as c:
            assert c.execute("SELECT current_database()").fetchone() == ("lifecycle",)
        cluster.drop_database("lifecycle")
    assert not cluster.running
    assert not base.exists()
    cluster.stop()  # idempotent


@pytest.mark.postgres
def test_server_from_env_without_binaries_or_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QLWF_PG_DSN", raising=False)
    monkeypatch.setattr(external, "find_pg_bin", lambda: None)
    with pytest.raises(PostgresUnavailable) as info:
        server_from_env()
    assert str(info.value) == UNAVAILABLE_MESSAGE
    assert "\n" not in str(info.value)


@pytest.mark.postgres
def test_find_pg_bin_returns_a_directory_with_the_binaries() -> None:
    found = find_pg_bin()
    if found is None:
        pytest.skip(UNAVAILABLE_MESSAGE)
    assert all((Path(found) / name).exists() for name in ("pg_ctl", "initdb", "postgres"))


# ---------------------------------------------------------------------------------------------
# Schema


TABLES = {
    "runs", "run_attempts", "run_events", "step_runs", "step_run_mutations",
    "plugin_package_workflow_admissions", "plugin_package_workflow_admission_steps",
    "plugin_package_workflow_task_attempt_admissions", "run_dispatch_leases",
}


@pytest.mark.postgres
def test_schema_applies_cleanly_and_reapplies(conn: psycopg.Connection[Any]) -> None:
    conn.execute(schema_sql())
    conn.execute(schema_sql())  # IF NOT EXISTS everywhere: a second application is a no-op
    tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'ql3'")}
    assert tables == TABLES
    constraints = {r[0] for r in conn.execute(
        "SELECT conname FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
        "WHERE n.nspname = 'ql3'"
    )}
    assert {
        "ql3_run_attempts_step_run_fk", "ql3_run_events_step_run_fk", "ql3_step_runs_parent_fk",
        "ql3_run_events_run_sequence_uidx", "ql3_run_attempts_run_attempt_uidx",
        "ql3_step_runs_run_id_uidx", "ql3_step_runs_run_step_uidx",
        "ql3_step_run_mutations_event_uidx",
    } <= constraints
    indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'ql3'")}
    assert {
        "ql3_runs_project_idempotency_uidx", "ql3_runs_workflow_cancel_requested_idx",
        "ql3_run_attempts_lease_idx", "ql3_run_attempts_recovery_idx",
        "ql3_run_events_run_dedupe_uidx", "ql3_step_runs_run_status_idx",
        "ql3_step_runs_recovery_idx", "ql3_step_run_mutations_step_idx",
    } <= indexes


@pytest.mark.postgres
def test_valid_admission_bundle_is_accepted(seeded: psycopg.Connection[Any]) -> None:
    counts = {t: seeded.execute(sql.SQL("SELECT count(*) FROM ql3.{}").format(sql.Identifier(t))).fetchone()
              for t in TABLES}
    assert counts["step_runs"] == (2,) and counts["run_events"] == (4,)
    # jsonb keeps the mirror readable as an object with explicit nulls
    row = seeded.execute("SELECT step_run_json FROM ql3.step_runs WHERE id = 'sr-report'").fetchone()
    assert row is not None and row[0]["readyAtMs"] is None and "readyAtMs" in row[0]


@pytest.mark.postgres
@pytest.mark.parametrize("value", [
    {}, [], "x", 0, None, {"a": [1, [2, {}], {"b": []}], "c": "x\u0001\u007f\u00e9/\"\\\n\t"},
    {"k": "é" * 50, "n": -12345678901234, "t": True, "f": False, "z": None},
])
def test_canonical_json_octets_matches_canonical_bytes(
    schema_conn: psycopg.Connection[Any], value: Any
) -> None:
    row = schema_conn.execute("SELECT ql3.canonical_json_octets(%s)", (Jsonb(value),)).fetchone()
    assert row == (len(canonical(value)),)


@pytest.mark.postgres
def test_text_order_is_code_point_order(schema_conn: psycopg.Connection[Any]) -> None:
    ids = ["a-b", "a:b", "a.b", "aB", "a0", "A", "Z", "z", "a_b", "ab"]
    for run_id in ids:
        insert(schema_conn, "runs", {**bundle_row("runs"), "id": run_id, "idempotency_key": None})
    got = [r[0] for r in schema_conn.execute("SELECT id FROM ql3.runs ORDER BY id")]
    assert got == sorted(ids)


# -- checks (23514) ---------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("changes", [
    {"status": "leased", "released_at_ms": 3000},
    {"status": "leased", "completed_at_ms": 3000},
    {"status": "released", "released_at_ms": 3000},  # release_reason missing
    {"status": "completed", "completed_at_ms": 3000, "release_reason": "declined"},
    {"expires_at_ms": 2000},  # must be strictly after renewed_at_ms
])
def test_lease_shape_violations_are_rejected(seeded: psycopg.Connection[Any], changes: Row) -> None:
    seeded.execute("DELETE FROM ql3.run_dispatch_leases")
    rejected(seeded, "run_dispatch_leases", lease_row(**changes), CHECK_VIOLATION)
    # and the intact variants are fine
    insert(seeded, "run_dispatch_leases", lease_row(status="released", released_at_ms=3000,
                                                    release_reason="declined", updated_at_ms=3000))


@pytest.mark.postgres
def test_step_run_json_disagreeing_with_a_column_is_rejected(seeded: psycopg.Connection[Any]) -> None:
    good = extra_step_run()
    cases: list[Row] = []
    for key, value in [("status", "pending"), ("version", 2), ("required", False),
                       ("readyAtMs", 999), ("definitionDigest", "b" * 64), ("schema", "x")]:
        cases.append({**good, "step_run_json": {**good["step_run_json"], key: value}})
    # a nullable key must be present with an explicit null
    missing = dict(good["step_run_json"])
    del missing["inputRef"]
    cases.append({**good, "step_run_json": missing})
    cases.append({**good, "step_run_json": {**good["step_run_json"], "extra": 1}})
    cases.append({**good, "step_run_json": [good["step_run_json"]]})
    cases.append({**good, "status": "pending", "ready_at_ms": None})  # columns vs unchanged JSON
    for case in cases:
        rejected(seeded, "step_runs", case, CHECK_VIOLATION)
    insert(seeded, "step_runs", good)


@pytest.mark.postgres
@pytest.mark.parametrize("changes", [
    {"startedAtMs": 1000},                                        # ready with a start time
    {"status": "running", "startedAtMs": 1000, "attemptCount": 0},  # started without attempts
    {"status": "pending"},                                        # pending with readyAtMs
    {"readyAtMs": 999},                                           # ready before created
    {"status": "failed", "finishedAtMs": 1000},                   # failed without resultCode
    {"status": "succeeded", "finishedAtMs": 1000, "resultCode": "execution_failed"},
    {"status": "waiting_approval"},                               # no approval_request_id
    {"outputRef": "out://x"},                                     # outputRef only when succeeded
    {"resultCode": "Bad-Code", "status": "failed", "finishedAtMs": 1000},
    {"parentStepRunId": "sr-extra"},                              # parent = self
    {"attemptCount": 65},
    {"definitionRef": "é" * 257},                                 # 514 octets
])
def test_step_run_record_invariants_are_enforced(seeded: psycopg.Connection[Any], changes: Row) -> None:
    # JSON and columns agree, so only the row invariant can reject the row
    rejected(seeded, "step_runs", extra_step_run(**changes), CHECK_VIOLATION)


@pytest.mark.postgres
@pytest.mark.parametrize(("table", "changes"), [
    ("runs", {"id": "run-x\n"}),
    ("runs", {"id": "-run"}),
    ("runs", {"execution_owner": "legacy"}),
    ("runs", {"cancel_reason": "bored"}),
    ("run_events", {"id": "ev/bad"}),
    ("run_events", {"payload": ["not", "an", "object"]}),
    ("run_events", {"payload": {"blob": "x" * 16374}}),  # canonical 16385 bytes
    ("run_attempts", {"worker_id": None}),  # lease fields are all-or-nothing
    ("run_attempts", {"attempt": 8193}),
])
def test_value_patterns_and_shapes_are_enforced(
    seeded: psycopg.Connection[Any], table: str, changes: Row
) -> None:
    index = {"run_events": 3}.get(table, 0)
    row = {**bundle_row(table, index), **changes}
    if table == "runs":
        row["idempotency_key"] = None
    if table == "run_events":
        row.update(id=changes.get("id", "ev-new"), sequence=99, dedupe_key=None)
    if table == "run_attempts":
        row.update(id="wta:other", attempt=changes.get("attempt", 2))
    rejected(seeded, table, row, CHECK_VIOLATION)


@pytest.mark.postgres
def test_event_payload_at_the_canonical_limit_is_accepted(seeded: psycopg.Connection[Any]) -> None:
    payload = {"blob": "x" * 16373}
    assert len(canonical(payload)) == 16384  # jsonb text would be 16385 bytes
    insert(seeded, "run_events", {**bundle_row("run_events", 3), "id": "ev-big", "sequence": 99,
                                  "dedupe_key": None, "payload": payload})


# tables whose bundle rows reference the key table (seeded only after it)
DEPENDENTS = {
    "plugin_package_workflow_admissions": (
        "plugin_package_workflow_admission_steps",
        "plugin_package_workflow_task_attempt_admissions",
    ),
    "step_run_mutations": ("plugin_package_workflow_admission_steps",),
}


@pytest.mark.postgres
@pytest.mark.parametrize(("table", "path", "value", "constraint"), [
    ("plugin_package_workflow_admissions", ("plan_json", "planId"), "plan-other",
     "ql3_pp_wf_admissions_plan_json_ck"),
    ("plugin_package_workflow_admissions", ("plan_json", "target", "generation"), 2,
     "ql3_pp_wf_admissions_plan_json_ck"),
    ("plugin_package_workflow_admissions", ("receipt_json", "finalRunVersion"), 4,
     "ql3_pp_wf_admissions_receipt_json_ck"),
    ("plugin_package_workflow_admissions", ("plan_json", "steps"), [],
     "ql3_pp_wf_admissions_plan_json_ck"),
    ("plugin_package_workflow_task_attempt_admissions", ("receipt_json", "attemptNumber"), 2,
     "ql3_pp_wf_task_attempt_admissions_receipt_ck"),
    ("plugin_package_workflow_task_attempt_admissions", ("task_revision",), "qltd:v1:2:" + "9" * 64,
     "ql3_pp_wf_task_attempt_admissions_revision_ck"),
    ("plugin_package_workflow_task_attempt_admissions", ("executor_type",), "docker",
     "ql3_pp_wf_task_attempt_admissions_executor_ck"),
    ("step_run_mutations", ("step_run_json", "lastMutationId"), "wfm:other",
     "ql3_step_run_mutations_json_ck"),
    ("plugin_package_workflow_admission_steps", ("needs_json",), ["Fetch"],
     "ql3_pp_wf_admission_steps_needs_ck"),
    ("plugin_package_workflow_admission_steps", ("initial_status",), "pending",
     "ql3_pp_wf_admission_steps_needs_ck"),
])
def test_json_mirrors_and_ledger_checks_are_enforced(
    schema_conn: psycopg.Connection[Any], table: str, path: tuple[str, ...], value: Any, constraint: str
) -> None:
    skip = {table, *DEPENDENTS.get(table, ())}
    for other, other_row in bundle():
        if other not in skip:
            insert(schema_conn, other, other_row)
    row = bundle_row(table)
    target: Any = row
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    if table == "plugin_package_workflow_task_attempt_admissions" and len(path) == 1:
        # keep the receipt mirror intact, so only the column's own check can fail
        camel = "".join(w.capitalize() if n else w for n, w in enumerate(path[0].split("_")))
        row["receipt_json"][camel] = value
    error = rejected(schema_conn, table, row, CHECK_VIOLATION)
    assert error.diag.constraint_name == constraint
    insert(schema_conn, table, bundle_row(table))  # the intact row is accepted


# -- uniqueness (23505) -------------------------------------------------------------------------


@pytest.mark.postgres
def test_duplicate_event_sequence_is_rejected(seeded: psycopg.Connection[Any]) -> None:
    row = {**bundle_row("run_events"), "id": "ev-dup", "dedupe_key": "ev-dup"}  # sequence 1 again
    error = rejected(seeded, "run_events", row, UNIQUE_VIOLATION)
    assert error.diag.constraint_name == "ql3_run_events_run_sequence_uidx"


@pytest.mark.postgres
def test_duplicate_dedupe_key_and_ready_epoch_are_rejected(seeded: psycopg.Connection[Any]) -> None:
    row = {**bundle_row("run_events"), "id": "ev-dup", "sequence": 99}  # same dedupe_key
    assert rejected(seeded, "run_events", row, UNIQUE_VIOLATION).diag.constraint_name == (
        "ql3_run_events_run_dedupe_uidx"
    )
    run = {**bundle_row("runs"), "id": "run-0002"}  # same (project_id, idempotency_key)
    rejected(seeded, "runs", run, UNIQUE_VIOLATION)


# -- foreign keys (23503) -----------------------------------------------------------------------


@pytest.mark.postgres
def test_attempt_naming_no_step_run_is_rejected(seeded: psycopg.Connection[Any]) -> None:
    row = {**bundle_row("run_attempts"), "id": "wta:other", "attempt": 2, "step_run_id": "sr-missing"}
    error = rejected(seeded, "run_attempts", row, FOREIGN_KEY_VIOLATION)
    assert error.diag.constraint_name == "ql3_run_attempts_step_run_fk"


@pytest.mark.postgres
def test_step_run_of_another_run_is_rejected(seeded: psycopg.Connection[Any]) -> None:
    insert(seeded, "runs", {**bundle_row("runs"), "id": "run-0002", "idempotency_key": None})
    attempt = {**bundle_row("run_attempts"), "id": "wta:other", "run_id": "run-0002",
               "step_run_id": "sr-fetch"}
    assert rejected(seeded, "run_attempts", attempt, FOREIGN_KEY_VIOLATION).diag.constraint_name == (
        "ql3_run_attempts_step_run_fk"
    )
    event = {**bundle_row("run_events", 1), "id": "ev-x", "run_id": "run-0002", "sequence": 1,
             "dedupe_key": None}
    assert rejected(seeded, "run_events", event, FOREIGN_KEY_VIOLATION).diag.constraint_name == (
        "ql3_run_events_step_run_fk"
    )
    orphan = extra_step_run(parentStepRunId="sr-nowhere")
    assert rejected(seeded, "step_runs", orphan, FOREIGN_KEY_VIOLATION).diag.constraint_name == (
        "ql3_step_runs_parent_fk"
    )


def test_administration_tools_are_found_with_or_without_sbin_on_path(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """useradd and setpriv live in sbin directories, which a minimal environment's PATH (`env -i`,
    cron, some CI runners) lacks: they are looked up there too, after PATH."""
    on_path, sbin = tmp_path / "bin", tmp_path / "sbin"
    for directory in (on_path, sbin):
        directory.mkdir()
        tool = directory / "qlwf-probe-tool"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    monkeypatch.setattr(binaries, "_SBIN_DIRS", (str(sbin),))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert binaries.system_tool("qlwf-probe-tool") == str(sbin / "qlwf-probe-tool")
    monkeypatch.setenv("PATH", str(on_path))
    assert binaries.system_tool("qlwf-probe-tool") == str(on_path / "qlwf-probe-tool")
    assert binaries.system_tool("qlwf-no-such-tool") is None
