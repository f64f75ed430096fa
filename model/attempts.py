"""Task attempt admission builder and worker-path helpers (task-attempts.md §3–§7)."""

from __future__ import annotations

from typing import Any

from . import ids
from . import tables as T
from .errors import InvalidRaiser
from .records import (
    TASK_RECEIPT_KEYS,
    Record,
    binding_plan_problem,
    exact_keys,
    make_event,
    normalize_binding,
    normalize_plan,
    normalize_step_run,
    task_receipt_digest,
)
from .values import INT31_MAX, is_int, is_int_in, is_object, is_timestamp

ADMISSION_FAIL = InvalidRaiser(T.FAMILIES["task_admission"].invalid or "", "input_invalid")
ADMISSION_INPUT_KEYS = ("plan", "run", "stepRun", "binding", "attemptNumber", "admittedAtMs")
SYSTEM_ACTOR: Record = {"type": "system"}


def admission_run_problem(run: Any, plan: Record) -> str | None:
    """task-attempts.md §3 step 4 without the counter bound (which §3A checks last, as A18): the
    first way `run` is not the running, intent-free Run the plan admitted, or None."""
    if not is_object(run):
        return "run must be an object"
    t = plan["target"]
    for key, value in (
        ("id", plan["runId"]), ("projectId", t["projectId"]), ("taskId", t["workflowId"]),
        ("taskRevision", t["publicationDigest"]), ("triggerType", T.TRIGGER_TYPE),
        ("executionOrigin", T.EXECUTION_ORIGIN), ("executionOwner", T.EXECUTION_OWNER),
        ("requestId", plan["planId"]), ("idempotencyKey", f"plugin-package-workflow:{plan['planId']}"),
        ("status", "running"),
    ):
        if not (run.get(key) == value and type(run.get(key)) is str):
            return f"run {key} does not match the plan"
    if "cancelRequestedAtMs" in run:
        return "run has cancel intent"
    v = run.get("version")
    if not (is_int(v) and v >= 1 and v == run.get("eventSequence") and is_int(run.get("eventSequence"))):
        return "run counters invalid"
    return None


def admission_step_problem(step_run: Record, plan: Record) -> tuple[str | None, Record | None]:
    """task-attempts.md §3 step 5 on a normalized StepRun: (the first problem or None, its plan step)."""
    step = next((s for s in plan["steps"] if s["stepRunId"] == step_run["id"]), None)
    if step is None:
        return "StepRun is not a plan step", None
    if not (step_run["runId"] == plan["runId"] and step_run["stepKey"] == step["stepKey"]
            and step_run["definitionRef"] == step["taskDefinitionRef"]
            and step_run["definitionDigest"] == step["taskDefinitionDigest"] and step_run["required"] is True):
        return "StepRun does not agree with its plan step", step
    if step_run["kind"] != "task":
        return "StepRun kind must be task", step
    if step_run["status"] != "ready":
        return "StepRun is not ready", step
    if step_run["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        return "StepRun attempts exhausted", step
    return None, step


def build_task_attempt_admission(inp: Any) -> Record:
    """task-attempts.md §3: receipt, attempt, event and the updated Run for one ready epoch."""
    exact_keys(inp, ADMISSION_INPUT_KEYS, (), ADMISSION_FAIL, "task attempt admission input")
    try:
        plan = normalize_plan(inp["plan"])
    except Exception as e:
        ADMISSION_FAIL(f"durable Workflow evidence is invalid: {e}")
    return _admission(plan, inp)


def build_loaded_task_attempt_admission(inp: Any) -> Record:
    """build_task_attempt_admission where inp["plan"] is a plan normalize_plan returned and nobody
    changed since (a command's loaded plan): the same answer, without normalizing the plan again."""
    exact_keys(inp, ADMISSION_INPUT_KEYS, (), ADMISSION_FAIL, "task attempt admission input")
    return _admission(inp["plan"], inp)


def _admission(plan: Record, inp: Record) -> Record:
    fail = ADMISSION_FAIL
    try:
        step_run = normalize_step_run(inp["stepRun"])
    except Exception as e:
        fail(f"durable Workflow evidence is invalid: {e}")
    binding = normalize_binding(inp["binding"], fail)
    run = inp["run"]
    run_problem = admission_run_problem(run, plan)
    if run_problem:
        fail(run_problem)
    fail.check(run["version"] < INT31_MAX, "run counters invalid")
    step_problem, step = admission_step_problem(step_run, plan)
    if step_problem:
        fail(step_problem)
    assert step is not None
    problem = binding_plan_problem(binding, plan, step)
    if problem:
        fail(f"binding disagrees with the plan step: {problem}")
    at = inp["admittedAtMs"]
    fail.check(is_timestamp(at) and at >= plan["plannedAtMs"] and at >= step_run["updatedAtMs"],
               "admittedAtMs invalid or precedes the plan or the StepRun")
    n = inp["attemptNumber"]
    fail.check(is_int_in(n, 1, T.MAX_RUN_ATTEMPTS), "attemptNumber must be 1..8192")
    return admission_outputs(plan, run, step_run, binding, n, at)


def admission_outputs(plan: Record, run: Record, step_run: Record, binding: Record, n: int, at: int) -> Record:
    """The §3 outputs {receipt, attempt, event, run} of an admission whose inputs passed their checks
    (the §3 ladder above, or the §3A ladder of attempts_ql3 with its derived binding)."""
    attempt_id, event_id = ids.task_attempt_ids(plan["planDigest"], step_run["id"], step_run["version"])
    new_version = run["version"] + 1
    receipt: Record = {
        "schema": T.SCHEMA_TASK_RECEIPT, "attemptId": attempt_id, "planDigest": plan["planDigest"],
        "runId": plan["runId"], "stepRunId": step_run["id"], "stepRunVersion": step_run["version"],
        "stepRunDigest": step_run["stepRunDigest"], **binding, "attemptNumber": n, "eventId": event_id,
        "runVersion": new_version, "runEventSequence": new_version, "admittedAtMs": at,
    }
    receipt["receiptDigest"] = task_receipt_digest(receipt)
    assert tuple(receipt) == TASK_RECEIPT_KEYS
    attempt = {"id": attempt_id, "runId": plan["runId"], "stepRunId": step_run["id"], "attempt": n,
               "status": "claimed", "executorType": binding["executorType"], "callbackSequence": 0,
               "createdAtMs": at}
    event = make_event(
        event_id=event_id, run_id=plan["runId"], sequence=new_version, type_="workflow.task_attempt_admitted",
        actor=SYSTEM_ACTOR, attempt_id=attempt_id, step_run_id=step_run["id"], created_at_ms=at,
        payload={"planDigest": plan["planDigest"], "stepRunId": step_run["id"],
                 "stepRunVersion": step_run["version"], "resourceTaskId": binding["resourceTaskId"],
                 "taskId": binding["taskId"], "taskRevision": binding["taskRevision"],
                 "executorType": binding["executorType"], "executionDigest": binding["executionDigest"],
                 "attemptNumber": n},
    )
    new_run = dict(run)
    new_run["version"] = new_version
    new_run["eventSequence"] = new_version
    return {"receipt": receipt, "attempt": attempt, "event": event, "run": new_run}


def lease_is_live(lease: Record | None, now: int) -> bool:
    return lease is not None and lease["status"] == "leased" and lease["expiresAtMs"] > now


def lease_is_expired(lease: Record | None, now: int) -> bool:
    return lease is not None and lease["status"] == "leased" and lease["expiresAtMs"] <= now


def fence_problem(lease: Record | None, worker_id: str, generation: int, now: int) -> str | None:
    """FENCE (commands.md §2.4): the first failing reason, or None."""
    if lease is None:
        return "lease_missing"
    if lease["status"] != "leased":
        return "not_leased"
    if lease["workerId"] != worker_id:
        return "worker_mismatch"
    if lease["leaseGeneration"] != generation:
        return "lease_generation_mismatch"
    if lease["expiresAtMs"] <= now:
        return "lease_expired"
    return None


def completion_status(command: str, run: Record, attempt: Record, now: int,
                      exit_code: int | None) -> T.CompletionRule:
    """task-attempts.md §7 read from the COMPLETION_RULES table."""
    intent = "cancelRequestedAtMs" in run
    deadline = attempt.get("deadlineAtMs")
    return T.completion_rule(
        command, intent, intent and run.get("cancelReason") == "timeout",
        deadline is not None and deadline <= now, exit_code == 0,
    )
