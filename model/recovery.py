"""Task recovery builder (task-attempts.md §8, ADR-0228 D-2)."""

from __future__ import annotations

from typing import Any

from . import ids
from . import tables as T
from .errors import InvalidRaiser
from .records import (
    ATTEMPT_RECEIPT_AGREEMENT,
    Record,
    exact_keys,
    foreign_attempt_keys,
    make_event,
    shared_step_run,
    shared_task_receipt,
)
from .steprun import transition_step_run_mutation
from .values import is_int, is_int31, is_object, is_timestamp, same

P = ids.RECOVERY_PREFIXES

RECOVERY_FAIL = InvalidRaiser(T.FAMILIES["task_recovery"].invalid or "", "input_invalid")
RECOVERY_INPUT_KEYS = ("admission", "run", "attempt", "stepRun", "reason", "observedAtMs")
SYSTEM_ACTOR: Record = {"type": "system"}

# (reason, attempt status) → required StepRun shape ("epoch" = ready at the admitted epoch,
# "running_epoch" = running at version + 1 with startedAtMs).
RECOVERY_FIT = {
    ("unstarted_claim_expired", "claimed"): "epoch",
    ("execution_not_running", "starting"): "epoch",
    ("execution_not_running", "running"): "running_epoch",
}


def build_task_recovery(inp: Any) -> Record:
    fail = RECOVERY_FAIL
    exact_keys(inp, RECOVERY_INPUT_KEYS, (), fail, "task recovery input")
    try:  # only read here, never part of the result: the exact-input memos may answer (model/speedups.py)
        receipt = shared_task_receipt(inp["admission"])
        step_run = shared_step_run(inp["stepRun"])
    except Exception as e:
        fail(f"recovery evidence is invalid: {e}")
    reason = inp["reason"]
    fail.check(reason in T.RECOVERY_REASONS, "reason invalid")
    run = inp["run"]
    fail.check(is_object(run), "run must be an object")
    fail.check(run.get("id") == receipt["runId"] and run.get("triggerType") == T.TRIGGER_TYPE
               and run.get("executionOrigin") == T.EXECUTION_ORIGIN and run.get("executionOwner") == T.EXECUTION_OWNER
               and run.get("status") == "running", "run is not the running workflow aggregate of the receipt")
    v, s = run.get("version"), run.get("eventSequence")
    fail.check(is_int(v) and is_int(s) and 1 <= v <= T.RECOVERY_RUN_VERSION_MAX and v == s
               and v >= receipt["runVersion"], "run counters invalid")
    attempt = inp["attempt"]
    # Item 4. The attempt is a ql3 snapshot (records.md §6.7): besides item 4 its one shape check is
    # that every key belongs to the generic RunAttempt record; lease keys need not come together.
    fail.check(is_object(attempt), "attempt must be an object")
    foreign = foreign_attempt_keys(attempt)
    fail.check(not foreign, f"attempt has keys outside the RunAttempt record: {foreign[:3]}")
    fail.check(all(same(attempt.get(a), receipt[r]) for a, r in ATTEMPT_RECEIPT_AGREEMENT),
               "attempt disagrees with its receipt")
    fail.check(type(attempt.get("status")) is str and attempt["status"] in T.ACTIVE_ATTEMPT, "attempt is not active")
    fail.check(is_int31(attempt.get("callbackSequence")), "callbackSequence invalid")
    # Item 5.
    fail.check(step_run["id"] == receipt["stepRunId"] and step_run["runId"] == receipt["runId"]
               and step_run["kind"] == "task", "StepRun is not the receipt's task StepRun")
    # Item 6: the reason fits the attempt and the StepRun.
    fit = RECOVERY_FIT.get((reason, attempt["status"]))
    fail.check(fit is not None, f"reason {reason} does not fit a {attempt['status']} attempt")
    if fit == "epoch":
        fail.check(step_run["status"] == "ready" and step_run["version"] == receipt["stepRunVersion"]
                   and step_run["stepRunDigest"] == receipt["stepRunDigest"], "StepRun is not at the admitted epoch")
        fail.check(attempt["status"] != "claimed" or "startedAtMs" not in attempt, "claimed attempt has startedAtMs")
    else:
        fail.check(step_run["status"] == "running" and step_run["version"] == receipt["stepRunVersion"] + 1
                   and step_run["startedAtMs"] is not None, "StepRun is not at the running epoch")
    # Item 7: the Run's times are always read; the attempt's when present; the StepRun's when set.
    at = inp["observedAtMs"]
    fail.check(is_timestamp(at), "observedAtMs is not a timestamp")
    floors = [run.get("createdAtMs"), run.get("startedAtMs"), attempt["createdAtMs"],
              *(attempt[k] for k in ("startedAtMs", "finishedAtMs") if k in attempt)]
    fail.check(all(is_timestamp(f) for f in floors), "a recorded Run or attempt time is not a timestamp")
    floors += [t for t in (step_run["createdAtMs"], step_run["updatedAtMs"], step_run["startedAtMs"],
                           step_run["finishedAtMs"]) if t is not None]
    fail.check(all(at >= f for f in floors), "observedAtMs precedes a recorded time")

    r = ids.recovery_hash(run["id"], attempt["id"], attempt["callbackSequence"], step_run["id"],
                          step_run["version"], reason)
    codes = T.RECOVERY_PATH_CODES[reason]
    new_attempt = dict(attempt)
    new_attempt["status"] = "lost"
    new_attempt["finishedAtMs"] = at
    new_attempt["errorCode"] = codes.attempt_error_code
    new_attempt["errorSummary"] = codes.attempt_error_summary
    v += 1
    s += 1
    attempt_event = make_event(
        event_id=P["attempt_event"] + r, run_id=run["id"], sequence=s, type_="workflow.task_attempt.lost",
        actor=SYSTEM_ACTOR,
        attempt_id=attempt["id"], step_run_id=step_run["id"], created_at_ms=at,
        payload={"execution_scope": T.EXECUTION_SCOPE, "attempt_id": attempt["id"], "step_run_id": step_run["id"],
                 "from_status": attempt["status"], "to_status": "lost", "reason": reason,
                 "error_code": codes.attempt_error_code, "version": v},
    )
    plan_steps: list[tuple[str, str, str, dict[str, str]]]  # (to, mutation prefix, event prefix, extra)
    failure = {"resultCode": codes.step_result_code or "", "errorSummary": codes.step_error_summary or ""}
    if reason == "unstarted_claim_expired":
        disposition = "requeued"
        plan_steps = [("ready", P["requeue_mutation"], P["requeue_event"], {})]
    elif attempt["status"] == "starting":
        disposition = "failed"
        plan_steps = [("failed", P["failed_mutation"], P["failed_event"], failure)]
    else:
        disposition = "failed"
        plan_steps = [("lost", P["lost_mutation"], P["lost_event"], failure),
                      ("failed", P["failed_mutation"], P["failed_event"], failure)]
    mutations = []
    current = step_run
    for to, mprefix, eprefix, extra in plan_steps:
        m = transition_step_run_mutation(
            current,
            {"expectedVersion": current["version"], "expectedDigest": current["stepRunDigest"],
             "mutationId": f"{mprefix}{r}", "to": to, "atMs": at, **extra},
            {"expectedRunVersion": v, "expectedRunEventSequence": s, "eventId": f"{eprefix}{r}",
             "dedupeKey": f"{eprefix}{r}", "actor": SYSTEM_ACTOR},
        )
        mutations.append(m)
        current = m["stepRun"]
        v += 1
        s += 1
    new_run = dict(run)
    new_run["version"] = v
    new_run["eventSequence"] = s
    return {"schema": T.SCHEMA_TASK_RECOVERY, "disposition": disposition, "run": new_run, "attempt": new_attempt,
            "attemptEvent": attempt_event, "stepMutations": mutations}
