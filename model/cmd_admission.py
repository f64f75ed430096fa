"""admit_workflow (commands.md §4.1, frontier.md §2–§3).
"""

from __future__ import annotations

from typing import Any

from . import messages as M
from . import tables as T
from .admission import RUN_IDENTITY_KEYS, admission_ledger, admission_step_entries, normalized_plan_bundle
from .arguments import check_arguments
from .cmd_context import CommandContext, put_run
from .errors import Invalid, QlwfError
from .records import Record, normalize_plan
from .state import State, StateWriter


def _verify_frozen_evidence(state: State, ctx: CommandContext, bundle: Record) -> None:
    plan = bundle["plan"]
    pd = plan["planDigest"]
    run_id = plan["runId"]
    adm = state.admissions[pd]
    n = len(plan["steps"])
    problems: list[str] = []
    if adm["plan"] != plan or adm["receipt"] != bundle["receipt"]:
        problems.append(M.STORED_PLAN_DIFFERS)
    events = state.events_of(run_id)
    expected_events = [bundle["admissionEvent"], *(m["event"] for m in bundle["stepMutations"])]
    if list(events[: n + 1]) != expected_events:
        problems.append(M.ADMISSION_EVENTS_DIFFER)
    entries = admission_step_entries(plan, bundle)
    if any(state.admission_steps.get((pd, e["stepKey"])) != e for e in entries):
        problems.append(M.ADMISSION_STEPS_DIFFER)
    for entry in admission_ledger(bundle):
        ledger = state.ledger_of_step(entry["stepRunId"])
        if not ledger or ledger[0] != entry:
            problems.append(M.first_ledger_entry_differs(entry["stepRunId"]))
    run = state.runs.get(run_id)
    expected_run = bundle["run"]
    if (run is None or any(run.get(k) != expected_run[k] for k in (*RUN_IDENTITY_KEYS, "createdAtMs", "startedAtMs"))
            or run["status"] not in T.RUN_STATUSES or run["version"] != run["eventSequence"]
            or run["version"] < n + 1):
        problems.append(M.RUN_IDENTITY_DRIFTED)
    for m in bundle["stepMutations"]:
        s = state.step_runs.get(m["stepRun"]["id"])
        created = m["stepRun"]
        if s is None or any(s[k] != created[k] for k in ("id", "runId", "stepKey", "kind", "definitionRef",
                                                           "definitionDigest", "required", "parentStepRunId",
                                                           "inputRef", "createdAtMs")) or s["version"] < 1:
            problems.append(M.step_identity_drifted(created["id"]))
    if problems:
        raise ctx.unavailable("admission_drift", "; ".join(problems))


def admit_workflow(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    try:
        plan = normalize_plan(args["plan"])
    except QlwfError as e:
        raise Invalid(T.FAMILIES["plan"].invalid or "", "plan_invalid", e.message) from e
    bundle = normalized_plan_bundle(plan)
    if plan["plannedAtMs"] > ctx.now:
        raise ctx.invalid("planned_in_future", M.PLANNED_IN_FUTURE)
    same_id = [a for a in state.admissions.values() if a["plan"]["planId"] == plan["planId"]]
    if same_id:
        if same_id[0]["planDigest"] == plan["planDigest"]:
            _verify_frozen_evidence(state, ctx, bundle)
            ctx.fire(T.decision("admit.replay").id)
            return {"status": "existing", "receipt": same_id[0]["receipt"]}, state
        raise ctx.conflict("plan_id_conflict", M.plan_id_taken(plan["planId"]))
    if plan["runId"] in state.runs or state.admission_of_run(plan["runId"]):
        raise ctx.conflict("run_id_conflict", M.run_id_taken(plan["runId"]))
    if any(s["stepRunId"] in state.step_runs for s in plan["steps"]):
        raise ctx.conflict("step_run_id_conflict", M.STEP_RUN_ID_TAKEN)
    tx = StateWriter(state, ctx.now)
    put_run(tx, bundle["run"])
    tx.append_event(bundle["admissionEvent"])
    for m, entry in zip(bundle["stepMutations"], admission_ledger(bundle), strict=True):
        tx.table("step_runs")[m["stepRun"]["id"]] = m["stepRun"]
        tx.append_event(m["event"])
        tx.table("mutations")[m["mutationId"]] = entry
        ctx.fire(T.step_row("admit_workflow", None, m["stepRun"]["status"]).id)
    tx.table("admissions")[plan["planDigest"]] = {"planDigest": plan["planDigest"], "plan": plan,
                                                  "receipt": bundle["receipt"]}
    for step_entry in admission_step_entries(plan, bundle):
        tx.table("admission_steps")[(step_entry["planDigest"], step_entry["stepKey"])] = step_entry
    ctx.fire(T.run_row("admit_workflow", None, "running").id)
    return {"status": "created", "receipt": bundle["receipt"]}, tx.commit()
