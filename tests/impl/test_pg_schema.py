"""PostgreSQL schema constraints the single-writer path never hits (issue 11 §3; storage.md §2).

The database is seeded through the adapter (two admitted workflows, one admitted attempt with a lease);
each case then writes ONE violating row directly and requires PostgreSQL to refuse it with the right
SQLSTATE and the right constraint, so a case fails when that specific constraint is dropped. Every case
runs in a transaction that is rolled back, so the seed stays valid for the next one. A constraint that
another one implies or shadows (no row reaches it first) has a case that drops that other one first, in
the same rolled-back transaction: every named constraint and unique index has a violating row, and the
completeness test counts a constraint only once PostgreSQL named it refusing a case's row.

Copies are `INSERT ... SELECT jsonb_populate_record(NULL::t, to_jsonb(x) || patch)` of a seeded row;
a case whose target row is missing inserts or updates nothing and therefore fails too.

NOT NULL violations carry no constraint name in PostgreSQL 15, so those cases (one per required column)
assert the table and column instead. schema.sql declares no triggers; the coverage test fails if one appears.

PostgreSQL checks NOT NULL, then CHECK constraints, then unique indexes while inserting the row, and
foreign keys last (after-row triggers), so a unique case may leave a dangling reference and a check
case may break a unique key: the earlier check still decides.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg import errors
from qlwf.conformance.generate import plans
from qlwf.conformance.provision import PgServer, unique_database_name
from qlwf.impl.port import FixedClock
from qlwf.impl.postgres.adapter import PostgresAdapter
from qlwf.impl.postgres.database import PgDatabase, schema_sql

pytestmark = pytest.mark.postgres

T0 = 1_000_000
UNIQUE, CHECK, FK, NOT_NULL = "23505", "23514", "23503", "23502"
BAD_HEX = "A" * 64  # uppercase: not a DIGEST
FRESH_HEX = "f" * 64  # a well-formed digest no seeded row uses

RUNS = "ql3.runs"
SR = "ql3.step_runs"
ATT = "ql3.run_attempts"
EV = "ql3.run_events"
MUT = "ql3.step_run_mutations"
ADM = "ql3.plugin_package_workflow_admissions"
STEPS = "ql3.plugin_package_workflow_admission_steps"
TAA = "ql3.plugin_package_workflow_task_attempt_admissions"
LEASE = "ql3.run_dispatch_leases"

# Seeded rows, addressed by stable keys (digests and ids derived from them stay out of the cases).
RUN1 = "id = 'run-1'"
STEP_A = "id = 'run-1:a'"  # ready, attempt_count 0
STEP_B = "id = 'run-1:b'"  # pending
ATTEMPT = "run_id = 'run-1'"  # the only attempt
ADMITTED_EVENT = "run_id = 'run-1' AND sequence = 1"  # workflow.admitted: no step, no attempt
MUTATION_A = "step_run_id = 'run-1:a'"
ADMISSION1 = "run_id = 'run-1'"
ADMISSION_STEP_A = "run_id = 'run-1' AND step_key = 'a'"
RECEIPT = "run_id = 'run-1'"  # the only task attempt admission
THE_LEASE = "run_id = 'run-1'"


def lit(value: Any) -> str:
    """An SQL literal of a JSON-able value."""
    if value is None:
        return "NULL"
    if isinstance(value, bool | int):
        return str(value).lower()
    return "'" + str(value).replace("'", "''") + "'"


def js(**values: Any) -> str:
    """A jsonb literal of `values`."""
    return lit(json.dumps(values)) + "::jsonb"


# JSON keys that are not the camelCase of their column
_KEY_OVERRIDES = {MUT: {"mutation_id": "lastMutationId", "step_run_id": "id"}}


def _mirrored(table: str, document: str, values: dict[str, Any]) -> str:
    """`document` (a jsonb SQL expression) with the keys of the changed columns set to the new values;
    only keys the document already has, so each JSON mirror check keeps agreeing with the columns."""
    keys = {_KEY_OVERRIDES.get(table, {}).get(c) or re.sub(r"_([a-z])", lambda m: m[1].upper(), c): v
            for c, v in values.items()}
    return (f"{document} || coalesce((SELECT jsonb_object_agg(k, v) FROM jsonb_each({js(**keys)}) AS e(k, v)"
            f" WHERE {document} ? k), '{{}}')")


def copy(table: str, where: str, mirrors: tuple[str, ...] = (), **values: Any) -> str:
    """INSERT a copy of the row of `table` selected by `where` with `values` replaced, in the row and in its
    JSON `mirrors` columns."""
    patch = " || ".join([js(**values), *(f"jsonb_build_object('{m}', {_mirrored(table, f'x.{m}', values)})"
                                         for m in mirrors)])
    return (f"INSERT INTO {table} SELECT (jsonb_populate_record(NULL::{table}, to_jsonb(x) || {patch})).*"
            f" FROM {table} AS x WHERE {where}")


def change(table: str, where: str, mirrors: tuple[str, ...] = (), **values: Any) -> str:
    """UPDATE the row of `table` selected by `where`: `values`, in the row and in its JSON `mirrors`."""
    sets = [f"{c} = {lit(v)}" for c, v in values.items()] + [f"{m} = {_mirrored(table, m, values)}" for m in mirrors]
    return f"UPDATE {table} SET {', '.join(sets)} WHERE {where}"


def update(table: str, sets: str, where: str) -> str:
    return f"UPDATE {table} SET {sets} WHERE {where}"


def merged(column: str, **values: Any) -> str:
    """`column = column || {values}`: replace keys of a jsonb column."""
    return f"{column} = {column} || {js(**values)}"


# JSON columns that mirror other columns (keys the copy or update keeps in step)
SR_JSON, TAA_JSON, ADM_JSON = ("step_run_json",), ("receipt_json",), ("plan_json", "receipt_json")


class Case(NamedTuple):
    description: str
    sql: str
    params: tuple[Any, ...]
    sqlstate: str
    constraint: str
    setup: str = ""  # DDL run first in the case's transaction: drops what would refuse the row before


# (description, SQL, params, SQLSTATE, constraint[, setup])
_CASE_ROWS: list[tuple[Any, ...]] = [
    # §2.1 Runs
    ("run id taken", copy(RUNS, RUN1, (), idempotency_key=None), (), UNIQUE, "ql3_runs_pkey"),
    ("run id not PORTABLE_ID", copy(RUNS, RUN1, (), id="-run", idempotency_key=None), (), CHECK, "ql3_runs_id_ck"),
    ("legacy execution owner", change(RUNS, RUN1, execution_owner="legacy"), (), CHECK,
     "ql3_runs_execution_owner_ck"),
    ("unknown run status", change(RUNS, RUN1, status="paused"), (), CHECK, "ql3_runs_status_ck"),
    ("negative run version", change(RUNS, RUN1, version=-1), (), CHECK, "ql3_runs_counters_ck"),
    ("negative start time", change(RUNS, RUN1, started_at_ms=-1), (), CHECK, "ql3_runs_times_ck"),
    ("unknown cancel reason", change(RUNS, RUN1, cancel_reason="whim"), (), CHECK, "ql3_runs_cancel_reason_ck"),
    ("idempotency key reused in the project", copy(RUNS, RUN1, (), id="run-3"), (), UNIQUE,
     "ql3_runs_project_idempotency_uidx"),
    # §2.4 StepRuns (run-1:b is pending, run-1:a ready with no attempt counted)
    ("step run id taken", copy(SR, STEP_B, SR_JSON, run_id="run-2", step_key="c"), (), UNIQUE,
     "ql3_step_runs_pkey"),
    ("step key taken in the run", copy(SR, STEP_B, SR_JSON, id="run-1:c"), (), UNIQUE,
     "ql3_step_runs_run_step_uidx"),
    # UNIQUE (run_id, id), the target of the (run_id, step_run_id) foreign keys of §2.10, is implied by the
    # primary key on id, whose index PostgreSQL checks first: reached without it
    ("step run id taken in the run", copy(SR, STEP_B, SR_JSON, step_key="c"), (), UNIQUE,
     "ql3_step_runs_run_id_uidx", "ALTER TABLE ql3.step_runs DROP CONSTRAINT ql3_step_runs_pkey"),
    ("step run of a missing run", copy(SR, STEP_B, SR_JSON, id="run-9:b", run_id="run-9"), (), FK,
     "ql3_step_runs_run_fk"),
    ("parent step run missing", change(SR, STEP_B, SR_JSON, parent_step_run_id="run-1:zz"), (), FK,
     "ql3_step_runs_parent_fk"),
    ("step run is its own parent", change(SR, STEP_B, SR_JSON, parent_step_run_id="run-1:b"), (), CHECK,
     "ql3_step_runs_ids_ck"),
    ("unknown step kind", change(SR, STEP_B, SR_JSON, kind="robot"), (), CHECK, "ql3_step_runs_kind_ck"),
    ("unknown step status", change(SR, STEP_B, SR_JSON, status="paused"), (), CHECK, "ql3_step_runs_status_ck"),
    ("definition digest not hex", change(SR, STEP_B, SR_JSON, definition_digest=BAD_HEX), (), CHECK,
     "ql3_step_runs_digests_ck"),
    ("empty definition ref", change(SR, STEP_B, SR_JSON, definition_ref=""), (), CHECK, "ql3_step_runs_texts_ck"),
    ("attempt count above 64", change(SR, STEP_B, SR_JSON, attempt_count=65), (), CHECK,
     "ql3_step_runs_counters_ck"),
    ("updated before created", change(SR, STEP_B, SR_JSON, updated_at_ms=T0 - 1), (), CHECK,
     "ql3_step_runs_time_order_ck"),
    ("pending step with a ready time", change(SR, STEP_B, SR_JSON, ready_at_ms=T0), (), CHECK,
     "ql3_step_runs_status_times_ck"),
    ("pending step with a result code", change(SR, STEP_B, SR_JSON, result_code="oops"), (), CHECK,
     "ql3_step_runs_result_shape_ck"),
    ("started without an attempt", change(SR, STEP_A, SR_JSON, status="running", started_at_ms=T0), (), CHECK,
     "ql3_step_runs_attempts_ck"),
    ("step run json with an extra key", update(SR, merged("step_run_json", extra=1), STEP_B), (), CHECK,
     "ql3_step_runs_json_shape_ck"),
    ("step run json disagrees with its column", update(SR, merged("step_run_json", status="ready"), STEP_B), (),
     CHECK, "ql3_step_runs_json_mirror_ck"),
    # §2.2 RunAttempts
    ("attempt id taken", copy(ATT, ATTEMPT, (), attempt=2), (), UNIQUE, "ql3_run_attempts_pkey"),
    ("attempt number taken in the run", copy(ATT, ATTEMPT, (), id="wta:new"), (), UNIQUE,
     "ql3_run_attempts_run_attempt_uidx"),
    ("attempt of a missing run", copy(ATT, ATTEMPT, (), id="wta:new", run_id="run-9", step_run_id=None), (), FK,
     "ql3_run_attempts_run_fk"),
    ("attempt names another run's step run (§2.10)", change(ATT, ATTEMPT, step_run_id="run-2:a"), (), FK,
     "ql3_run_attempts_step_run_fk"),
    ("attempt id not PORTABLE_ID", copy(ATT, ATTEMPT, (), id="-wta", attempt=2), (), CHECK,
     "ql3_run_attempts_id_ck"),
    ("attempt number 0", change(ATT, ATTEMPT, attempt=0), (), CHECK, "ql3_run_attempts_attempt_ck"),
    ("unknown attempt status", change(ATT, ATTEMPT, status="paused"), (), CHECK, "ql3_run_attempts_status_ck"),
    ("negative callback sequence", change(ATT, ATTEMPT, callback_sequence=-1), (), CHECK,
     "ql3_run_attempts_lease_values_ck"),
    ("lease fields partly set", change(ATT, ATTEMPT, worker_id=None), (), CHECK, "ql3_run_attempts_lease_shape_ck"),
    # §2.3 RunEvents
    ("event id taken", copy(EV, ADMITTED_EVENT, (), sequence=99, dedupe_key=None), (), UNIQUE,
     "ql3_run_events_pkey"),
    ("event sequence taken in the run", copy(EV, ADMITTED_EVENT, (), id="evt-new", dedupe_key=None), (), UNIQUE,
     "ql3_run_events_run_sequence_uidx"),
    ("dedupe key taken in the run", copy(EV, ADMITTED_EVENT, (), id="evt-new", sequence=99), (), UNIQUE,
     "ql3_run_events_run_dedupe_uidx"),
    ("event of a missing run", copy(EV, ADMITTED_EVENT, (), id="evt-new", run_id="run-9"), (), FK,
     "ql3_run_events_run_fk"),
    ("event names a missing attempt", change(EV, ADMITTED_EVENT, attempt_id="wta:none"), (), FK,
     "ql3_run_events_attempt_fk"),
    ("event names another run's step run (§2.10)", change(EV, ADMITTED_EVENT, step_run_id="run-2:a"), (), FK,
     "ql3_run_events_step_run_fk"),
    ("event id not PORTABLE_ID", copy(EV, ADMITTED_EVENT, (), id="-evt", sequence=99, dedupe_key=None), (), CHECK,
     "ql3_run_events_id_ck"),
    ("event sequence 0", change(EV, ADMITTED_EVENT, sequence=0), (), CHECK, "ql3_run_events_sequence_ck"),
    ("unknown actor type", change(EV, ADMITTED_EVENT, actor_type="robot"), (), CHECK,
     "ql3_run_events_actor_type_ck"),
    ("payload not an object", update(EV, "payload = '[]'", ADMITTED_EVENT), (), CHECK, "ql3_run_events_payload_ck"),
    ("negative event time", change(EV, ADMITTED_EVENT, created_at_ms=-1), (), CHECK, "ql3_run_events_created_ck"),
    # §2.5 StepRunMutations
    ("mutation id taken", copy(MUT, MUTATION_A, (), event_id="evt-new"), (), UNIQUE, "ql3_step_run_mutations_pkey"),
    ("second mutation of one event", copy(MUT, MUTATION_A, SR_JSON, mutation_id="wfm:new"), (), UNIQUE,
     "ql3_step_run_mutations_event_uidx"),
    ("mutation of a missing step run", change(MUT, MUTATION_A, SR_JSON, step_run_id="run-1:zz"), (), FK,
     "ql3_step_run_mutations_step_run_fk"),
    ("mutation of a missing event", change(MUT, MUTATION_A, event_id="evt-new"), (), FK,
     "ql3_step_run_mutations_event_fk"),
    ("mutation id not IDENTIFIER", change(MUT, MUTATION_A, SR_JSON, mutation_id="-wfm"), (), CHECK,
     "ql3_step_run_mutations_ids_ck"),
    ("mutation digest not hex", update(MUT, "mutation_digest = %s", MUTATION_A), (BAD_HEX,), CHECK,
     "ql3_step_run_mutations_digests_ck"),
    ("mutation event sequence 0", change(MUT, MUTATION_A, event_sequence=0), (), CHECK,
     "ql3_step_run_mutations_counters_ck"),
    ("post-image of another run", update(MUT, merged("step_run_json", runId="run-2"), MUTATION_A), (), CHECK,
     "ql3_step_run_mutations_json_ck"),
    # §2.6 Workflow admissions
    ("plan digest taken", copy(ADM, ADMISSION1, ADM_JSON, plan_id="plan-9", run_id="run-9",
                               receipt_digest=FRESH_HEX), (), UNIQUE, "ql3_pp_wf_admissions_pkey"),
    ("plan id taken", copy(ADM, ADMISSION1, ADM_JSON, plan_digest=FRESH_HEX, run_id="run-9",
                           receipt_digest=FRESH_HEX), (), UNIQUE, "ql3_pp_wf_admissions_plan_id_uidx"),
    ("second admission of a run", copy(ADM, ADMISSION1, ADM_JSON, plan_digest=FRESH_HEX, plan_id="plan-9",
                                       receipt_digest=FRESH_HEX), (), UNIQUE, "ql3_pp_wf_admissions_run_id_uidx"),
    ("receipt digest taken", copy(ADM, ADMISSION1, ADM_JSON, plan_digest=FRESH_HEX, plan_id="plan-9",
                                  run_id="run-9"), (), UNIQUE, "ql3_pp_wf_admissions_receipt_digest_uidx"),
    # UNIQUE (plan_digest, run_id), the target of the child tables' foreign keys, is implied by the primary
    # key and by UNIQUE (run_id): reached without both
    ("plan digest and run taken", copy(ADM, ADMISSION1, ADM_JSON, plan_id="plan-9", receipt_digest=FRESH_HEX), (),
     UNIQUE, "ql3_pp_wf_admissions_plan_run_uidx",
     "ALTER TABLE ql3.plugin_package_workflow_admissions DROP CONSTRAINT ql3_pp_wf_admissions_pkey, "
     "DROP CONSTRAINT ql3_pp_wf_admissions_run_id_uidx"),
    ("admission of a missing run", copy(ADM, ADMISSION1, ADM_JSON, plan_digest=FRESH_HEX, plan_id="plan-9",
                                        run_id="run-9", receipt_digest=FRESH_HEX), (), FK,
     "ql3_pp_wf_admissions_run_fk"),
    ("package name not PACKAGE_NAME",
     update(ADM, "package_name = %s, plan_json = jsonb_set(plan_json, '{target,packageName}', to_jsonb(%s::text))",
            ADMISSION1), ("-pkg", "-pkg"), CHECK, "ql3_pp_wf_admissions_ids_ck"),
    ("lock digest not hex",
     update(ADM, "lock_digest = %s, plan_json = jsonb_set(plan_json, '{target,lockDigest}', to_jsonb(%s::text))",
            ADMISSION1), (BAD_HEX, BAD_HEX), CHECK, "ql3_pp_wf_admissions_digests_ck"),
    ("generation 0", update(ADM, "generation = 0, plan_json = jsonb_set(plan_json, '{target,generation}', '0')",
                            ADMISSION1), (), CHECK, "ql3_pp_wf_admissions_counters_ck"),
    ("plan json of another plan", update(ADM, merged("plan_json", planId="plan-2"), ADMISSION1), (), CHECK,
     "ql3_pp_wf_admissions_plan_json_ck"),
    ("receipt json with another final version", update(ADM, merged("receipt_json", finalRunVersion=9), ADMISSION1),
     (), CHECK, "ql3_pp_wf_admissions_receipt_json_ck"),
    # §2.7 Workflow admission steps
    ("step key taken in the plan",
     copy(STEPS, ADMISSION_STEP_A, (), step_run_id="run-1:zz", mutation_id="wfm:zz", event_id="evt-zz"), (),
     UNIQUE, "ql3_pp_wf_admission_steps_pkey"),
    ("step run admitted twice",
     copy(STEPS, ADMISSION_STEP_A, (), step_key="zz", mutation_id="wfm:zz", event_id="evt-zz"), (),
     UNIQUE, "ql3_pp_wf_admission_steps_step_run_uidx"),
    ("mutation admitted twice",
     copy(STEPS, ADMISSION_STEP_A, (), step_key="zz", step_run_id="run-1:zz", event_id="evt-zz"), (),
     UNIQUE, "ql3_pp_wf_admission_steps_mutation_uidx"),
    ("event admitted twice",
     copy(STEPS, ADMISSION_STEP_A, (), step_key="zz", step_run_id="run-1:zz", mutation_id="wfm:zz"), (),
     UNIQUE, "ql3_pp_wf_admission_steps_event_uidx"),
    ("step of a missing admission", change(STEPS, ADMISSION_STEP_A, plan_digest=FRESH_HEX), (), FK,
     "ql3_pp_wf_admission_steps_admission_fk"),
    ("step names a missing step run", change(STEPS, ADMISSION_STEP_A, step_run_id="run-1:zz"), (), FK,
     "ql3_pp_wf_admission_steps_step_run_fk"),
    ("step names a missing mutation", change(STEPS, ADMISSION_STEP_A, mutation_id="wfm:zz"), (), FK,
     "ql3_pp_wf_admission_steps_mutation_fk"),
    ("step names a missing event", change(STEPS, ADMISSION_STEP_A, event_id="evt-zz"), (), FK,
     "ql3_pp_wf_admission_steps_event_fk"),
    ("task definition digest not hex", change(STEPS, ADMISSION_STEP_A, task_definition_digest=BAD_HEX), (), CHECK,
     "ql3_pp_wf_admission_steps_values_ck"),
    ("pending step that needs nothing", change(STEPS, ADMISSION_STEP_A, initial_status="pending"), (), CHECK,
     "ql3_pp_wf_admission_steps_needs_ck"),
    # §2.8 Task attempt admissions
    ("task receipt digest taken", copy(TAA, RECEIPT, TAA_JSON, attempt_id="wta:new", event_id="wte:new",
                                       step_run_version=2, attempt_number=2), (), UNIQUE,
     "ql3_pp_wf_task_attempt_admissions_pkey"),
    ("attempt admitted twice", copy(TAA, RECEIPT, TAA_JSON, receipt_digest=FRESH_HEX, event_id="wte:new",
                                    step_run_version=2, attempt_number=2), (), UNIQUE,
     "ql3_pp_wf_task_attempt_admissions_attempt_uidx"),
    ("admission event reused", copy(TAA, RECEIPT, TAA_JSON, receipt_digest=FRESH_HEX, attempt_id="wta:new",
                                    step_run_version=2, attempt_number=2), (), UNIQUE,
     "ql3_pp_wf_task_attempt_admissions_event_uidx"),
    ("second admission in one ready epoch", copy(TAA, RECEIPT, TAA_JSON, receipt_digest=FRESH_HEX,
                                                 attempt_id="wta:new", event_id="wte:new", attempt_number=2), (),
     UNIQUE, "ql3_pp_wf_task_attempt_admissions_epoch_uidx"),
    ("attempt number admitted twice in the run", copy(TAA, RECEIPT, TAA_JSON, receipt_digest=FRESH_HEX,
                                                      attempt_id="wta:new", event_id="wte:new", step_run_version=2),
     (), UNIQUE, "ql3_pp_wf_task_attempt_admissions_number_uidx"),
    ("task admission of a missing workflow admission", change(TAA, RECEIPT, TAA_JSON, plan_digest=FRESH_HEX), (), FK,
     "ql3_pp_wf_task_attempt_admissions_admission_fk"),
    ("task admission of a missing step run", change(TAA, RECEIPT, TAA_JSON, step_run_id="run-1:zz"), (), FK,
     "ql3_pp_wf_task_attempt_admissions_step_run_fk"),
    ("task admission of a missing attempt", change(TAA, RECEIPT, TAA_JSON, attempt_id="wta:zz"), (), FK,
     "ql3_pp_wf_task_attempt_admissions_attempt_fk"),
    ("task admission of a missing event", change(TAA, RECEIPT, TAA_JSON, event_id="wte:zz"), (), FK,
     "ql3_pp_wf_task_attempt_admissions_event_fk"),
    ("task id of another resource task", change(TAA, RECEIPT, TAA_JSON, resource_task_id="b"), (), CHECK,
     "ql3_pp_wf_task_attempt_admissions_ids_ck"),
    ("generation digest not hex", change(TAA, RECEIPT, generation_digest=BAD_HEX), (), CHECK,
     "ql3_pp_wf_task_attempt_admissions_digests_ck"),
    ("event sequence differs from run version", change(TAA, RECEIPT, TAA_JSON, run_event_sequence=99), (), CHECK,
     "ql3_pp_wf_task_attempt_admissions_counters_ck"),
    ("unknown executor type", change(TAA, RECEIPT, TAA_JSON, executor_type="cloud"), (), CHECK,
     "ql3_pp_wf_task_attempt_admissions_executor_ck"),
    ("task revision of another source revision", change(TAA, RECEIPT, source_revision=2), (), CHECK,
     "ql3_pp_wf_task_attempt_admissions_revision_ck"),
    ("receipt json with another run version", update(TAA, merged("receipt_json", runVersion=9), RECEIPT), (), CHECK,
     "ql3_pp_wf_task_attempt_admissions_receipt_ck"),
    # §2.9 Dispatch leases
    ("second lease of an attempt", copy(LEASE, THE_LEASE), (), UNIQUE, "ql3_run_dispatch_leases_pkey"),
    ("lease of a missing attempt", change(LEASE, THE_LEASE, attempt_id="wta:zz"), (), FK,
     "ql3_run_dispatch_leases_attempt_fk"),
    ("lease of a missing run", change(LEASE, THE_LEASE, run_id="run-9"), (), FK, "ql3_run_dispatch_leases_run_fk"),
    ("unknown lease status (the shape check's ELSE)", change(LEASE, THE_LEASE, status="expired"), (), CHECK,
     "ql3_run_dispatch_leases_shape_ck"),
    # ...which PostgreSQL runs first (checks run in name order): the status list is reached without it
    ("unknown lease status (the status list)", change(LEASE, THE_LEASE, status="expired"), (), CHECK,
     "ql3_run_dispatch_leases_status_ck",
     "ALTER TABLE ql3.run_dispatch_leases DROP CONSTRAINT ql3_run_dispatch_leases_shape_ck"),
    ("lease generation 0", change(LEASE, THE_LEASE, lease_generation=0), (), CHECK,
     "ql3_run_dispatch_leases_values_ck"),
    ("lease expires when renewed", update(LEASE, "expires_at_ms = renewed_at_ms", THE_LEASE), (), CHECK,
     "ql3_run_dispatch_leases_times_ck"),
    ("live lease with a release time", update(LEASE, "released_at_ms = renewed_at_ms", THE_LEASE), (), CHECK,
     "ql3_run_dispatch_leases_shape_ck"),
]

CASES = [Case(*row) for row in _CASE_ROWS]

# Every NOT NULL column of storage.md §2 (PostgreSQL column of each table).
NOT_NULL_COLUMNS = {
    "runs": "id project_id task_id task_revision trigger_type execution_origin execution_owner status version"
            " event_sequence priority created_at_ms",
    "step_runs": "id run_id step_key kind definition_ref definition_digest required status version attempt_count"
                 " created_at_ms updated_at_ms last_mutation_id step_run_digest step_run_json",
    "run_attempts": "id run_id attempt status executor_type callback_sequence created_at_ms",
    "run_events": "id run_id sequence type actor_type payload created_at_ms",
    "step_run_mutations": "mutation_id mutation_digest run_id step_run_id step_run_digest event_id event_sequence"
                          " run_version step_run_json committed_at_ms",
    "plugin_package_workflow_admissions": "plan_digest plan_id run_id project_id package_name installation_id"
                                          " lock_digest generation generation_digest materialized_revision_digest"
                                          " publication_digest workflow_id workflow_definition_digest step_count"
                                          " admitted_at_ms final_run_version final_run_event_sequence"
                                          " receipt_digest plan_json receipt_json",
    "plugin_package_workflow_admission_steps": "plan_digest run_id step_key step_run_id task_id task_definition_ref"
                                               " task_definition_digest needs_json initial_status mutation_id event_id",
    "plugin_package_workflow_task_attempt_admissions": "receipt_digest attempt_id plan_digest run_id step_run_id"
                                                       " step_run_version step_run_digest generation_digest"
                                                       " resource_task_id task_reconciliation_receipt_digest"
                                                       " project_id task_id task_revision source_revision"
                                                       " task_definition_digest executor_type execution_digest"
                                                       " attempt_number event_id run_version run_event_sequence"
                                                       " admitted_at_ms receipt_json",
    "run_dispatch_leases": "attempt_id run_id status version lease_generation worker_id acquired_at_ms"
                           " renewed_at_ms expires_at_ms updated_at_ms",
}
REQUIRED = [(table, column) for table, columns in NOT_NULL_COLUMNS.items() for column in columns.split()]


# ------------------------------------------------------------------------------------------------
# Fixtures


def seed(db: PgDatabase) -> None:
    """Two admitted workflows (run-1: a ready, b needs a; run-2 likewise); run-1:a has an admitted
    attempt holding a lease."""
    port = PostgresAdapter(db, FixedClock())
    for run_id in ("run-1", "run-2"):
        plan = plans.make_plan(run_id, run_id.replace("run", "plan"), {"a": [], "b": ["a"]}, T0)
        port.execute("admit_workflow", {"plan": plan}, now=T0)
    out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a",
                                              "binding": plans.binding("a")}, now=T0)
    port.execute("claim_lease", {"attemptId": out["attempt"]["id"], "workerId": "w1", "durationMs": 10_000}, now=T0)


def seeded_connection(server: PgServer, prefix: str) -> Iterator[psycopg.Connection[Any]]:
    name = unique_database_name(prefix)
    db = PgDatabase(server.create_database(name), size=1)
    try:
        db.apply_schema()
        seed(db)
        with psycopg.connect(db.conninfo, autocommit=True) as conn:
            yield conn
    finally:
        db.close()
        server.drop_database(name)


@pytest.fixture(scope="module")
def conn(pg_server: PgServer) -> Iterator[psycopg.Connection[Any]]:
    yield from seeded_connection(pg_server, "qlwf_schema")


def refused(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...], setup: str = "") -> errors.Error:
    """The error of `sql`, run in a savepoint inside a transaction that is always rolled back (after
    `setup`, in the same transaction)."""
    with conn.transaction(force_rollback=True):
        if setup:
            conn.execute(setup)
        with pytest.raises(psycopg.Error) as info, conn.transaction():
            conn.execute(sql, params)
    assert isinstance(info.value, errors.Error)
    return info.value


def refused_by(conn: psycopg.Connection[Any], case: Case) -> str | None:
    """The constraint PostgreSQL names refusing the case's row (its SQLSTATE must be the case's)."""
    error = refused(conn, case.sql, case.params, case.setup)
    assert error.sqlstate == case.sqlstate, error.diag.message_primary
    return error.diag.constraint_name


# ------------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_a_violating_row_is_refused_by_its_constraint(conn: psycopg.Connection[Any], case: Case) -> None:
    assert refused_by(conn, case) == case.constraint


@pytest.mark.parametrize(("table", "column"), REQUIRED, ids=[f"{t}.{c}" for t, c in REQUIRED])
def test_a_required_column_refuses_null(conn: psycopg.Connection[Any], table: str, column: str) -> None:
    sql = f"UPDATE ql3.{table} SET {column} = NULL WHERE ctid = (SELECT min(ctid) FROM ql3.{table})"
    error = refused(conn, sql, ())
    assert (error.sqlstate, error.diag.table_name, error.diag.column_name) == (NOT_NULL, table, column)


def test_every_named_constraint_and_unique_index_has_a_violating_row(conn: psycopg.Connection[Any]) -> None:
    """Every name the DDL declares (CHECK, FOREIGN KEY, UNIQUE, PRIMARY KEY, unique index) is one PostgreSQL
    named refusing a case's row: the cases run here, and a case counts for the constraint the database
    named, not for the one it is filed under (a list of cases alone would not do)."""
    text = re.sub(r"--[^\n]*", "", schema_sql())
    declared = set(re.findall(r"\bCONSTRAINT\s+(\w+)", text))
    declared |= set(re.findall(r"\bCREATE\s+UNIQUE\s+INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", text))
    refused = {refused_by(conn, case) for case in CASES}
    assert sorted(declared - refused, key=str) == []  # no row was refused by it: a new constraint needs a case
    assert sorted(refused - declared, key=str) == []  # a refusal by something the DDL does not name
    assert len(declared) > 90  # the parse found the schema's constraints
    # a trigger would need cases of its own (SQLite's StepRun reference triggers are foreign keys here)
    assert re.findall(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?TRIGGER\s+(\w+)", text, re.I) == []


def test_every_not_null_column_has_a_case(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        "SELECT c.relname, a.attname FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid"
        " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'ql3' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull"
    ).fetchall()
    assert sorted(rows) == sorted(REQUIRED)


# Drop one constraint (DDL is transactional: rolled back with the case) and the same row is accepted,
# so each case's SQL violates exactly the constraint it names.
TEETH = {
    "ql3_runs_status_ck": "ALTER TABLE ql3.runs DROP CONSTRAINT ql3_runs_status_ck",
    "ql3_run_attempts_step_run_fk": "ALTER TABLE ql3.run_attempts DROP CONSTRAINT ql3_run_attempts_step_run_fk",
    "ql3_runs_project_idempotency_uidx": "DROP INDEX ql3.ql3_runs_project_idempotency_uidx",
}


@pytest.fixture(scope="module")
def throwaway(pg_server: PgServer) -> Iterator[psycopg.Connection[Any]]:
    yield from seeded_connection(pg_server, "qlwf_schemateeth")


@pytest.mark.parametrize("constraint", sorted(TEETH))
def test_without_its_constraint_the_violating_row_is_accepted(throwaway: psycopg.Connection[Any],
                                                              constraint: str) -> None:
    (sql, params), = [(c.sql, c.params) for c in CASES if c.constraint == constraint]
    assert refused(throwaway, sql, params).diag.constraint_name == constraint
    with throwaway.transaction(force_rollback=True):
        throwaway.execute(TEETH[constraint])
        assert throwaway.execute(sql, params).rowcount == 1
