"""task-attempts.md §8–§9 and commands.md §4.13–§4.14: the recovery builder (checks 1–7, three
branches) and recover_attempt / recovery_candidates through system.apply, with and without cancel
intent (D-2)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from model_fixtures import (
    DEMO_ATTEMPT_ID,
    DEMO_BINDING,
    DOMAIN_TASK_ATTEMPT_ID,
    DOMAIN_TASK_RECOVERY_ID,
    LEASE_MS,
    SCHEMA_TASK_RECOVERY,
    TASK_RECOVERY,
    TEXT,
    D,
    Record,
    Sim,
    binding_for,
    demo_plan,
    id_hash,
    make_attempt,
    make_plan,
    make_receipt,
    make_run,
    raises,
    reversed_keys,
    seal_step_run,
    situation,
)
from qlwf.model.admission import create_admission_bundle
from qlwf.model.recovery import build_task_recovery

TR_INVALID, TR_CONFLICT, TR_UNAVAILABLE = TASK_RECOVERY
PLAN = demo_plan()
FETCH = create_admission_bundle(PLAN)["stepMutations"][0]["stepRun"]  # ready v1
RECEIPT = make_receipt(PLAN, FETCH, binding=DEMO_BINDING, admitted_at=2000, run_version=4)
RUNNING_STEP = seal_step_run({**FETCH, "status": "running", "version": 2, "attemptCount": 1, "startedAtMs": 5000,
                              "updatedAtMs": 5000, "lastMutationId": "m-run"})
LEASED = {"workerId": "w1", "leaseGeneration": 1, "leaseVersion": 0, "leaseExpiresAtMs": 13000}
EXPIRY = 3000 + LEASE_MS
NOT_RUNNING = "execution_not_running"
UNSTARTED = "unstarted_claim_expired"


def attempt(status: str = "claimed", **over: Any) -> Record:
    extra: Record = dict(LEASED)
    if status == "running":
        extra |= {"startedAtMs": 5000, "callbackSequence": 1}
    return {**make_attempt(RECEIPT, status, **extra), **over}


def inp(status: str = "claimed", **over: Any) -> Record:
    step = RUNNING_STEP if status == "running" else FETCH
    base = {"admission": RECEIPT, "run": make_run(PLAN, version=6), "attempt": attempt(status), "stepRun": step,
            "reason": UNSTARTED if status == "claimed" else NOT_RUNNING, "observedAtMs": EXPIRY}
    base.update(over)
    return copy.deepcopy(base)


def r_hash(callback: int, version: int, reason: str) -> str:
    return id_hash(DOMAIN_TASK_RECOVERY_ID, "run-0001", DEMO_ATTEMPT_ID, callback, "sr-fetch", version, reason)[:32]


# ==================================================================================================
# §8 outputs, three branches
def _common(b: Record, i: Record, from_status: str, reason: str, r: str, n_steps: int) -> None:
    assert list(b) == ["schema", "disposition", "run", "attempt", "attemptEvent", "stepMutations"]
    assert b["schema"] == SCHEMA_TASK_RECOVERY
    code = ("CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED" if reason == UNSTARTED
            else "CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING")
    a = b["attempt"]
    assert list(a) == [*i["attempt"], "finishedAtMs", "errorCode", "errorSummary"]
    assert a == {**i["attempt"], "status": "lost", "finishedAtMs": EXPIRY, "errorCode": code,
                 "errorSummary": TEXT[code]}
    assert b["attemptEvent"] == {
        "id": f"wra:{r}", "runId": "run-0001", "sequence": 7, "type": "workflow.task_attempt.lost",
        "dedupeKey": f"wra:{r}", "actorType": "system", "attemptId": DEMO_ATTEMPT_ID, "stepRunId": "sr-fetch",
        "payload": {"execution_scope": "workflow_task", "attempt_id": DEMO_ATTEMPT_ID, "step_run_id": "sr-fetch",
                    "from_status": from_status, "to_status": "lost", "reason": reason, "error_code": code,
                    "version": 7},
        "createdAtMs": EXPIRY}
    assert list(b["run"]) == list(i["run"])
    assert b["run"] == {**i["run"], "version": 7 + n_steps, "eventSequence": 7 + n_steps}
    for j, m in enumerate(b["stepMutations"]):
        assert (m["expectedRunVersion"], m["expectedRunEventSequence"], m["event"]["sequence"]) == (7 + j, 7 + j,
                                                                                                     8 + j)
        assert m["event"]["actorType"] == "system" and "actorId" not in m["event"]
        assert m["stepRun"]["updatedAtMs"] == EXPIRY


def test_branch_unstarted_claim_requeues() -> None:
    i = inp("claimed")
    b = build_task_recovery(i)
    r = r_hash(0, 1, UNSTARTED)
    assert r == "06dbc6c81ff52dfe107e4ce28836a165"
    _common(b, i, "claimed", UNSTARTED, r, 1)
    assert b["disposition"] == "requeued"
    (m,) = b["stepMutations"]
    s = m["stepRun"]
    assert (m["mutationId"], m["event"]["id"], m["previousStatus"], m["event"]["type"]) == (
        f"wrq:{r}", f"wqe:{r}", "ready", "step.ready")
    assert (s["status"], s["version"], s["readyAtMs"], s["attemptCount"], s["resultCode"]) == ("ready", 2, 1000, 0,
                                                                                               None)


def test_branch_not_running_from_starting_fails() -> None:
    i = inp("starting", attempt=attempt("starting", deadlineAtMs=9000))
    b = build_task_recovery(i)
    r = r_hash(0, 1, NOT_RUNNING)
    _common(b, i, "starting", NOT_RUNNING, r, 1)
    assert b["disposition"] == "failed"
    (m,) = b["stepMutations"]
    s = m["stepRun"]
    assert (m["mutationId"], m["event"]["id"], m["event"]["type"]) == (f"wrf:{r}", f"wfe:{r}", "step.failed")
    assert (s["status"], s["resultCode"], s["errorSummary"]) == (
        "failed", "cluster_recovery_execution_not_running", TEXT["CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING"])
    assert (s["attemptCount"], s["startedAtMs"], s["finishedAtMs"]) == (0, None, EXPIRY)


def test_branch_not_running_from_running_loses_then_fails() -> None:
    i = inp("running")
    b = build_task_recovery(i)
    r = r_hash(1, 2, NOT_RUNNING)
    assert r == "f48fdd529a5040af98312ad5f7f103b4"
    _common(b, i, "running", NOT_RUNNING, r, 2)
    lost, failed = b["stepMutations"]
    assert (lost["mutationId"], lost["event"]["id"], lost["stepRun"]["status"]) == (f"wrl:{r}", f"wle:{r}", "lost")
    assert (failed["mutationId"], failed["event"]["id"], failed["previousStatus"]) == (f"wrf:{r}", f"wfe:{r}", "lost")
    for m in (lost, failed):
        assert (m["stepRun"]["resultCode"], m["stepRun"]["errorSummary"], m["stepRun"]["startedAtMs"]) == (
            "cluster_recovery_execution_not_running", TEXT["CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING"], 5000)
    assert failed["stepRun"]["version"] == 4 and failed["expectedStepRunVersion"] == 3


def test_builder_intent_allowed_and_key_order_kept() -> None:
    run = reversed_keys(make_run(PLAN, version=6, cancelRequestedAtMs=6000, cancelReason="user"))
    i = inp("claimed", run=run, attempt=reversed_keys(attempt("claimed")))
    b = build_task_recovery(i)
    assert list(b["run"]) == list(run) and b["run"]["cancelReason"] == "user"
    assert list(b["attempt"])[:-3] == list(i["attempt"])


def test_builder_accepts_version_bound() -> None:
    assert build_task_recovery(inp("claimed", run=make_run(PLAN, version=2147483644)))["run"]["version"] == 2147483646


def test_builder_is_pure() -> None:
    i = inp("running")
    before = copy.deepcopy(i)
    assert build_task_recovery(i) == build_task_recovery(i)
    assert i == before


# ==================================================================================================
# §8 checks 1–7
def _run(**over: Any) -> Record:
    return {**make_run(PLAN, version=6), **over}


BUILDER_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "admission invalid": ("claimed", {"admission": {**RECEIPT, "receiptDigest": D("0")}}),
    "stepRun invalid": ("claimed", {"stepRun": {**FETCH, "stepRunDigest": D("0")}}),
    "reason unknown": ("claimed", {"reason": "lease_expired"}),
    "reason null": ("claimed", {"reason": None}),
    "run id": ("claimed", {"run": _run(id="run-0002")}),
    "run triggerType": ("claimed", {"run": _run(triggerType="manual")}),
    "run origin": ("claimed", {"run": _run(executionOrigin="boot")}),
    "run owner": ("claimed", {"run": _run(executionOwner="legacy")}),
    "run status": ("claimed", {"run": _run(status="cancelled")}),
    "run version 0": ("claimed", {"run": _run(version=0, eventSequence=0)}),
    "run version above bound": ("claimed", {"run": _run(version=2147483645, eventSequence=2147483645)}),
    "run version != sequence": ("claimed", {"run": _run(eventSequence=7)}),
    "run version below receipt": ("claimed", {"run": _run(version=3, eventSequence=3)}),
    "run version bool": ("claimed", {"run": _run(version=True, eventSequence=True)}),
    "run version float": ("claimed", {"run": _run(version=6.0)}),
    "run not object": ("claimed", {"run": None}),
    "attempt id": ("claimed", {"attempt": attempt(id="wta:other")}),
    "attempt runId": ("claimed", {"attempt": attempt(runId="run-0002")}),
    "attempt stepRunId": ("claimed", {"attempt": attempt(stepRunId="sr-report")}),
    "attempt number": ("claimed", {"attempt": attempt(attempt=2)}),
    "attempt executor": ("claimed", {"attempt": attempt(executorType="local_process")}),
    "attempt createdAtMs": ("claimed", {"attempt": attempt(createdAtMs=2001)}),
    "attempt terminal": ("claimed", {"attempt": attempt(status="lost")}),
    "attempt callbackSequence negative": ("claimed", {"attempt": attempt(callbackSequence=-1)}),
    "attempt callbackSequence bool": ("claimed", {"attempt": attempt(callbackSequence=False)}),
    "attempt not object": ("claimed", {"attempt": [1]}),
    "stepRun other step": ("claimed", {"stepRun": create_admission_bundle(PLAN)["stepMutations"][1]["stepRun"]}),
    "stepRun runId": ("claimed", {"stepRun": seal_step_run({**FETCH, "runId": "run-0002"})}),
    "stepRun kind": ("claimed", {"stepRun": seal_step_run({**FETCH, "kind": "tool"})}),
    "unstarted reason on starting": ("starting", {"reason": UNSTARTED}),
    "unstarted reason on running": ("running", {"reason": UNSTARTED}),
    "not running reason on claimed": ("claimed", {"reason": NOT_RUNNING}),
    "claimed with startedAtMs": ("claimed", {"attempt": attempt(startedAtMs=2500)}),
    "claimed step at another epoch": ("claimed", {"stepRun": seal_step_run({**FETCH, "version": 2})}),
    "claimed step digest differs": ("claimed", {"stepRun": seal_step_run({**FETCH, "lastMutationId": "other"})}),
    "claimed step running": ("claimed", {"stepRun": RUNNING_STEP}),
    "starting step running": ("starting", {"stepRun": RUNNING_STEP}),
    "running step ready": ("running", {"stepRun": FETCH}),
    "running step wrong version": ("running", {"stepRun": seal_step_run({**RUNNING_STEP, "version": 3})}),
    "observed before attempt created": ("claimed", {"observedAtMs": 1999}),
    "observed before step updated": ("running", {"observedAtMs": 4999}),
    "observed before attempt started": ("running", {"attempt": attempt("running", startedAtMs=6000),
                                                    "observedAtMs": 5500}),
    "observed bool": ("claimed", {"observedAtMs": True}),
    "observed float": ("claimed", {"observedAtMs": 13000.0}),
    "observed negative": ("claimed", {"observedAtMs": -1}),
}


@pytest.mark.parametrize("case", BUILDER_CASES)
def test_builder_checks(case: str) -> None:
    status, over = BUILDER_CASES[case]
    raises("Invalid", TR_INVALID, build_task_recovery, inp(status, **over))


def test_builder_exact_input_keys() -> None:
    i = inp()
    raises("Invalid", TR_INVALID, build_task_recovery, {**i, "extra": 1})
    raises("Invalid", TR_INVALID, build_task_recovery, {k: v for k, v in i.items() if k != "observedAtMs"})
    raises("Invalid", TR_INVALID, build_task_recovery, [i])


def test_builder_observed_equal_to_floors_allowed() -> None:
    assert build_task_recovery(inp("running", observedAtMs=5000))["attempt"]["finishedAtMs"] == 5000


# ==================================================================================================
# §9 recover_attempt through system.apply
def test_recover_requeue_then_new_epoch() -> None:
    sc = situation("leased")
    sim = sc.sim
    v = sim.run()["version"]
    res = sim.do("recover_attempt", EXPIRY, attemptId=DEMO_ATTEMPT_ID, evidence="running")  # evidence not consulted
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert res == {"status": "requeued", "attempt": a}
    assert (a["status"], a["finishedAtMs"], a["errorCode"], a["errorSummary"]) == (
        "lost", EXPIRY, "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED", TEXT["CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED"])
    assert (a["workerId"], a["leaseGeneration"], a["leaseVersion"], a["leaseExpiresAtMs"]) == ("w1", 1, 1, EXPIRY)
    ls = sim.held_lease(DEMO_ATTEMPT_ID)
    assert (ls["status"], ls["version"], ls["releasedAtMs"], ls["releaseReason"], ls["updatedAtMs"]) == (
        "released", 1, EXPIRY, "lease_expired", EXPIRY)
    s = sim.step("sr-fetch")
    assert (s["status"], s["version"], s["readyAtMs"]) == ("ready", 2, 1000)
    assert [e["type"] for e in sim.events()[v:]] == ["workflow.task_attempt.lost", "step.ready"]
    assert all(e["actorType"] == "system" and "actorId" not in e for e in sim.events()[v:])
    assert sim.run()["version"] == v + 2
    # the requeued StepRun is a task candidate again and gets a new epoch and attempt number
    page = sim.do("task_candidates", limit=5)
    assert [c["stepRunId"] for c in page["candidates"]] == ["sr-fetch"]
    new = sim.do("admit_task_attempt", runId="run-0001", stepRunId="sr-fetch", binding=DEMO_BINDING)["attempt"]
    a2 = id_hash(DOMAIN_TASK_ATTEMPT_ID, sc.plan["planDigest"], "sr-fetch", 2)
    assert (new["id"], new["attempt"], new["status"]) == (f"wta:{a2[:32]}", 2, "claimed")


@pytest.mark.parametrize(("stage", "types"), [
    ("starting", ["workflow.task_attempt.lost", "step.failed"]),
    ("running", ["workflow.task_attempt.lost", "step.lost", "step.failed"]),
])
def test_recover_not_running_fails_the_step(stage: str, types: list[str]) -> None:
    sc = situation(stage)
    sim = sc.sim
    v = sim.run()["version"]
    res = sim.do("recover_attempt", EXPIRY, attemptId=DEMO_ATTEMPT_ID, evidence="not_running")
    assert res["status"] == "failed" and res["attempt"]["errorCode"] == "CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING"
    assert [e["type"] for e in sim.events()[v:]] == types
    s = sim.step("sr-fetch")
    assert (s["status"], s["resultCode"]) == ("failed", "cluster_recovery_execution_not_running")
    assert sim.run()["version"] == v + len(types) and sim.run()["status"] == "running"
    # the frontier then fails the Run and skips the dependent
    assert sim.do("advance_frontier", runId="run-0001")["terminalStatus"] == "failed"


@pytest.mark.parametrize("stage", ["starting", "running"])
@pytest.mark.parametrize(("evidence", "status"), [("running", "retry"), ("unknown", "manual")])
def test_recover_retry_and_manual_write_nothing(stage: str, evidence: str, status: str) -> None:
    sc = situation(stage)
    snap = sc.sim.state.snapshot()
    res = sc.sim.do("recover_attempt", EXPIRY, attemptId=DEMO_ATTEMPT_ID, evidence=evidence)
    assert res == {"status": status, "attempt": sc.sim.attempt(DEMO_ATTEMPT_ID)}
    assert sc.sim.state.snapshot() == snap


def test_recover_refusals() -> None:
    sc = situation("claimed")
    sim = sc.sim
    sim.refuse("recover_attempt", "Conflict", TR_CONFLICT, "not_leased", attemptId=DEMO_ATTEMPT_ID,
               evidence="not_running")
    sim.refuse("recover_attempt", "Conflict", TR_CONFLICT, "attempt_missing", attemptId="wta:none",
               evidence="not_running")
    for bad in ({"evidence": "dead"}, {"evidence": None}, {"attemptId": "a" * 37}):
        sim.refuse("recover_attempt", "Invalid", TR_INVALID, "argument_invalid",
                   **{"attemptId": DEMO_ATTEMPT_ID, "evidence": "not_running", **bad})
    sc = situation("leased")
    sc.sim.refuse("recover_attempt", "Conflict", TR_CONFLICT, "lease_live", EXPIRY - 1, attemptId=DEMO_ATTEMPT_ID,
                  evidence="not_running")
    sc.sim.do("release_lease", EXPIRY - 1, reason="declined", **sc.fence())
    sc.sim.refuse("recover_attempt", "Conflict", TR_CONFLICT, "not_leased", EXPIRY, attemptId=DEMO_ATTEMPT_ID,
                  evidence="not_running")
    sc = situation("running")
    sc.sim.do("complete_attempt", 6000, exitCode=0, **sc.fence())
    sc.sim.refuse("recover_attempt", "Conflict", TR_CONFLICT, "attempt_state_mismatch", EXPIRY,
                  attemptId=DEMO_ATTEMPT_ID, evidence="not_running")


def test_recover_clock_regression_and_resolution_failed() -> None:
    sc = situation("leased")
    sc.sim.rewind(2999)
    sc.sim.refuse("recover_attempt", "Invalid", TR_INVALID, "clock_regression", attemptId=DEMO_ATTEMPT_ID,
                  evidence="not_running")
    sc = situation("leased")
    sim = sc.sim
    sim.at(EXPIRY)
    sim.put("runs", "run-0001", {**sim.run(), "version": 2147483645, "eventSequence": 2147483645})
    sim.refuse("recover_attempt", "Unavailable", TR_UNAVAILABLE, "resolution_failed", attemptId=DEMO_ATTEMPT_ID,
               evidence="not_running")


@pytest.mark.parametrize(("stage", "disposition"), [("leased", "requeued"), ("starting", "failed"),
                                                    ("running", "failed")])
def test_recover_under_intent_d2(stage: str, disposition: str) -> None:
    sc = situation(stage, cancel="timeout")
    sim = sc.sim
    blocked = sim.do("converge_cancellation", runId="run-0001")
    assert blocked["status"] == "blocked" and blocked["blockedAttemptIds"] == [DEMO_ATTEMPT_ID]
    res = sim.do("recover_attempt", EXPIRY, attemptId=DEMO_ATTEMPT_ID, evidence="not_running")
    assert res["status"] == disposition
    done = sim.do("converge_cancellation", runId="run-0001")
    assert (done["status"], done["terminalStatus"]) == ("terminal", "timed_out")
    fetch = sim.step("sr-fetch")
    if disposition == "requeued":  # a requeued ready StepRun is timed out by convergence
        assert (fetch["status"], fetch["resultCode"]) == ("timed_out", "workflow_timed_out")
    else:  # a failed StepRun is terminal and left alone
        assert (fetch["status"], fetch["resultCode"]) == ("failed", "cluster_recovery_execution_not_running")


def test_recovery_candidates() -> None:
    plan_b = make_plan({"solo": []}, run_id="run-0002", plan_id="plan-0002", prefix="b-")
    sc = situation("leased")  # run-0001: lease expires at 13000
    sim = sc.sim
    sim.do("admit_workflow", plan=plan_b)
    aid_b = sim.do("admit_task_attempt", runId="run-0002", stepRunId="b-solo",
                   binding=binding_for(plan_b, "solo"))["attempt"]["id"]
    sim.do("claim_lease", attemptId=aid_b, workerId="w2", durationMs=5000)  # expires at 8000
    plan_c = make_plan({"solo": []}, run_id="run-0003", plan_id="plan-0003", prefix="c-")
    sim.do("admit_workflow", plan=plan_c)
    sim.do("admit_task_attempt", runId="run-0003", stepRunId="c-solo", binding=binding_for(plan_c, "solo"))
    assert sim.do("recovery_candidates", 7999, limit=10) == {"candidates": [], "truncated": False}
    page = sim.do("recovery_candidates", 13000, limit=1)
    assert page == {"candidates": [{"attemptId": aid_b, "runId": "run-0002", "stepRunId": "b-solo",
                                    "status": "claimed", "leaseExpiresAtMs": 8000}], "truncated": True,
                    "next": {"leaseExpiresAtMs": 8000, "attemptId": aid_b}}
    page = sim.do("recovery_candidates", limit=1, after=page["next"])
    assert page == {"candidates": [{"attemptId": DEMO_ATTEMPT_ID, "runId": "run-0001", "stepRunId": "sr-fetch",
                                    "status": "claimed", "leaseExpiresAtMs": 13000}], "truncated": False}
    sim.refuse("recovery_candidates", "Invalid", TR_INVALID, "page_invalid", limit=65)
    sim.refuse("recovery_candidates", "Invalid", TR_INVALID, "page_invalid", limit=1,
               after={"leaseExpiresAtMs": 1, "attemptId": "a" * 37})


def test_drain_leased_attempts_liveness_example() -> None:
    """LIVE-1 on a small workflow: recoveries then one convergence terminalize a cancelling Run."""
    plan = make_plan({"a": [], "b": [], "c": ["a", "b"]})
    sim = Sim(clock=1000)
    sim.do("admit_workflow", plan=plan)
    aids = []
    for k in ("a", "b"):
        aid = sim.do("admit_task_attempt", runId="run-0001", stepRunId=f"sr-{k}",
                     binding=binding_for(plan, k))["attempt"]["id"]
        sim.do("claim_lease", attemptId=aid, workerId="w1", durationMs=5000)
        aids.append(aid)
    sim.do("start_attempt", attemptId=aids[0], workerId="w1", leaseGeneration=1, timeoutMs=None)
    sim.do("request_cancel", 2000, runId="run-0001", reason="user", actor={"type": "user"})
    sim.at(6000)
    for aid in sorted(aids):
        sim.do("recover_attempt", attemptId=aid, evidence="not_running")
    res = sim.do("converge_cancellation", runId="run-0001")
    assert (res["status"], res["terminalStatus"]) == ("terminal", "cancelled")
