"""admit_workflow (commands.md §4.1, frontier.md §2–§3)."""

from __future__ import annotations

import json
from typing import Any

from qlwf.model import messages as M
from qlwf.model import tables as T
from qlwf.model.admission import (
    RUN_IDENTITY_KEYS,
    admission_ledger,
    admission_step_entries,
    normalized_plan_bundle,
)
from qlwf.model.errors import CommandErrors, Invalid, QlwfError
from qlwf.model.records import Record, normalize_plan

from . import arguments
from .columns import admission_columns
from .context import StoreTx
from .store import Store

Prepared = tuple[Record, Record]


def prepare(fail: CommandErrors, args: Any) -> Prepared:
    arguments.command(fail, args)
    try:
        plan = normalize_plan(args["plan"])
    except QlwfError as e:
        raise Invalid(T.FAMILIES["plan"].invalid or "", "plan_invalid", e.message) from e
    return plan, normalized_plan_bundle(plan)


def lock(store: Store, fail: CommandErrors, prepared: Prepared) -> None:
    """No locks before its reads: uniqueness and serializability decide concurrent admissions (§6.3)."""


def run(tx: StoreTx, prepared: Prepared) -> Record:
    plan, bundle = prepared
    store, fail = tx.store, tx.fail
    if plan["plannedAtMs"] > tx.now:
        raise fail.invalid("planned_in_future", M.PLANNED_IN_FUTURE)
    same_id = store.admissions_by_plan_id(plan["planId"])
    if same_id:
        if same_id[0]["plan_digest"] == plan["planDigest"]:
            receipt = _verify_frozen_evidence(tx, bundle, same_id[0])
            return {"status": "existing", "receipt": receipt}
        raise fail.conflict("plan_id_conflict", M.plan_id_taken(plan["planId"]))
    if store.run_exists(plan["runId"]) or store.admission_for_run_exists(plan["runId"]):
        raise fail.conflict("run_id_conflict", M.run_id_taken(plan["runId"]))
    if store.existing_step_run_ids([s["stepRunId"] for s in plan["steps"]]):
        raise fail.conflict("step_run_id_conflict", M.STEP_RUN_ID_TAKEN)
    # storage.md §4: Run; admission event; per step StepRun, step.created event, ledger entry;
    # admission record; admission step entries.
    store.insert_run(bundle["run"])
    store.insert_event(bundle["admissionEvent"])
    for m, entry in zip(bundle["stepMutations"], admission_ledger(bundle), strict=True):
        store.insert_step_run(m["stepRun"])
        store.insert_event(m["event"])
        store.insert_mutation(entry)
    store.insert_admission(plan, bundle["receipt"])
    for e in admission_step_entries(plan, bundle):
        store.insert_admission_step(e)
    return {"status": "created", "receipt": bundle["receipt"]}


def _verify_frozen_evidence(tx: StoreTx, bundle: Record, row: dict[str, Any]) -> Record:
    """frontier.md §3.2: exact replay verifies only the frozen admission evidence."""
    store = tx.store
    plan = bundle["plan"]
    pd, run_id, n = plan["planDigest"], plan["runId"], len(plan["steps"])
    problems: list[str] = []
    try:
        stored_plan, stored_receipt = json.loads(row["plan_json"]), json.loads(row["receipt_json"])
    except ValueError:
        stored_plan = stored_receipt = None
    if stored_plan != plan or stored_receipt != bundle["receipt"]:
        problems.append(M.STORED_PLAN_DIFFERS)
    elif any(row[c] != v for c, v in admission_columns(plan, bundle["receipt"]).items()):
        problems.append("admission columns differ from the plan or receipt")
    expected_events = [bundle["admissionEvent"], *(m["event"] for m in bundle["stepMutations"])]
    if store.events_up_to(run_id, n + 1) != expected_events:
        problems.append(M.ADMISSION_EVENTS_DIFFER)
    stored_entries = {e["stepKey"]: e for e in store.admission_steps(pd)}
    if any(stored_entries.get(e["stepKey"]) != e for e in admission_step_entries(plan, bundle)):
        problems.append(M.ADMISSION_STEPS_DIFFER)
    for entry in admission_ledger(bundle):
        if store.first_ledger_entry(entry["stepRunId"]) != entry:
            problems.append(M.first_ledger_entry_differs(entry["stepRunId"]))
    run = store.run(run_id)
    expected_run = bundle["run"]
    if (run is None or any(run.get(k) != expected_run[k] for k in (*RUN_IDENTITY_KEYS, "createdAtMs", "startedAtMs"))
            or run["status"] not in T.RUN_STATUSES or run["version"] != run["eventSequence"]
            or run["version"] < n + 1):
        problems.append(M.RUN_IDENTITY_DRIFTED)
    for m in bundle["stepMutations"]:
        created = m["stepRun"]
        stored = store.step_run(created["id"])
        s = None if stored is None else stored.record
        if s is None or any(s[k] != created[k] for k in ("id", "runId", "stepKey", "kind", "definitionRef",
                                                          "definitionDigest", "required", "parentStepRunId",
                                                          "inputRef", "createdAtMs")) or s["version"] < 1:
            problems.append(M.step_identity_drifted(created["id"]))
    if problems:
        raise tx.fail.unavailable("admission_drift", "; ".join(problems))
    receipt: Record = stored_receipt  # equal to the bundle's receipt (checked above), so an object
    return receipt
