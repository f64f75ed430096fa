"""task-attempts.md §2–§7 and commands.md §4.5–§4.12: the attempt admission builder, attempt
admission, dispatch leases (claim, renew, release), the start barrier, start failure and
completion (mapping table, callbackSequence table, codes by path)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from model_fixtures import (
    DEMO_ATTEMPT_ID,
    DEMO_BINDING,
    LEASE_KEYS,
    LEASE_MS,
    STAGES,
    T_CLAIM,
    T_LEASE,
    T_RUNNING,
    T_START,
    TASK_ADMISSION,
    TASK_EXECUTION,
    TEXT,
    D,
    Record,
    Scenario,
    Sim,
    binding_for,
    demo_plan,
    id_hash,
    make_plan,
    make_receipt,
    make_run,
    ordered,
    raises,
    readied,
    reversed_keys,
    seal_step_run,
    seal_task_receipt,
    situation,
    step_run_for,
    tamper_run_terminal,
    tamper_step_epoch,
    tamper_step_exhausted,
)
from qlwf.model.admission import create_admission_bundle
from qlwf.model.attempts import build_task_attempt_admission

TA_INVALID, TA_CONFLICT, TA_UNAVAILABLE = TASK_ADMISSION
TX_INVALID, TX_CONFLICT, TX_UNAVAILABLE = TASK_EXECUTION
EXEC_DOMAIN = "qinglong/plugin-package-workflow-task-execution-id@v1"


def x_id(prefix: str, kind: str, generation: int = 1, attempt_id: str = DEMO_ATTEMPT_ID) -> str:
    """records.md §7 task execution identifiers (S-2)."""
    return prefix + id_hash(EXEC_DOMAIN, "run-0001", attempt_id, generation, kind)[:32]


# ==================================================================================================
# §3 build_task_attempt_admission
PLAN = demo_plan()
FETCH = create_admission_bundle(PLAN)["stepMutations"][0]["stepRun"]  # ready, version 1, updatedAtMs 1000


def builder_input(**over: Any) -> Record:
    inp = {"plan": PLAN, "run": make_run(PLAN), "stepRun": FETCH, "binding": dict(DEMO_BINDING),
           "attemptNumber": 1, "admittedAtMs": 2000}
    inp.update(over)
    return copy.deepcopy(inp)


def test_builder_outputs() -> None:
    inp = builder_input(run=reversed_keys(make_run(PLAN)))
    before = copy.deepcopy(inp)
    out = build_task_attempt_admission(inp)
    assert inp == before
    assert list(out) == ["receipt", "attempt", "event", "run"]
    assert out["receipt"] == make_receipt(PLAN, FETCH, binding=DEMO_BINDING, run_version=4, admitted_at=2000)
    assert out["attempt"] == {"id": DEMO_ATTEMPT_ID, "runId": "run-0001", "stepRunId": "sr-fetch", "attempt": 1,
                              "status": "claimed", "executorType": "remote_worker", "callbackSequence": 0,
                              "createdAtMs": 2000}
    assert out["event"] == {
        "id": "wte:955364285ed507a7fdba9d43dbc8c10f", "runId": "run-0001", "sequence": 4,
        "type": "workflow.task_attempt_admitted", "dedupeKey": "wte:955364285ed507a7fdba9d43dbc8c10f",
        "actorType": "system", "attemptId": DEMO_ATTEMPT_ID, "stepRunId": "sr-fetch",
        "payload": {"planDigest": PLAN["planDigest"], "stepRunId": "sr-fetch", "stepRunVersion": 1,
                    "resourceTaskId": "fetcher", "taskId": "pkg:demo-pkg:fetcher",
                    "taskRevision": "qltd:v1:1:" + D("9"), "executorType": "remote_worker",
                    "executionDigest": D("e"), "attemptNumber": 1},
        "createdAtMs": 2000}
    assert list(out["event"]) == ["id", "runId", "sequence", "type", "dedupeKey", "actorType", "attemptId",
                                  "stepRunId", "payload", "createdAtMs"]
    assert list(out["run"]) == list(inp["run"])  # input key order kept
    assert out["run"] == {**inp["run"], "version": 4, "eventSequence": 4}


def test_builder_boundaries_accepted() -> None:
    assert build_task_attempt_admission(builder_input(attemptNumber=8192, admittedAtMs=1000))["attempt"][
        "attempt"] == 8192
    later = step_run_for(PLAN, "fetch", "ready", t=1500)
    assert build_task_attempt_admission(builder_input(stepRun=later, admittedAtMs=1500))["attempt"]["createdAtMs"] \
        == 1500


def _run(**over: Any) -> Record:
    return {**make_run(PLAN), **over}


BUILDER_CASES: dict[str, dict[str, Any]] = {
    # 2 evidence
    "plan invalid": {"plan": {**PLAN, "planDigest": D("0")}},
    "stepRun invalid": {"stepRun": {**FETCH, "stepRunDigest": D("0")}},
    # 3 binding
    "binding extra key": {"binding": {**DEMO_BINDING, "x": 1}},
    "binding missing key": {"binding": {k: v for k, v in DEMO_BINDING.items() if k != "executionDigest"}},
    "binding revision digest": {"binding": {**DEMO_BINDING, "taskRevision": "qltd:v1:1:" + D("8")}},
    "binding executor": {"binding": {**DEMO_BINDING, "executorType": "k8s"}},
    # 4 run
    **{f"run {k}": {"run": _run(**{k: v})} for k, v in (
        ("id", "run-0002"), ("projectId", "x"), ("taskId", "other"), ("taskRevision", D("1")),
        ("triggerType", "manual"), ("executionOrigin", "boot"), ("executionOwner", "legacy"),
        ("requestId", "plan-0002"), ("idempotencyKey", "plugin-package-workflow:x"), ("status", "succeeded"),
        ("cancelRequestedAtMs", 1500), ("cancelRequestedAtMs", None), ("version", 0), ("version", True),
        ("version", 2147483647), ("version", 3.0))},
    "run version != eventSequence": {"run": _run(eventSequence=4)},
    "run eventSequence float": {"run": _run(eventSequence=3.0)},
    "run not object": {"run": [make_run(PLAN)]},
    # 5 StepRun
    "step unknown id": {"stepRun": seal_step_run({**FETCH, "id": "sr-x"})},
    "step runId": {"stepRun": seal_step_run({**FETCH, "runId": "run-0002"})},
    "step stepKey": {"stepRun": seal_step_run({**FETCH, "stepKey": "report"})},
    "step definitionRef": {"stepRun": seal_step_run({**FETCH, "definitionRef": "plugin-package:x"})},
    "step definitionDigest": {"stepRun": seal_step_run({**FETCH, "definitionDigest": D("7")})},
    "step required": {"stepRun": seal_step_run({**FETCH, "required": False})},
    "step kind": {"stepRun": seal_step_run({**FETCH, "kind": "tool"})},
    "step pending": {"stepRun": step_run_for(PLAN, "fetch", "pending")},
    "step running": {"stepRun": step_run_for(PLAN, "fetch", "running")},
    "step waiting_approval": {"stepRun": step_run_for(PLAN, "fetch", "waiting_approval")},
    "step attempts exhausted": {"stepRun": seal_step_run({**FETCH, "attemptCount": 64})},
    # 6 binding agreement
    "binding resourceTaskId": {"binding": {**DEMO_BINDING, "resourceTaskId": "reporter"}},
    "binding taskId": {"binding": {**DEMO_BINDING, "taskId": "pkg:other-pkg:fetcher"}},
    "binding taskId task": {"binding": {**DEMO_BINDING, "taskId": "pkg:demo-pkg:reporter"}},
    # 7 time
    "admitted before plan": {"admittedAtMs": 999},
    "admitted before step update": {"stepRun": step_run_for(PLAN, "fetch", "ready", t=1500), "admittedAtMs": 1400},
    "admitted bool": {"admittedAtMs": True},
    "admitted float": {"admittedAtMs": 2000.0},
    "admitted string": {"admittedAtMs": "2000"},
    # 8 attempt number
    **{f"attemptNumber {v!r}": {"attemptNumber": v} for v in (0, 8193, True, 1.0, None, "1")},
}


@pytest.mark.parametrize("case", BUILDER_CASES)
def test_builder_checks(case: str) -> None:
    raises("Invalid", TA_INVALID, build_task_attempt_admission, builder_input(**BUILDER_CASES[case]))


def test_builder_check1_exact_keys() -> None:
    inp = builder_input()
    raises("Invalid", TA_INVALID, build_task_attempt_admission, {**inp, "extra": 1})
    raises("Invalid", TA_INVALID, build_task_attempt_admission, {k: v for k, v in inp.items() if k != "run"})
    raises("Invalid", TA_INVALID, build_task_attempt_admission, [inp])


# ==================================================================================================
# §4.5 admit_task_attempt through the system
def test_admit_created_and_replay() -> None:
    sc = situation("admitted")
    sim = sc.sim
    step_before = sim.step("sr-fetch")
    res = sim.do("admit_task_attempt", 2000, runId="run-0001", stepRunId="sr-fetch", binding=DEMO_BINDING)
    assert list(res) == ["status", "receipt", "attempt"] and res["status"] == "created"
    assert res["attempt"]["id"] == DEMO_ATTEMPT_ID and res["attempt"]["attempt"] == 1
    assert sim.step("sr-fetch") == step_before
    assert sim.run()["version"] == 4 and sim.events()[-1]["type"] == "workflow.task_attempt_admitted"
    snap = sim.state.snapshot()
    again = sim.do("admit_task_attempt", 2500, runId="run-0001", stepRunId="sr-fetch", binding=dict(DEMO_BINDING))
    assert again == {**res, "status": "existing"}
    assert sim.state.snapshot() == snap


def test_admit_replay_returns_current_attempt_and_precedes_intent() -> None:
    sc = situation("leased", cancel="user")
    res = sc.sim.do("admit_task_attempt", runId="run-0001", stepRunId="sr-fetch", binding=DEMO_BINDING)
    assert res["status"] == "existing" and res["attempt"] == sc.sim.attempt(DEMO_ATTEMPT_ID)
    assert res["attempt"]["workerId"] == "w1"


def test_admit_binding_mismatch() -> None:
    sc = situation("claimed")
    other = {**DEMO_BINDING, "executorType": "local_process"}
    sc.sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "binding_mismatch", runId="run-0001",
                  stepRunId="sr-fetch", binding=other)


@pytest.mark.parametrize(("args", "reason"), [
    ({"runId": "r" * 37}, "argument_invalid"),
    ({"stepRunId": ""}, "argument_invalid"),
    ({"binding": {**DEMO_BINDING, "x": 1}}, "argument_invalid"),
    ({"binding": {**DEMO_BINDING, "taskRevision": "qltd:v1:1:" + D("0")}}, "argument_invalid"),
    ({"binding": None}, "argument_invalid"),
])
def test_admit_argument_invalid(args: Record, reason: str) -> None:
    sc = situation("admitted")
    full = {"runId": "run-0001", "stepRunId": "sr-fetch", "binding": DEMO_BINDING, **args}
    sc.sim.refuse("admit_task_attempt", "Invalid", TA_INVALID, reason, **full)


def test_admit_refusals_in_order() -> None:
    sc = situation("admitted", cancel="user")
    sim = sc.sim
    base = {"runId": "run-0001", "stepRunId": "sr-fetch", "binding": DEMO_BINDING}
    sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "run_missing", **{**base, "runId": "run-0002"})
    sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "step_missing", **{**base, "stepRunId": "sr-nope"})
    # 4 step_not_ready beats 7 intent; 5 binding_inconsistent beats 7
    sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "step_not_ready",
               **{**base, "stepRunId": "sr-report", "binding": binding_for(sc.plan, "report")})
    sim.refuse("admit_task_attempt", "Invalid", TA_INVALID, "binding_inconsistent",
               **{**base, "binding": binding_for(sc.plan, "report")})
    sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "cancellation_requested", **base)
    # 6 run_not_running beats 7 (drift-injected terminal Run with intent)
    tamper_run_terminal(sim, status="cancelled")
    sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "run_not_running", **base)


def test_admit_attempts_exhausted_and_numbers_exhausted() -> None:
    sc = situation("admitted")
    sim = sc.sim
    base = {"runId": "run-0001", "stepRunId": "sr-fetch", "binding": DEMO_BINDING}
    fake = {"id": "wta:fake", "runId": "run-0001", "stepRunId": "sr-report", "attempt": 8192, "status": "lost",
            "executorType": "remote_worker", "callbackSequence": 0, "createdAtMs": 1000}
    sim.put("attempts", "wta:fake", fake)
    sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "attempt_numbers_exhausted", **base)
    sim.put("step_runs", "sr-fetch", seal_step_run({**sim.step("sr-fetch"), "attemptCount": 64}))
    sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "attempts_exhausted", **base)


def test_admit_clock_regression_and_receipt_drift() -> None:
    sc = situation("admitted")
    sim = sc.sim
    base = {"runId": "run-0001", "stepRunId": "sr-fetch", "binding": DEMO_BINDING}
    sim.rewind(999)
    sim.refuse("admit_task_attempt", "Invalid", TA_INVALID, "clock_regression", **base)
    sc = situation("claimed")
    sim = sc.sim
    r = sim.state.receipts[DEMO_ATTEMPT_ID]
    sim.put("receipts", DEMO_ATTEMPT_ID, seal_task_receipt({**r, "stepRunDigest": D("0")}))
    sim.refuse("admit_task_attempt", "Unavailable", TA_UNAVAILABLE, "receipt_drift", **base)


def test_admit_attempt_numbers_are_run_global() -> None:
    plan = make_plan({"a": [], "b": []})
    sim = Sim(clock=1000)
    sim.do("admit_workflow", plan=plan)
    a = sim.do("admit_task_attempt", runId="run-0001", stepRunId="sr-a", binding=binding_for(plan, "a"))
    b = sim.do("admit_task_attempt", runId="run-0001", stepRunId="sr-b", binding=binding_for(plan, "b"))
    assert (a["attempt"]["attempt"], b["attempt"]["attempt"]) == (1, 2)
    assert a["attempt"]["id"] != b["attempt"]["id"]


def test_task_candidates_follow_epochs() -> None:
    sc = situation("admitted")
    sim = sc.sim
    page = sim.do("task_candidates", limit=10)
    assert page == {"candidates": [{"runId": "run-0001", "stepRunId": "sr-fetch", "readyAtMs": 1000,
                                    "planDigest": sc.plan["planDigest"]}], "truncated": False}
    sim.do("admit_task_attempt", runId="run-0001", stepRunId="sr-fetch", binding=DEMO_BINDING)
    assert sim.do("task_candidates", limit=10)["candidates"] == []


# ==================================================================================================
# §4.2 claim_lease table and eligibility
def lease(acquired: int, expires: int, *, version: int = 0, generation: int = 1, worker: str = "w1",
          attempt_id: str = DEMO_ATTEMPT_ID) -> Record:
    return {"attemptId": attempt_id, "runId": "run-0001", "status": "leased", "version": version,
            "leaseGeneration": generation, "workerId": worker, "acquiredAtMs": acquired, "renewedAtMs": acquired,
            "expiresAtMs": expires, "updatedAtMs": acquired}


def test_claim_absent_lease() -> None:
    sc = situation("claimed")
    sim = sc.sim
    res = sim.do("claim_lease", 3000, attemptId=DEMO_ATTEMPT_ID, workerId="w1", durationMs=10000)
    want = lease(3000, 13000)
    assert res == {"status": "claimed", "reason": None, "lease": want}
    assert list(res["lease"]) == list(want)
    assert sim.lease(DEMO_ATTEMPT_ID) == want
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert (a["workerId"], a["leaseGeneration"], a["leaseVersion"], a["leaseExpiresAtMs"]) == ("w1", 1, 0, 13000)
    assert sim.run()["version"] == 5
    assert sim.events()[-1] == {
        "id": x_id("wxa:", "lease_claimed"), "runId": "run-0001", "sequence": 5,
        "type": "workflow.task_dispatch_leased", "dedupeKey": x_id("wxa:", "lease_claimed"), "actorType": "worker",
        "actorId": "w1", "attemptId": DEMO_ATTEMPT_ID, "stepRunId": "sr-fetch",
        "payload": {"attempt_id": DEMO_ATTEMPT_ID, "lease_generation": 1, "execution_scope": "workflow_task",
                    "from_status": "ready", "to_status": "ready"},
        "createdAtMs": 3000}


def test_claim_live_same_and_other_worker() -> None:
    sc = situation("leased")
    sim = sc.sim
    snap = sim.state.snapshot()
    current = sim.lease(DEMO_ATTEMPT_ID)
    assert sim.do("claim_lease", 4000, attemptId=DEMO_ATTEMPT_ID, workerId="w1", durationMs=5000) == {
        "status": "idempotent", "reason": None, "lease": current}
    assert sim.do("claim_lease", 12999, attemptId=DEMO_ATTEMPT_ID, workerId="w2", durationMs=5000) == {
        "status": "leased", "reason": None, "lease": current}
    assert sim.state.snapshot() == snap


def test_claim_expired_lease_by_another_worker() -> None:
    sc = situation("leased")
    sim = sc.sim
    res = sim.do("claim_lease", 3000 + LEASE_MS, attemptId=DEMO_ATTEMPT_ID, workerId="w2", durationMs=5000)
    want = lease(13000, 18000, version=1, generation=2, worker="w2")
    assert res == {"status": "claimed", "reason": None, "lease": want}
    assert sim.events()[-1]["id"] == x_id("wxa:", "lease_claimed", generation=2)
    assert sim.attempt(DEMO_ATTEMPT_ID)["leaseGeneration"] == 2


def test_claim_released_lease() -> None:
    sc = situation("leased")
    sim = sc.sim
    sim.do("release_lease", 4000, reason="capacity_changed", **sc.fence())
    res = sim.do("claim_lease", 4500, attemptId=DEMO_ATTEMPT_ID, workerId="w3", durationMs=600000)
    assert res["lease"] == lease(4500, 604500, version=2, generation=2, worker="w3")
    assert "releasedAtMs" not in res["lease"] and "releaseReason" not in res["lease"]


@pytest.mark.parametrize("duration", [4999, 600001, True, 5000.0, None, "5000"])
def test_claim_duration_bounds(duration: Any) -> None:
    sc = situation("claimed")
    sc.sim.refuse("claim_lease", "Invalid", TX_INVALID, "argument_invalid", attemptId=DEMO_ATTEMPT_ID,
                  workerId="w1", durationMs=duration)


def test_claim_argument_and_load_errors() -> None:
    sc = situation("claimed")
    sim = sc.sim
    sim.refuse("claim_lease", "Invalid", TX_INVALID, "argument_invalid", attemptId="a" * 37, workerId="w1",
               durationMs=5000)
    sim.refuse("claim_lease", "Invalid", TX_INVALID, "argument_invalid", attemptId=DEMO_ATTEMPT_ID, workerId=" w",
               durationMs=5000)
    sim.refuse("claim_lease", "Conflict", TX_CONFLICT, "attempt_missing", attemptId="wta:missing", workerId="w1",
               durationMs=5000)
    sim.rewind(1999)
    sim.refuse("claim_lease", "Invalid", TX_INVALID, "clock_regression", attemptId=DEMO_ATTEMPT_ID, workerId="w1",
               durationMs=5000)


def test_claim_accepts_duration_bounds() -> None:
    for d in (5000, 600000):
        sc = situation("claimed")
        assert sc.sim.do("claim_lease", attemptId=DEMO_ATTEMPT_ID, workerId="w1", durationMs=d)["status"] == "claimed"


def _claim(sim: Sim, worker: str = "w2") -> Record:
    before = sim.state.snapshot()
    res = sim.do("claim_lease", attemptId=DEMO_ATTEMPT_ID, workerId=worker, durationMs=5000)
    assert sim.state.snapshot() == before
    return res


def test_claim_not_eligible_attempt_state() -> None:
    sc = situation("starting")
    assert _claim(sc.sim) == {"status": "not_eligible", "reason": "attempt_state_mismatch",
                              "lease": sc.sim.lease(DEMO_ATTEMPT_ID)}


def test_claim_not_eligible_run_state_beats_intent() -> None:
    sc = situation("claimed", cancel="user")
    tamper_run_terminal(sc.sim, status="cancelled")
    assert _claim(sc.sim) == {"status": "not_eligible", "reason": "run_state_mismatch", "lease": None}


def test_claim_not_eligible_intent_beats_stale_epoch() -> None:
    sc = situation("leased", cancel="user")
    res = _claim(sc.sim, "w1")  # even the live holder is refused
    assert (res["status"], res["reason"]) == ("not_eligible", "cancellation_requested")
    tamper_step_epoch(sc.sim, "sr-fetch")
    assert _claim(sc.sim)["reason"] == "cancellation_requested"


def test_claim_not_eligible_stale_epoch_beats_lease_completed() -> None:
    sc = situation("leased")
    sim = sc.sim
    sim.put("leases", DEMO_ATTEMPT_ID,
            {**sim.held_lease(DEMO_ATTEMPT_ID), "status": "completed", "completedAtMs": 3000})
    assert _claim(sim)["reason"] == "lease_completed"
    tamper_step_epoch(sim, "sr-fetch")
    assert _claim(sim)["reason"] == "stale_execution_authority"


# ==================================================================================================
# §4.3 renew and its stop decisions
def test_renew_renewed() -> None:
    sc = situation("leased")
    sim = sc.sim
    v = sim.run()["version"]
    res = sim.do("renew_lease", 5000, durationMs=20000, **sc.fence())
    want = {**lease(3000, 25000, version=1), "renewedAtMs": 5000, "updatedAtMs": 5000}
    assert res == {"status": "renewed", "reason": None, "lease": want}
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert (a["leaseVersion"], a["leaseExpiresAtMs"]) == (1, 25000)
    assert sim.run()["version"] == v


@pytest.mark.parametrize("reason", ["user", "policy", "shutdown", "reconcile", "timeout"])
def test_renew_under_intent_stops_with_the_cancel_reason(reason: str) -> None:
    sc = situation("running", cancel=reason, timeout_ms=1000)  # deadline passed too: intent row first
    sim = sc.sim
    v = sim.run()["version"]
    res = sim.do("renew_lease", 7000, durationMs=5000, **sc.fence())
    assert (res["status"], res["reason"], res["lease"]["version"]) == ("stop_requested", reason, 1)
    assert sim.run()["version"] == v
    assert not any(e["type"] == "workflow.task_timeout_requested" for e in sim.events())


def test_renew_deadline_writes_one_timeout_request() -> None:
    sc = situation("starting", timeout_ms=1000)  # deadline 5000
    sim = sc.sim
    assert sim.attempt(DEMO_ATTEMPT_ID)["deadlineAtMs"] == 5000
    assert sim.do("renew_lease", 4999, durationMs=5000, **sc.fence())["status"] == "renewed"
    v = sim.run()["version"]
    res = sim.do("renew_lease", 5000, durationMs=5000, **sc.fence())
    assert (res["status"], res["reason"]) == ("stop_requested", "timeout")
    assert sim.run()["version"] == v + 1
    assert sim.events()[-1] == {
        "id": x_id("wxa:", "timeout_requested"), "runId": "run-0001", "sequence": v + 1,
        "type": "workflow.task_timeout_requested", "dedupeKey": x_id("wxa:", "timeout_requested"),
        "actorType": "worker", "actorId": "w1", "attemptId": DEMO_ATTEMPT_ID, "stepRunId": "sr-fetch",
        "payload": {"execution_scope": "workflow_task", "attempt_id": DEMO_ATTEMPT_ID, "step_run_id": "sr-fetch",
                    "lease_generation": 1, "deadline_at_ms": 5000, "version": v + 1},
        "createdAtMs": 5000}
    res = sim.do("renew_lease", 5100, durationMs=5000, **sc.fence())
    assert (res["status"], res["reason"]) == ("stop_requested", "timeout")
    assert sim.run()["version"] == v + 1
    assert sim.attempt(DEMO_ATTEMPT_ID)["status"] == "starting"  # a request, not a transition


def test_renew_fence_reasons_in_order() -> None:
    sc = situation("claimed")
    sc.sim.refuse("renew_lease", "Conflict", TX_CONFLICT, "lease_missing", durationMs=5000, **sc.fence())
    sc = situation("leased")
    sim = sc.sim
    late = 3000 + LEASE_MS
    sim.refuse("renew_lease", "Conflict", TX_CONFLICT, "worker_mismatch", late, durationMs=5000,
               **sc.fence(workerId="w2", leaseGeneration=2))
    sim.refuse("renew_lease", "Conflict", TX_CONFLICT, "lease_generation_mismatch", late, durationMs=5000,
               **sc.fence(leaseGeneration=2))
    sim.refuse("renew_lease", "Conflict", TX_CONFLICT, "lease_expired", late, durationMs=5000, **sc.fence())
    sc = situation("leased")
    sc.sim.do("release_lease", 4000, reason="declined", **sc.fence())
    sc.sim.refuse("renew_lease", "Conflict", TX_CONFLICT, "not_leased", durationMs=5000, **sc.fence())


def test_renew_attempt_state_and_arguments_and_lease_floor() -> None:
    sc = situation("leased")
    sim = sc.sim
    for bad in ({"leaseGeneration": 0}, {"leaseGeneration": True}, {"durationMs": 600001}):
        sim.refuse("renew_lease", "Invalid", TX_INVALID, "argument_invalid", **{"durationMs": 5000, **sc.fence(),
                                                                                 **bad})
    sim.do("renew_lease", 5000, durationMs=5000, **sc.fence())
    sim.rewind(4000)  # after the last event (3000) but before the lease's updatedAtMs (5000)
    sim.refuse("renew_lease", "Invalid", TX_INVALID, "clock_regression", durationMs=5000, **sc.fence())
    sc = situation("leased")
    sc.sim.put("attempts", DEMO_ATTEMPT_ID, {**sc.sim.attempt(DEMO_ATTEMPT_ID), "status": "succeeded"})
    sc.sim.refuse("renew_lease", "Conflict", TX_CONFLICT, "attempt_state_mismatch", durationMs=5000, **sc.fence())


# ==================================================================================================
# §4.4 release and its replay
def test_release_and_replay() -> None:
    sc = situation("leased", cancel="user")  # release is allowed under intent
    sim = sc.sim
    v = sim.run()["version"]
    res = sim.do("release_lease", 7000, reason="shutdown", **sc.fence())
    want = ordered({**lease(3000, 13000, version=1), "status": "released", "releasedAtMs": 7000,
                    "releaseReason": "shutdown", "updatedAtMs": 7000}, LEASE_KEYS)
    assert res == {"status": "released", "lease": want} and list(res["lease"]) == list(want)
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert not {"workerId", "leaseGeneration", "leaseVersion", "leaseExpiresAtMs"} & set(a)
    assert a["status"] == "claimed" and sim.run()["version"] == v + 1
    e = sim.events()[-1]
    assert (e["id"], e["type"], e["actorId"]) == (x_id("wxa:", "lease_released"), "workflow.task_dispatch_released",
                                                  "w1")
    assert e["payload"] == {"attempt_id": DEMO_ATTEMPT_ID, "lease_generation": 1, "execution_scope": "workflow_task",
                            "from_status": "ready", "to_status": "ready", "release_reason": "shutdown"}
    snap = sim.state.snapshot()
    assert sim.do("release_lease", 8000, reason="shutdown", **sc.fence()) == {"status": "already_released",
                                                                              "lease": want}
    assert sim.state.snapshot() == snap
    sim.refuse("release_lease", "Conflict", TX_CONFLICT, "replay_mismatch", reason="declined", **sc.fence())
    sim.refuse("release_lease", "Conflict", TX_CONFLICT, "not_leased", reason="shutdown",
               **sc.fence(workerId="w2"))


@pytest.mark.parametrize("reason", ["lease_expired", "oops", None])
def test_release_reason_vocabulary(reason: Any) -> None:
    sc = situation("leased")
    sc.sim.refuse("release_lease", "Invalid", TX_INVALID, "argument_invalid", reason=reason, **sc.fence())


def test_release_refusals() -> None:
    sc = situation("starting")
    sc.sim.refuse("release_lease", "Conflict", TX_CONFLICT, "attempt_state_mismatch", reason="declined",
                  **sc.fence())
    sc = situation("leased")
    sc.sim.refuse("release_lease", "Conflict", TX_CONFLICT, "lease_expired", 13000, reason="declined", **sc.fence())


# ==================================================================================================
# §4.9 start_attempt
def test_start_effects() -> None:
    sc = situation("leased")
    sim = sc.sim
    step = sim.step("sr-fetch")
    res = sim.do("start_attempt", 4000, timeoutMs=2500, **sc.fence())
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert res == {"status": "starting", "attempt": a}
    assert (a["status"], a["deadlineAtMs"], a["callbackSequence"]) == ("starting", 6500, 0)
    assert sim.step("sr-fetch") == step and sim.run()["version"] == 6
    e = sim.events()[-1]
    assert (e["id"], e["type"], e["actorType"], e["actorId"]) == (
        x_id("wxa:", "attempt_starting"), "workflow.task_attempt.starting", "worker", "w1")
    assert e["payload"] == {"execution_scope": "workflow_task", "attempt_id": DEMO_ATTEMPT_ID,
                            "step_run_id": "sr-fetch", "from_status": "claimed", "to_status": "starting",
                            "lease_generation": 1, "deadline_at_ms": 6500, "version": 6}


def test_start_without_timeout_has_no_deadline() -> None:
    sc = situation("starting")
    assert "deadlineAtMs" not in sc.sim.attempt(DEMO_ATTEMPT_ID)
    assert sc.sim.events()[-1]["payload"]["deadline_at_ms"] is None


@pytest.mark.parametrize("over", [
    {"attemptId": "a" * 37}, {"workerId": ""}, {"leaseGeneration": 0}, {"leaseGeneration": True},
    {"leaseGeneration": 2147483648}, {"timeoutMs": 0}, {"timeoutMs": True}, {"timeoutMs": 2147483648},
    {"timeoutMs": 1.5}, {"timeoutMs": "10"},
])
def test_start_check1_arguments(over: Record) -> None:
    sc = situation("leased")
    sc.sim.refuse("start_attempt", "Invalid", TX_INVALID, "argument_invalid", **{**sc.fence(timeoutMs=None), **over})


def test_start_check1_argument_keys() -> None:
    sc = situation("leased")
    sc.sim.refuse("start_attempt", "Invalid", TX_INVALID, "argument_invalid", **sc.fence())  # timeoutMs missing
    sc.sim.refuse("start_attempt", "Invalid", TX_INVALID, "argument_invalid", x=1, **sc.fence(timeoutMs=None))


def test_start_check2_loads() -> None:
    sc = situation("leased")
    sim = sc.sim
    sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "attempt_missing", **sc.fence(attemptId="wta:x",
                                                                                       timeoutMs=None))
    sim.put("leases", DEMO_ATTEMPT_ID, {**sim.held_lease(DEMO_ATTEMPT_ID), "version": 7})
    sim.refuse("start_attempt", "Unavailable", TX_UNAVAILABLE, "lease_drift", **sc.fence(timeoutMs=None))
    sim.put("receipts", DEMO_ATTEMPT_ID, None)
    sim.refuse("start_attempt", "Unavailable", TX_UNAVAILABLE, "receipt_drift", **sc.fence(timeoutMs=None))


def test_start_check3_clock() -> None:
    sc = situation("leased")
    sc.sim.rewind(2999)
    sc.sim.refuse("start_attempt", "Invalid", TX_INVALID, "clock_regression", **sc.fence(timeoutMs=None))


def test_start_check4_replay_precedes_fence() -> None:
    sc = situation("starting")
    sim = sc.sim
    late = 3000 + LEASE_MS + 1  # the lease has expired: the replay still answers
    assert sim.do("start_attempt", late, **sc.fence(timeoutMs=None)) == {
        "status": "already_starting", "attempt": sim.attempt(DEMO_ATTEMPT_ID)}
    sc = situation("running")
    assert sc.sim.do("start_attempt", **sc.fence(timeoutMs=5)) == {
        "status": "already_running", "attempt": sc.sim.attempt(DEMO_ATTEMPT_ID)}
    # another generation is not a replay: it fails the fence
    sc.sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "lease_generation_mismatch",
                  **sc.fence(leaseGeneration=2, timeoutMs=None))


def test_start_check5_fence() -> None:
    sc = situation("claimed")
    sc.sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "lease_missing", **sc.fence(timeoutMs=None))
    sc = situation("leased")
    sc.sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "worker_mismatch", **sc.fence(workerId="w9",
                                                                                        timeoutMs=None))
    sc.sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "lease_expired", 13000, **sc.fence(timeoutMs=None))


def test_start_checks_6_to_9_in_order() -> None:
    sc = situation("leased", cancel="user")
    sim = sc.sim
    tamper_step_epoch(sim, "sr-fetch")
    sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "cancellation_requested", **sc.fence(timeoutMs=None))
    tamper_run_terminal(sim, status="cancelled")
    sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "run_state_mismatch", **sc.fence(timeoutMs=None))
    sim.put("attempts", DEMO_ATTEMPT_ID, {**sim.attempt(DEMO_ATTEMPT_ID), "status": "cancelled"})
    sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "attempt_state_mismatch", **sc.fence(timeoutMs=None))
    sc = situation("leased")
    tamper_step_epoch(sc.sim, "sr-fetch")
    sc.sim.refuse("start_attempt", "Conflict", TX_CONFLICT, "stale_execution_authority", **sc.fence(timeoutMs=None))


# ==================================================================================================
# §4.10 record_running
def test_running_effects() -> None:
    sc = situation("starting")
    sim = sc.sim
    res = sim.do("record_running", 5000, **sc.fence())
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert res == {"status": "running", "attempt": a}
    assert (a["status"], a["startedAtMs"], a["callbackSequence"]) == ("running", 5000, 1)
    s = sim.step("sr-fetch")
    assert (s["status"], s["version"], s["attemptCount"], s["startedAtMs"]) == ("running", 2, 1, 5000)
    assert s["lastMutationId"] == "wxm:b0a14f8f02d01327442341ba14232e7b"
    ev = sim.events()[-2:]
    assert [(e["id"], e["type"]) for e in ev] == [(x_id("wxa:", "attempt_running"), "workflow.task_attempt.running"),
                                                  ("wxe:b0a14f8f02d01327442341ba14232e7b", "step.running")]
    assert ev[0]["payload"] == {"execution_scope": "workflow_task", "attempt_id": DEMO_ATTEMPT_ID,
                                "step_run_id": "sr-fetch", "from_status": "starting", "to_status": "running",
                                "lease_generation": 1, "version": 7}
    assert (ev[1]["actorType"], ev[1]["actorId"], "attemptId" in ev[1]) == ("worker", "w1", False)
    assert sim.run()["version"] == 8


def test_running_checks() -> None:
    sc = situation("running")
    assert sc.sim.do("record_running", **sc.fence())["status"] == "already_running"
    sc = situation("leased")
    sc.sim.refuse("record_running", "Conflict", TX_CONFLICT, "attempt_state_mismatch", **sc.fence())
    sc = situation("starting")
    sc.sim.refuse("record_running", "Conflict", TX_CONFLICT, "worker_mismatch",
                  **sc.fence(workerId="w2"))
    sc = situation("starting", cancel="timeout")
    tamper_step_epoch(sc.sim, "sr-fetch")
    sc.sim.refuse("record_running", "Conflict", TX_CONFLICT, "cancellation_requested", **sc.fence())
    tamper_run_terminal(sc.sim, status="timed_out")
    sc.sim.refuse("record_running", "Conflict", TX_CONFLICT, "run_state_mismatch", **sc.fence())
    sc = situation("starting")
    tamper_step_epoch(sc.sim, "sr-fetch")
    sc.sim.refuse("record_running", "Conflict", TX_CONFLICT, "stale_execution_authority", **sc.fence())
    sc = situation("starting")
    tamper_step_exhausted(sc.sim, DEMO_ATTEMPT_ID)
    sc.sim.refuse("record_running", "Conflict", TX_CONFLICT, "attempts_exhausted", **sc.fence())
    sc = situation("starting")
    sc.sim.refuse("record_running", "Invalid", TX_INVALID, "argument_invalid", **sc.fence(leaseGeneration=-1))


# ==================================================================================================
# §4.11 fail_start and §4.12 complete_attempt checks
def test_fail_start_checks() -> None:
    sc = situation("starting")
    sim = sc.sim
    first = sim.do("fail_start", 5000, **sc.fence())
    snap = sim.state.snapshot()
    assert sim.do("fail_start", 6000, **sc.fence()) == {"status": "already_terminal", "attemptStatus": "failed",
                                                        "attempt": first["attempt"]}
    assert sim.state.snapshot() == snap
    sim.refuse("fail_start", "Conflict", TX_CONFLICT, "not_leased", **sc.fence(workerId="w2"))
    for stage in ("leased", "running"):
        sc = situation(stage)
        sc.sim.refuse("fail_start", "Conflict", TX_CONFLICT, "attempt_state_mismatch", **sc.fence())
    sc = situation("starting")
    tamper_step_epoch(sc.sim, "sr-fetch")
    sc.sim.refuse("fail_start", "Conflict", TX_CONFLICT, "stale_execution_authority", **sc.fence())
    tamper_run_terminal(sc.sim)
    sc.sim.refuse("fail_start", "Conflict", TX_CONFLICT, "run_state_mismatch", **sc.fence())
    sc = situation("starting")
    sc.sim.refuse("fail_start", "Conflict", TX_CONFLICT, "lease_expired", 13000, **sc.fence())


@pytest.mark.parametrize("code", [2147483648, -2147483649, True, 1.0, None, "0"])
def test_complete_exit_code_range(code: Any) -> None:
    sc = situation("running")
    sc.sim.refuse("complete_attempt", "Invalid", TX_INVALID, "argument_invalid", exitCode=code, **sc.fence())


@pytest.mark.parametrize("code", [2147483647, -2147483648])
def test_complete_exit_code_bounds_accepted(code: int) -> None:
    sc = situation("running")
    res = sc.sim.do("complete_attempt", exitCode=code, **sc.fence())
    assert res["attempt"]["exitCode"] == code and res["attemptStatus"] == "failed"


def test_complete_checks() -> None:
    sc = situation("running")
    sim = sc.sim
    first = sim.do("complete_attempt", 6000, exitCode=0, **sc.fence())
    assert sim.do("complete_attempt", 7000, exitCode=1, **sc.fence()) == {
        "status": "already_terminal", "attemptStatus": "succeeded", "attempt": first["attempt"]}
    sim.refuse("complete_attempt", "Conflict", TX_CONFLICT, "not_leased", exitCode=0, **sc.fence(leaseGeneration=2))
    sc = situation("leased")
    sc.sim.refuse("complete_attempt", "Conflict", TX_CONFLICT, "attempt_state_mismatch", exitCode=0, **sc.fence())
    sc = situation("starting")
    tamper_step_epoch(sc.sim, "sr-fetch")
    sc.sim.refuse("complete_attempt", "Conflict", TX_CONFLICT, "stale_execution_authority", exitCode=0,
                  **sc.fence())
    tamper_run_terminal(sc.sim)
    sc.sim.refuse("complete_attempt", "Conflict", TX_CONFLICT, "run_state_mismatch", exitCode=0, **sc.fence())
    sc = situation("running")
    s = sc.sim.step("sr-fetch")
    sc.sim.put("step_runs", "sr-fetch", seal_step_run({**s, "version": 3, "lastMutationId": "tamper"}))
    sc.sim.refuse("complete_attempt", "Conflict", TX_CONFLICT, "stale_execution_authority", exitCode=0,
                  **sc.fence())
    sc = situation("starting")
    tamper_step_exhausted(sc.sim, DEMO_ATTEMPT_ID)
    sc.sim.refuse("complete_attempt", "Conflict", TX_CONFLICT, "attempts_exhausted", exitCode=0, **sc.fence())
    sc = situation("running")  # from running attemptCount is not checked
    tamper_step_exhausted(sc.sim, DEMO_ATTEMPT_ID)
    assert sc.sim.do("complete_attempt", exitCode=0, **sc.fence())["attemptStatus"] == "succeeded"


# ==================================================================================================
# §7 completion mapping, every row; codes by path (state-machines.md §8)
ATTEMPT_CODES: dict[tuple[str, str], tuple[str | None, str | None]] = {
    ("fail_start", "failed"): ("EXECUTOR_START_FAILED", TEXT["EXECUTOR_START_FAILED"]),
    ("fail_start", "cancelled"): ("EXECUTION_CANCELLED", TEXT["EXECUTION_CANCELLED"]),
    ("fail_start", "timed_out"): ("EXECUTION_TIMED_OUT", TEXT["EXECUTION_TIMED_OUT"]),
    ("complete_attempt", "succeeded"): (None, None),
    ("complete_attempt", "failed"): ("EXECUTION_FAILED", TEXT["EXECUTION_FAILED"]),
    ("complete_attempt", "cancelled"): ("EXECUTION_CANCELLED", TEXT["EXECUTION_CANCELLED"]),
    ("complete_attempt", "timed_out"): ("EXECUTION_TIMED_OUT", TEXT["EXECUTION_TIMED_OUT"]),
}
STEP_CODES: dict[tuple[str, str], tuple[str | None, str | None]] = {
    ("fail_start", "failed"): ("executor_start_failed", TEXT["EXECUTOR_START_FAILED"]),
    ("fail_start", "cancelled"): ("execution_cancelled", None),
    ("fail_start", "timed_out"): ("execution_timed_out", TEXT["EXECUTION_TIMED_OUT"]),
    ("complete_attempt", "succeeded"): (None, None),
    ("complete_attempt", "failed"): ("execution_failed", TEXT["EXECUTION_FAILED"]),
    ("complete_attempt", "cancelled"): ("execution_cancelled", None),
    ("complete_attempt", "timed_out"): ("execution_timed_out", TEXT["EXECUTION_TIMED_OUT"]),
}

# (command, stage, cancel reason, deadline passed, exit code, expected attempt status)
MAPPING = [
    ("fail_start", "starting", "timeout", False, None, "timed_out"),
    ("fail_start", "starting", "user", False, None, "cancelled"),
    ("fail_start", "starting", "reconcile", True, None, "cancelled"),
    ("fail_start", "starting", None, True, None, "timed_out"),
    ("fail_start", "starting", None, False, None, "failed"),
    *[(c, stage, reason, deadline, code, want) for stage in ("starting", "running") for c, reason, deadline, code, want
      in (("complete_attempt", "timeout", False, 0, "timed_out"),
          ("complete_attempt", "timeout", True, 9, "timed_out"),
          ("complete_attempt", "policy", False, 0, "cancelled"),
          ("complete_attempt", "shutdown", True, 0, "cancelled"),
          ("complete_attempt", None, True, 0, "timed_out"),
          ("complete_attempt", None, True, 7, "timed_out"),
          ("complete_attempt", None, False, 0, "succeeded"),
          ("complete_attempt", None, False, 1, "failed"),
          ("complete_attempt", None, False, -1, "failed"))],
]
T_DONE = 7000


@pytest.mark.parametrize(("command", "stage", "reason", "deadline", "code", "want"), MAPPING,
                         ids=[f"{c}-{s}-{r}-{'late' if d else 'ontime'}-{x}" for c, s, r, d, x, _ in MAPPING])
def test_7_completion_mapping(command: str, stage: str, reason: str | None, deadline: bool, code: int | None,
                              want: str) -> None:
    sc = situation(stage, cancel=reason, timeout_ms=1000 if deadline else 100000)
    sim = sc.sim
    before_attempt, before_lease, before_step = (sim.attempt(DEMO_ATTEMPT_ID), sim.held_lease(DEMO_ATTEMPT_ID),
                                                 sim.step("sr-fetch"))
    v = sim.run()["version"]
    args = sc.fence() | ({} if command == "fail_start" else {"exitCode": code})
    res = sim.do(command, T_DONE, **args)
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert res == {"status": "start_failed" if command == "fail_start" else "completed", "attemptStatus": want,
                   "attempt": a}
    # attempt
    err_code, err_text = ATTEMPT_CODES[(command, want)]
    assert (a["status"], a["finishedAtMs"], a.get("errorCode"), a.get("errorSummary")) == (want, T_DONE, err_code,
                                                                                           err_text)
    assert ("errorCode" in a) == (err_code is not None)
    assert a.get("exitCode") == code and ("exitCode" in a) == (command == "complete_attempt")
    assert a["callbackSequence"] == 1
    started = {"fail_start": None, "starting": T_DONE, "running": T_RUNNING}[
        "fail_start" if command == "fail_start" else stage]
    assert a.get("startedAtMs") == started
    assert (a["workerId"], a["leaseGeneration"], a["leaseExpiresAtMs"]) == ("w1", 1, before_attempt[
        "leaseExpiresAtMs"])
    # lease
    ls = sim.lease(DEMO_ATTEMPT_ID)
    assert ls == {**before_lease, "status": "completed", "version": before_lease["version"] + 1,
                  "completedAtMs": T_DONE, "updatedAtMs": T_DONE}
    assert a["leaseVersion"] == ls["version"]
    # StepRun
    s = sim.step("sr-fetch")
    rc, summary = STEP_CODES[(command, want)]
    assert (s["status"], s["resultCode"], s["errorSummary"], s["finishedAtMs"]) == (want, rc, summary, T_DONE)
    if command == "fail_start":
        assert (s["version"], s["attemptCount"], s["startedAtMs"]) == (before_step["version"] + 1, 0, None)
    else:
        assert (s["version"], s["attemptCount"], s["startedAtMs"]) == (2 + 1, 1, started)
    # events and counters
    kinds = [e["type"] for e in sim.events()[v:]]
    if command == "complete_attempt" and stage == "starting":
        assert kinds == ["step.running", f"workflow.task_attempt.{want}", f"step.{want}"]
    else:
        assert kinds == [f"workflow.task_attempt.{want}", f"step.{want}"]
    assert sim.run()["version"] == v + len(kinds) and sim.run()["status"] == "running"
    ev = next(e for e in sim.events()[v:] if e["type"].startswith("workflow.task_attempt."))
    assert ev["id"] == x_id("wxa:", "attempt_terminal")
    assert ev["payload"] == {"execution_scope": "workflow_task", "attempt_id": DEMO_ATTEMPT_ID,
                             "step_run_id": "sr-fetch", "from_status": stage, "to_status": want,
                             "lease_generation": 1, "exit_code": code, "error_code": err_code,
                             "version": ev["sequence"]}
    assert sim.events()[-1]["id"] == "wxe:0fd10e14de6c751fdae498183082d9a7"
    assert s["lastMutationId"] == "wxm:0fd10e14de6c751fdae498183082d9a7"
    assert all(e["actorType"] == "worker" and e["actorId"] == "w1" for e in sim.events()[v:])


def test_7_completion_without_deadline() -> None:
    sc = situation("running", timeout_ms=None)
    assert sc.sim.do("complete_attempt", 10000, exitCode=0, **sc.fence())["attemptStatus"] == "succeeded"


def test_7_deadline_boundary_is_inclusive() -> None:
    sc = situation("running", timeout_ms=1000)  # deadline 5000
    assert sc.sim.do("complete_attempt", 5000, exitCode=0, **sc.fence())["attemptStatus"] == "timed_out"
    sc = situation("running", timeout_ms=1001)
    assert sc.sim.do("complete_attempt", 5000, exitCode=0, **sc.fence())["attemptStatus"] == "succeeded"


# ==================================================================================================
# §6 callbackSequence table
def test_6_callback_sequence() -> None:
    def cb(sc: Scenario) -> int:
        return int(sc.sim.attempt(DEMO_ATTEMPT_ID)["callbackSequence"])

    assert [cb(situation(stage)) for stage in STAGES[1:]] == [0, 0, 0, 1]  # admission, claim, start, running
    sc = situation("running")
    sc.sim.do("complete_attempt", exitCode=0, **sc.fence())
    assert cb(sc) == 1
    sc = situation("starting")
    sc.sim.do("complete_attempt", exitCode=0, **sc.fence())
    assert cb(sc) == 1
    sc = situation("starting")
    sc.sim.do("fail_start", **sc.fence())
    assert cb(sc) == 1
    for stage, want in (("leased", 0), ("running", 1)):
        sc = situation(stage)
        sc.sim.do("recover_attempt", 3000 + LEASE_MS, attemptId=DEMO_ATTEMPT_ID, evidence="not_running")
        assert cb(sc) == want
    sc = situation("claimed", cancel="user")
    sc.sim.do("converge_cancellation", runId="run-0001")
    assert cb(sc) == 0


def test_stage_times_used_by_fixtures() -> None:
    sc = situation("running")
    a = sc.sim.attempt(DEMO_ATTEMPT_ID)
    assert (a["createdAtMs"], a["startedAtMs"]) == (T_CLAIM, T_RUNNING)
    assert sc.sim.held_lease(DEMO_ATTEMPT_ID)["acquiredAtMs"] == T_LEASE
    assert [e["createdAtMs"] for e in sc.sim.events() if e["type"] == "workflow.task_attempt.starting"] == [T_START]


def test_renew_without_event_is_not_a_counter_overflow() -> None:
    sc = situation("leased")
    sim = sc.sim
    sim.put("runs", "run-0001", {**sim.run(), "version": 2147483647, "eventSequence": 2147483647})
    res = sim.do("renew_lease", 4000, durationMs=5000, **sc.fence())
    assert res["status"] == "renewed" and sim.run()["version"] == 2147483647


def test_renew_timeout_request_at_the_ceiling_overflows() -> None:
    sc = situation("starting", timeout_ms=1000)
    sim = sc.sim
    sim.put("runs", "run-0001", {**sim.run(), "version": 2147483647, "eventSequence": 2147483647})
    sim.refuse("renew_lease", "Unavailable", TX_UNAVAILABLE, "counter_overflow", 5000, durationMs=5000,
               **sc.fence())


WORKER_ARGS: dict[str, dict[str, Any]] = {
    "claim_lease": {"workerId": "w1", "durationMs": 5000},
    "renew_lease": {"workerId": "w1", "leaseGeneration": 1, "durationMs": 5000},
    "release_lease": {"workerId": "w1", "leaseGeneration": 1, "reason": "declined"},
    "start_attempt": {"workerId": "w1", "leaseGeneration": 1, "timeoutMs": None},
    "record_running": {"workerId": "w1", "leaseGeneration": 1},
    "fail_start": {"workerId": "w1", "leaseGeneration": 1},
    "complete_attempt": {"workerId": "w1", "leaseGeneration": 1, "exitCode": 0},
}


@pytest.mark.parametrize("command", WORKER_ARGS)
def test_worker_commands_checks_1_and_2(command: str) -> None:
    """Every worker command: argument shapes (check 1, Invalid) before LOAD-ATTEMPT (check 2)."""
    sim = situation("leased").sim
    args = WORKER_ARGS[command]
    sim.refuse(command, "Conflict", TX_CONFLICT, "attempt_missing", attemptId="wta:none", **args)
    sim.refuse(command, "Invalid", TX_INVALID, "argument_invalid", attemptId="w" * 37, **args)
    sim.refuse(command, "Invalid", TX_INVALID, "argument_invalid", attemptId="wta:none", **{**args, "workerId": ""})
    sim.refuse(command, "Invalid", TX_INVALID, "argument_invalid", attemptId=DEMO_ATTEMPT_ID, extra=1, **args)
    sim.refuse(command, "Invalid", TX_INVALID, "argument_invalid", attemptId=DEMO_ATTEMPT_ID,
               **{k: v for k, v in args.items() if k != "workerId"})


def test_readied_task_attempt_on_the_dependent() -> None:
    sc = readied()
    sim = sc.sim
    report = sim.step("sr-report")
    assert (report["status"], report["readyAtMs"], report["version"]) == ("ready", 2500, 2)
    res = sim.do("admit_task_attempt", 3000, runId="run-0001", stepRunId="sr-report",
                 binding=binding_for(sc.plan, "report"))
    assert res["receipt"]["stepRunVersion"] == 2 and res["attempt"]["attempt"] == 2
    a = id_hash("qinglong/plugin-package-workflow-task-attempt-id@v1", sc.plan["planDigest"], "sr-report", 2)
    assert res["attempt"]["id"] == f"wta:{a[:32]}"
    sc = readied(cancel="policy")
    sc.sim.refuse("admit_task_attempt", "Conflict", TA_CONFLICT, "cancellation_requested", runId="run-0001",
                  stepRunId="sr-report", binding=binding_for(sc.plan, "report"))
