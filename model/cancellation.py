"""Cancellation convergence resolution and page accounting (cancellation.md §3–§9, ADR-0228)."""

from __future__ import annotations

from typing import Any

from . import ids
from . import tables as T
from .errors import InvalidRaiser, QlwfError, Unavailable
from .records import (
    ATTEMPT_RECEIPT_AGREEMENT,
    Record,
    foreign_attempt_keys,
    make_event,
    shared_step_run,
    shared_task_receipt,
)
from .rules import explained
from .steprun import transition_normalized_mutation
from .values import INT31_MAX, is_array, is_int, is_int31, is_object, is_timestamp, same

CANCEL_FAIL = InvalidRaiser(T.FAMILIES["cancellation"].invalid or "", "snapshot_invalid")
ACTOR = T.CANCELLATION_ACTOR

# Why each row of CANCEL_ATTEMPT_TABLE / CANCEL_STEP_TABLE decides as it does; an explanation is the
# row's id, then this (rules.explained). A StepRun held by a blocked attempt is decided before the
# step table is read (§5): the command decision converge.step_held.
ATTEMPT_WHY = {"settle": "claimed without a leased lease, so settled",
               "blocked": "holds execution authority (leased claim, starting or running), so blocked"}
STEP_WHY = {"skip": "already terminal", "blocked": "running (never write a false terminal)",
            "mutate": "not executing, moved to the reason's target"}
RULE_STEP_BLOCKED_ATTEMPT = explained(T.decision("converge.step_held").id, "has a blocked active attempt")


def _check_entry(i: int, entry: Any, run: Record, steps_by_id: dict[str, Record]) -> Record:
    """cancellation.md §3 item 8 for one active entry; its attempt is a ql3 snapshot (records.md §6.7)."""
    fail = CANCEL_FAIL
    fail.check(is_object(entry) and set(entry) == {"admission", "attempt", "leaseStatus"},
               f"active entry {i} must be exactly {{admission, attempt, leaseStatus}}")
    try:  # 8a; the receipt is only read (never part of the resolution): the exact-input memo may answer
        receipt = shared_task_receipt(entry["admission"])
    except QlwfError:
        fail("active Attempt admission is invalid")
    attempt = entry["attempt"]
    # 8b, plus the one shape check of a snapshot attempt (records.md §6.7): generic-record keys only.
    fail.check(is_object(attempt) and type(attempt.get("status")) is str and attempt["status"] in T.ACTIVE_ATTEMPT,
               f"active entry {i} attempt is not claimed, starting or running")
    foreign = foreign_attempt_keys(attempt)
    fail.check(not foreign, f"active entry {i} attempt has keys outside the RunAttempt record: {foreign[:3]}")
    # 8c: a missing key fails here, since it cannot agree with the receipt.
    fail.check(same(run["id"], receipt["runId"])
               and all(same(attempt.get(a), receipt[r]) for a, r in ATTEMPT_RECEIPT_AGREEMENT),
               f"active entry {i} disagrees with its admission")
    fail.check(is_int31(attempt.get("callbackSequence")), f"active entry {i} callbackSequence invalid")  # 8d
    lease_status = entry["leaseStatus"]
    fail.check(lease_status is None or (type(lease_status) is str and lease_status in T.LEASE_STATUSES),
               f"active entry {i} leaseStatus invalid")  # 8e
    s = steps_by_id.get(receipt["stepRunId"])
    fail.check(s is not None and s["kind"] == "task", f"active entry {i} names no task StepRun")  # 8f
    assert s is not None
    if attempt["status"] in ("claimed", "starting"):  # 8g
        fail.check(s["status"] == "ready" and s["version"] == receipt["stepRunVersion"]
                   and s["stepRunDigest"] == receipt["stepRunDigest"] and "startedAtMs" not in attempt,
                   "pre-start Attempt crossed its admitted StepRun epoch")
    else:  # 8h
        fail.check(s["status"] == "running" and s["version"] == receipt["stepRunVersion"] + 1
                   and s["startedAtMs"] is not None and "startedAtMs" in attempt,
                   "running Attempt is not at its running StepRun epoch")
    return {"admission": receipt, "attempt": attempt, "leaseStatus": lease_status}


def _check_entry_times(e: Record, observed: int) -> None:
    """cancellation.md §3 item 9: observedAtMs is not before the attempt's times."""
    a = e["attempt"]
    started = a.get("startedAtMs", 0)
    CANCEL_FAIL.check(is_timestamp(started), f"Attempt {a['id']} startedAtMs is not a timestamp")
    CANCEL_FAIL.check(observed >= a["createdAtMs"] and observed >= started, "observedAtMs precedes an Attempt time")


def _bump(v: int, s: int) -> tuple[int, int]:
    if v >= INT31_MAX or s >= INT31_MAX:
        CANCEL_FAIL("Run counters would overflow")
    return v + 1, s + 1


def resolve_cancellation(snapshot: Any, *, explain: dict[str, str] | None = None) -> Record:
    """cancellation.md §3–§6. `explain` collects attempt/StepRun id → the rule that decided it."""
    fail = CANCEL_FAIL
    fail.check(is_object(snapshot), "snapshot must be an object")
    # Checks in the order of §3; a missing key fails the check that reads it.
    run = snapshot.get("run")
    fail.check(is_object(run) and run.get("triggerType") == T.TRIGGER_TYPE
               and run.get("executionOrigin") == T.EXECUTION_ORIGIN and run.get("executionOwner") == T.EXECUTION_OWNER
               and run.get("status") == "running" and "cancelRequestedAtMs" in run
               and run.get("cancelReason") in T.CANCEL_REASONS,
               "Run is not a cancelling runtime-owned Workflow aggregate")
    fail.check(is_int31(run.get("version")) and is_int31(run.get("eventSequence")), "Run counters invalid")
    requested = run["cancelRequestedAtMs"]
    fail.check(is_int(requested) and requested >= 0, "cancelRequestedAtMs invalid")
    # run.id is read by items 7 and 8c; README §6 "Errors": a value read is type-checked where first read.
    fail.check(type(run.get("id")) is str, "Run id invalid")
    observed = snapshot.get("observedAtMs")
    fail.check(is_int(observed) and observed >= 0 and observed >= requested, "observedAtMs invalid or precedes intent")
    raw_steps, raw_active = snapshot.get("stepRuns"), snapshot.get("activeTaskAttempts")
    fail.check(is_array(raw_steps) and 1 <= len(raw_steps) <= T.MAX_STEP_RUNS_PER_RUN, "stepRuns must have 1..128")
    fail.check(is_array(raw_active), "activeTaskAttempts must be an array")
    steps = []
    for i, raw in enumerate(raw_steps):
        try:
            steps.append(shared_step_run(raw))
        except QlwfError as e:
            fail(f"stepRuns[{i}] does not normalize: {e.message}")
    steps.sort(key=lambda s: (s["stepKey"], s["id"]))
    steps_by_id: dict[str, Record] = {}
    for s in steps:
        if not (s["runId"] == run["id"] and s["id"] not in steps_by_id and s["updatedAtMs"] <= observed):
            fail(f"StepRun {s['id']} is foreign, duplicated or updated after observedAtMs")
        steps_by_id[s["id"]] = s
    entries = [_check_entry(i, e, run, steps_by_id) for i, e in enumerate(raw_active)]
    entries.sort(key=lambda e: e["attempt"]["id"])
    seen_steps: set[str] = set()
    for entry in entries:
        a = entry["attempt"]
        fail.check(a["stepRunId"] not in seen_steps, "more than one active Attempt for a StepRun")
        seen_steps.add(a["stepRunId"])
        _check_entry_times(entry, observed)

    reason = run["cancelReason"]
    target = T.CANCEL_REASON_TARGET[reason]
    v, seq = run["version"], run["eventSequence"]
    blocked_attempts: list[str] = []
    blocked_steps: set[str] = set()
    transitions: list[Record] = []
    for entry in entries:
        a = entry["attempt"]
        decision = T.CANCEL_ATTEMPT_TABLE[(a["status"], entry["leaseStatus"])]
        if explain is not None:
            explain[a["id"]] = explained(T.cancel_attempt_id(a["status"], entry["leaseStatus"]), ATTEMPT_WHY[decision])
        if decision == "blocked":
            blocked_attempts.append(a["id"])
            blocked_steps.add(a["stepRunId"])
            continue
        d = ids.cancellation_hash(run["id"], requested, "attempt", a["id"], a["callbackSequence"])
        v, seq = _bump(v, seq)
        settled = dict(a)
        settled["status"] = target.status
        settled["finishedAtMs"] = observed
        settled["errorCode"] = target.error_code
        settled["errorSummary"] = target.error_summary
        event = make_event(
            event_id=f"wca:{d}", run_id=run["id"], sequence=seq, type_=f"workflow.task_attempt.{target.status}",
            actor=ACTOR, attempt_id=a["id"], step_run_id=a["stepRunId"], created_at_ms=observed,
            payload={"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                     "from_status": "claimed", "to_status": target.status, "cancel_reason": reason,
                     "cancel_requested_at_ms": requested, "error_code": target.error_code, "version": v},
        )
        transitions.append({"previousStatus": "claimed", "attempt": settled, "event": event})

    mutations: list[Record] = []
    timeout = reason == "timeout"
    for s in steps:
        if s["id"] in blocked_steps:  # only ready/running StepRuns carry active attempts
            if explain is not None:
                explain[s["id"]] = RULE_STEP_BLOCKED_ATTEMPT
            continue
        step_decision = T.CANCEL_STEP_TABLE[(s["status"], timeout)]
        if explain is not None:
            explain[s["id"]] = explained(T.cancel_step_id(s["status"], timeout), STEP_WHY[step_decision.action])
        if step_decision.action == "skip":
            continue
        if step_decision.action == "blocked":
            blocked_steps.add(s["id"])
            continue
        d = ids.cancellation_hash(run["id"], requested, "step", s["id"], s["version"])
        command: Record = {"expectedVersion": s["version"], "expectedDigest": s["stepRunDigest"],
                           "mutationId": ids.CONVERGE_MUTATION_PREFIX + d, "to": step_decision.target,
                           "atMs": observed,
                           "resultCode": step_decision.result_code}
        if step_decision.error_summary is not None:
            command["errorSummary"] = step_decision.error_summary
        if v >= INT31_MAX or seq >= INT31_MAX:
            fail("Run counters would overflow")
        mutations.append(transition_normalized_mutation(
            s, command, {"expectedRunVersion": v, "expectedRunEventSequence": seq, "eventId": f"wcs:{d}",
                         "dedupeKey": f"wcs:{d}", "actor": ACTOR}))
        v, seq = v + 1, seq + 1

    new_run = dict(run)
    terminal = None
    if not blocked_steps:
        d = ids.cancellation_hash(run["id"], requested, "run", run["id"], v)
        ev_seq = seq + 1
        terminal = {
            "expectedRunVersion": v, "expectedRunEventSequence": seq, "status": target.status,
            "finishedAtMs": observed, "errorCode": target.error_code, "errorSummary": target.error_summary,
            "event": make_event(
                event_id=f"wcr:{d}", run_id=run["id"], sequence=ev_seq, type_=f"workflow.{target.status}",
                actor=ACTOR, created_at_ms=observed,
                payload={"from_status": "running", "to_status": target.status, "step_count": len(steps),
                         "cancel_reason": reason, "cancel_requested_at_ms": requested,
                         "error_code": target.error_code, "version": v + 1},
            ),
        }
        v, seq = _bump(v, seq)
        new_run["status"] = target.status
        new_run["finishedAtMs"] = observed
        new_run["errorCode"] = target.error_code
        new_run["errorSummary"] = target.error_summary
    new_run["version"] = v
    new_run["eventSequence"] = seq
    return {
        "schema": T.SCHEMA_CANCELLATION, "expectedRunVersion": run["version"],
        "expectedRunEventSequence": run["eventSequence"], "run": new_run, "attemptTransitions": transitions,
        "stepMutations": mutations, "blockedAttemptIds": blocked_attempts,
        "blockedStepRunIds": sorted(blocked_steps), "terminalTransition": terminal, "observedAtMs": observed,
    }


PAGE_RESULT_KEYS = ("scanned", "settledRuns", "settledAttempts", "blocked", "hasMore", "next", "outcomes")


def page_bounds_problem(limit: int, result: Record) -> str | None:
    """cancellation.md §8 page-result bounds, or the violated one."""
    scanned, runs, attempts, blocked = (result[k] for k in ("scanned", "settledRuns", "settledAttempts", "blocked"))
    if not all(is_int(x) for x in (scanned, runs, attempts, blocked)):
        return "page counters must be integers"
    if not 0 <= scanned <= limit:
        return "scanned outside 0..limit"
    if not 0 <= runs <= scanned:
        return "settledRuns outside 0..scanned"
    if not 0 <= attempts <= scanned * T.MAX_STEP_RUNS_PER_RUN:
        return "settledAttempts outside 0..scanned*128"
    if not 0 <= blocked <= scanned - runs:
        return "blocked outside 0..scanned-settledRuns"
    if type(result["hasMore"]) is not bool:
        return "hasMore must be a boolean"
    return None


def check_page_result(limit: int, result: Record) -> Record:
    if list(result) != list(PAGE_RESULT_KEYS):
        raise Unavailable(T.FAMILIES["page"].unavailable or "", "result_invalid", "page result keys mismatch")
    problem = page_bounds_problem(limit, result)
    if problem:
        raise Unavailable(T.FAMILIES["page"].unavailable or "", "result_invalid", problem)
    return result


def page_outcome(run_id: str, status: str, result: Record | None = None, error: Record | None = None) -> Record:
    """One per-workflow outcome of a convergence page (cancellation.md §8)."""
    if status in ("terminal", "blocked") and result is not None:
        return {"runId": run_id, "status": status, "settledAttempts": result["settledAttempts"],
                "stepMutationCount": result["stepMutationCount"], "terminalStatus": result["terminalStatus"],
                "blockedStepRunIds": result["blockedStepRunIds"], "error": None}
    return {"runId": run_id, "status": status, "settledAttempts": 0, "stepMutationCount": 0, "terminalStatus": None,
            "blockedStepRunIds": [], "error": error}


def accumulate_page(outcomes: list[Record]) -> tuple[int, int, int, int]:
    """(scanned, settledRuns, settledAttempts, blocked) from per-workflow outcomes."""
    runs = sum(1 for o in outcomes if o["status"] == "terminal")
    attempts = sum(o["settledAttempts"] for o in outcomes)
    blocked = sum(1 for o in outcomes if o["status"] in ("blocked", "locked", "failed"))
    return len(outcomes), runs, attempts, blocked
