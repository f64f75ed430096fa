"""Frontier resolution and frontier candidacy (frontier.md §4–§5, ADR-0226)."""

from __future__ import annotations

from typing import Any

from . import ids
from . import tables as T
from .errors import Invalid, InvalidRaiser, QlwfError
from .records import Record, shared_plan, shared_step_run, topological_keys
from .rules import explained
from .steprun import transition_normalized_mutation
from .values import is_array, is_int, is_object

FRONTIER_FAIL = InvalidRaiser(T.FAMILIES["frontier"].invalid or "", "snapshot_invalid")
RECONCILER: Record = {"type": "reconciler"}
RUN_SHAPE = (
    ("triggerType", T.TRIGGER_TYPE), ("executionOrigin", T.EXECUTION_ORIGIN),
    ("executionOwner", T.EXECUTION_OWNER), ("status", "running"),
)

# The explanations reported by --explain, one per decision the pass can take about a StepRun: the
# STEP_PERFORMERS row it fires, or none when the step stays as it is.
RULE_READY = explained(T.step_row("advance_frontier", "pending", "ready").id, "every need succeeded")
RULE_SKIP = explained(T.step_row("advance_frontier", "pending", "skipped").id,
                      "a pending-only need chain reaches a blocking step")
RULE_WAIT = explained((), "an unfinished need keeps the step pending")
RULE_NOT_PENDING = explained((), "not pending (the frontier only moves pending steps)")


def _check_run(run: Any, plan: Record) -> None:
    fail = FRONTIER_FAIL
    fail.check(is_object(run), "run must be an object")
    t = plan["target"]
    expected = (
        ("id", plan["runId"]), ("projectId", t["projectId"]), ("taskId", t["workflowId"]),
        ("taskRevision", t["publicationDigest"]), *RUN_SHAPE[:3], ("requestId", plan["planId"]),
        ("idempotencyKey", f"plugin-package-workflow:{plan['planId']}"), RUN_SHAPE[3],
    )
    for key, value in expected:
        fail.check(key in run and type(run[key]) is str and run[key] == value, f"run {key} does not match the plan")
    fail.check("cancelRequestedAtMs" not in run, "run has cancel intent")
    for key in ("version", "eventSequence"):
        fail.check(key in run and is_int(run[key]) and run[key] >= 0, f"run {key} must be an int >= 0")


def _check_step_runs(step_runs: Any, plan: Record, observed: int) -> dict[str, Record]:
    fail = FRONTIER_FAIL
    fail.check(is_array(step_runs) and len(step_runs) == len(plan["steps"]),
               "stepRuns must list exactly one StepRun per plan step")
    by_key = {s["stepKey"]: s for s in plan["steps"]}
    out: dict[str, Record] = {}
    run_id = plan["runId"]
    # Messages are formatted only on failure (this loop runs once per StepRun of every resolution).
    for i, raw in enumerate(step_runs):
        try:
            s = shared_step_run(raw)
        except QlwfError as e:
            fail(f"stepRuns[{i}] does not normalize: {e.message}")
        p = by_key.get(s["stepKey"])
        if p is None or s["stepKey"] in out:
            fail(f"stepRuns[{i}] matches no unmatched plan step")
        if not (
            s["id"] == p["stepRunId"] and s["runId"] == run_id and s["parentStepRunId"] is None
            and s["kind"] == "task" and s["definitionRef"] == p["taskDefinitionRef"]
            and s["definitionDigest"] == p["taskDefinitionDigest"] and s["required"] is True
        ):
            fail(f"stepRuns[{i}] does not match its plan step")
        out[s["stepKey"]] = s
    for s in out.values():
        if not observed >= s["updatedAtMs"]:
            fail(f"observedAtMs precedes StepRun {s['id']} updatedAtMs")
    return out


def cannot_succeed(plan: Record, status_of: dict[str, str]) -> dict[str, bool]:
    """CANTNOT_SUCCEED memo for every step key (frontier.md §4.3), from snapshot statuses."""
    needs = {s["stepKey"]: s["needs"] for s in plan["steps"]}
    memo: dict[str, bool] = {}
    # Plan steps are sorted by key, not topologically; resolve dependencies iteratively in
    # topological order so deep chains never hit Python's recursion limit.
    for key in _topological_keys(plan):
        st = status_of[key]
        if st in T.BLOCKING_STEP:
            memo[key] = True
        elif st != "pending":
            memo[key] = False
        else:
            memo[key] = any(memo[d] for d in needs[key])
    return memo


def _topological_keys(plan: Record) -> list[str]:
    order = topological_keys(plan["steps"])  # the plan is normalized: its needs are known steps
    if order is None:  # unreachable: normalize_plan (records.md §6.1) rejects cycles first
        raise Invalid(FRONTIER_FAIL.code, FRONTIER_FAIL.reason, "dependency graph is cyclic")
    return order


def step_decision(step: Record, status_of: dict[str, str], doomed: dict[str, bool]) -> str:
    """Which frontier rule decides a plan step (by snapshot statuses)."""
    if status_of[step["stepKey"]] != "pending":
        return RULE_NOT_PENDING
    if doomed[step["stepKey"]]:
        return RULE_SKIP
    if all(status_of[d] == "succeeded" for d in step["needs"]):
        return RULE_READY
    return RULE_WAIT


def resolve_frontier(snapshot: Any, *, explain: dict[str, str] | None = None) -> Record:
    """frontier.md §4: pure, deterministic, fail-closed. `explain` collects stepRunId → rule."""
    fail = FRONTIER_FAIL
    fail.check(is_object(snapshot), "snapshot must be an object")
    # Checks in the order of §4.2; a missing key fails the check that reads it (extra keys are ignored).
    plan = shared_plan(snapshot.get("plan"))
    run = snapshot.get("run")
    _check_run(run, plan)
    observed = snapshot.get("observedAtMs")
    fail.check(is_int(observed) and observed >= 0, "observedAtMs must be an int >= 0")
    by_key = _check_step_runs(snapshot.get("stepRuns"), plan, observed)

    pd = plan["planDigest"]
    status_of = {k: s["status"] for k, s in by_key.items()}
    doomed = cannot_succeed(plan, status_of)
    projected = dict(status_of)
    v, seq = run["version"], run["eventSequence"]
    mutations: list[Record] = []
    for step in plan["steps"]:
        s = by_key[step["stepKey"]]
        rule = step_decision(step, status_of, doomed)
        if explain is not None:
            explain[s["id"]] = rule
        if rule not in (RULE_READY, RULE_SKIP):
            continue
        target = "skipped" if rule == RULE_SKIP else "ready"
        mutation_id, event_id = ids.frontier_step_ids(pd, s["id"], s["version"], target)
        command: Record = {"expectedVersion": s["version"], "expectedDigest": s["stepRunDigest"],
                           "mutationId": mutation_id, "to": target, "atMs": observed}
        if target == "skipped":
            command["resultCode"] = T.FRONTIER_SKIP_RESULT_CODE
        mutations.append(transition_normalized_mutation(
            s, command, {"expectedRunVersion": v, "expectedRunEventSequence": seq, "eventId": event_id,
                         "dedupeKey": event_id, "actor": RECONCILER}))
        projected[step["stepKey"]] = target
        v += 1
        seq += 1

    ready_ids = [by_key[p["stepKey"]]["id"] for p in plan["steps"] if projected[p["stepKey"]] == "ready"]
    terminal_status = T.aggregate([projected[p["stepKey"]] for p in plan["steps"]])
    terminal = None
    if terminal_status is not None:
        event_id = ids.frontier_terminal_event_id(pd, v, terminal_status)
        terminal = {
            "expectedRunVersion": v, "expectedRunEventSequence": seq, "status": terminal_status,
            "finishedAtMs": observed, "errorCode": T.FRONTIER_TERMINAL_ERROR_CODE[terminal_status],
            "event": {
                "id": event_id, "runId": plan["runId"], "sequence": seq + 1, "type": f"workflow.{terminal_status}",
                "dedupeKey": event_id, "actorType": "reconciler",
                "payload": {"planDigest": pd, "workflowId": plan["target"]["workflowId"],
                            "stepCount": len(plan["steps"]), "status": terminal_status},
                "createdAtMs": observed,
            },
        }
    return {
        "schema": T.SCHEMA_FRONTIER, "runId": plan["runId"], "planDigest": pd,
        "expectedRunVersion": run["version"], "expectedRunEventSequence": run["eventSequence"],
        "stepMutations": mutations, "readyStepRunIds": ready_ids, "terminalStatus": terminal_status,
        "terminalTransition": terminal, "observedAtMs": observed,
    }


def is_frontier_candidate(run: Record, plan: Record, status_by_key: dict[str, str]) -> bool:
    """frontier.md §5: (A) a pending step with all direct needs succeeded or a blocking direct need,
    or (B) every StepRun terminal; only for running Runs without intent."""
    if run["status"] != "running" or "cancelRequestedAtMs" in run:
        return False
    if all(st in T.TERMINAL_STEP for st in status_by_key.values()):
        return True
    for step in plan["steps"]:
        if status_by_key[step["stepKey"]] != "pending":
            continue
        need_statuses = [status_by_key[d] for d in step["needs"]]
        if all(st == "succeeded" for st in need_statuses) or any(st in T.BLOCKING_STEP for st in need_statuses):
            return True
    return False
