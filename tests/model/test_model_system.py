"""commands.md §1–§4 through system.apply: admit_workflow outcomes and order of checks, the
queries and their keyset pages, the clock floor, determinism, untouched inputs, errors leaving the
State unchanged, and invariants after every step of mixed scenarios."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from model_fixtures import (
    ADMISSION,
    CANCEL_REQUEST,
    CANCELLATION,
    DEMO_ATTEMPT_ID,
    DEMO_BINDING,
    DEMO_PLAN_DIGEST,
    FRONTIER,
    LEASE_MS,
    PLAN_INVALID,
    RUN_KEYS,
    TASK_ADMISSION,
    TASK_EXECUTION,
    TASK_RECOVERY,
    D,
    Record,
    Sim,
    binding_for,
    cancelling_run,
    demo_plan,
    finish_step,
    make_attempt,
    make_plan,
    make_receipt,
    make_run,
    ordered,
    plan_step,
    raw_sign,
    seal_step_run,
    situation,
    step_run_for,
    step_runs_for,
    unsigned_plan,
)
from qlwf.model.admission import create_admission_bundle
from qlwf.model.attempts import build_task_attempt_admission
from qlwf.model.cancellation import check_page_result, resolve_cancellation
from qlwf.model.frontier import is_frontier_candidate, resolve_frontier
from qlwf.model.invariants import check_invariants
from qlwf.model.records import (
    normalize_admission_receipt,
    normalize_binding,
    normalize_plan,
    normalize_step_run,
    normalize_task_receipt,
    sign_plan,
)
from qlwf.model.recovery import build_task_recovery
from qlwf.model.state import State
from qlwf.model.steprun import resolve_step_run_mutation, transition_step_run, transition_step_run_mutation
from qlwf.model.system import apply

A_INVALID, A_CONFLICT, A_UNAVAILABLE = ADMISSION
PD = DEMO_PLAN_DIGEST


# ==================================================================================================
# admit_workflow (commands.md §4.1, frontier.md §2–§3)
def test_admit_created_records() -> None:
    plan = demo_plan()
    sim = Sim(clock=4000)  # admitted later than plannedAtMs: every timestamp is still plannedAtMs
    res = sim.do("admit_workflow", plan=copy.deepcopy(plan))
    assert list(res) == ["status", "receipt"] and res["status"] == "created"
    assert res["receipt"] == create_admission_bundle(plan)["receipt"]
    assert sim.run() == make_run(plan) and list(sim.run()) == list(make_run(plan))
    ev = sim.events()
    assert [e["type"] for e in ev] == ["workflow.admitted", "step.created", "step.created"]
    assert ev[0] == {"id": "wfa:8f52bf506f9a5824edfd235258e2cace", "runId": "run-0001", "sequence": 1,
                     "type": "workflow.admitted", "dedupeKey": "wfa:8f52bf506f9a5824edfd235258e2cace",
                     "actorType": "system",
                     "payload": {"planId": "plan-0001", "planDigest": PD, "publicationDigest": D("4"),
                                 "workflowId": "nightly", "workflowDefinitionDigest": D("5"), "stepCount": 2},
                     "createdAtMs": 1000}
    assert all(e["createdAtMs"] == 1000 for e in ev)
    assert ev[1]["payload"] == {"stepRunId": "sr-fetch", "stepKey": "fetch", "kind": "task", "from": None,
                                "to": "ready", "version": 1, "stepRunDigest": sim.step("sr-fetch")["stepRunDigest"]}
    fetch, report = sim.step("sr-fetch"), sim.step("sr-report")
    assert (fetch["status"], fetch["readyAtMs"], fetch["createdAtMs"], fetch["updatedAtMs"]) == ("ready", 1000,
                                                                                                 1000, 1000)
    assert (report["status"], report["readyAtMs"], report["version"], report["attemptCount"]) == ("pending", None,
                                                                                                  1, 0)
    assert all(m["committedAtMs"] == 1000 for m in sim.state.mutations.values())
    assert sim.state.admission_steps[(PD, "report")] == {
        "planDigest": PD, "runId": "run-0001", "stepKey": "report", "stepRunId": "sr-report", "taskId": "reporter",
        "taskDefinitionRef": "plugin-package:" + D("3") + ":task:reporter", "taskDefinitionDigest": D("7"),
        "needs": ["fetch"], "initialStatus": "pending",
        "mutationId": "wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:2",
        "eventId": "wfe:8f52bf506f9a5824edfd235258e:2"}
    assert sim.state.admissions[PD]["plan"] == plan


def test_admit_existing_exact_replay_after_progress() -> None:
    sc = situation("running")
    sim = sc.sim
    receipt = sim.state.admissions[PD]["receipt"]
    for _ in range(2):
        snap = sim.state.snapshot()
        assert sim.do("admit_workflow", plan=demo_plan()) == {"status": "existing", "receipt": receipt}
        assert sim.state.snapshot() == snap
        sim.do("complete_attempt", 7000, exitCode=0, **sc.fence())
        sim.do("advance_frontier", runId="run-0001")
    sim.do("request_cancel", runId="run-0001", reason="user", actor={"type": "user"})
    sim.do("converge_cancellation", runId="run-0001")
    assert sim.run()["status"] == "cancelled"
    assert sim.do("admit_workflow", plan=demo_plan())["status"] == "existing"


def test_admit_conflicts_in_order() -> None:
    sim = Sim(clock=1000)
    sim.do("admit_workflow", plan=demo_plan())
    other = demo_plan()
    # same planId, another digest (even with the same runId): plan_id_conflict first
    moved = sign_plan(unsigned_plan(planned_at=999))
    sim.refuse("admit_workflow", "Conflict", A_CONFLICT, "plan_id_conflict", plan=moved)
    # another planId, same runId (and same StepRun ids): run_id_conflict before step_run_id_conflict
    same_run = sign_plan({**unsigned_plan(), "planId": "plan-0002"})
    sim.refuse("admit_workflow", "Conflict", A_CONFLICT, "run_id_conflict", plan=same_run)
    same_steps = sign_plan({**unsigned_plan(), "planId": "plan-0003", "runId": "run-0003"})
    sim.refuse("admit_workflow", "Conflict", A_CONFLICT, "step_run_id_conflict", plan=same_steps)
    assert sim.state.admissions[PD]["plan"] == other


def test_admit_plan_invalid_and_planned_in_future() -> None:
    sim = Sim(clock=1000)
    bad = raw_sign({**unsigned_plan(planned_at=5000), "planId": ""})
    sim.refuse("admit_workflow", "Invalid", PLAN_INVALID, "plan_invalid", plan=bad)  # beats planned_in_future
    sim.refuse("admit_workflow", "Invalid", PLAN_INVALID, "plan_invalid", plan={**demo_plan(), "planDigest": D("0")})
    future = sign_plan(unsigned_plan(planned_at=1001))
    sim.refuse("admit_workflow", "Invalid", A_INVALID, "planned_in_future", plan=future)
    sim.do("admit_workflow", plan=demo_plan())
    # planned_in_future is checked before the replay / planId conflict
    future_same_id = sign_plan(unsigned_plan(planned_at=2000))
    sim.refuse("admit_workflow", "Invalid", A_INVALID, "planned_in_future", plan=future_same_id)
    sim.at(2000)
    assert sim.do("admit_workflow", plan=sign_plan(unsigned_plan(planned_at=2000, plan_id="p2", run_id="run-2",
                                                                 steps=[_step("x")])))["status"] == "created"


def _step(key: str) -> Record:
    return plan_step(key, step_run_id=f"x-{key}")


def test_admit_drift_on_replay() -> None:
    sim = Sim(clock=1000)
    sim.do("admit_workflow", plan=demo_plan())
    events = dict(sim.state.events)
    first = {**events["run-0001"][0], "createdAtMs": 1001}
    events["run-0001"] = (first, *events["run-0001"][1:])
    sim.tamper(events=events)
    sim.refuse("admit_workflow", "Unavailable", A_UNAVAILABLE, "admission_drift", plan=demo_plan())


# ==================================================================================================
# Queries and keyset pages (commands.md §2.6)
def test_frontier_candidates_order_and_paging() -> None:
    sim = Sim(clock=1000)
    plans = [make_plan({"a": [], "b": ["a"]}, run_id=f"q{n}", plan_id=f"qp{n}", prefix=f"q{n}-", planned_at=at)
             for n, at in ((1, 1000), (2, 1000), (3, 900))]
    for p in plans:
        sim.do("admit_workflow", plan=p)
    assert sim.do("frontier_candidates", limit=5) == {"candidates": [], "truncated": False}
    for p in plans:
        finish_step(sim, p["runId"], p, "a")
    order = sorted(plans, key=lambda p: (p["plannedAtMs"], p["planDigest"]))
    rows = [{"runId": p["runId"], "planDigest": p["planDigest"], "admittedAtMs": p["plannedAtMs"]} for p in order]
    p1 = sim.do("frontier_candidates", limit=2)
    assert p1 == {"candidates": rows[:2], "truncated": True,
                  "next": {"admittedAtMs": rows[1]["admittedAtMs"], "planDigest": rows[1]["planDigest"]}}
    assert list(p1) == ["candidates", "truncated", "next"]
    assert sim.do("frontier_candidates", limit=2, after=p1["next"]) == {"candidates": rows[2:], "truncated": False}
    assert sim.do("frontier_candidates", limit=3) == {"candidates": rows, "truncated": False}
    sim.do("advance_frontier", runId=order[0]["runId"])
    assert [c["runId"] for c in sim.do("frontier_candidates", limit=64)["candidates"]] == [p["runId"]
                                                                                           for p in order[1:]]


def test_task_candidates_order_and_paging() -> None:
    plan = make_plan({"c": [], "a": [], "b": []})
    sim = Sim(clock=1000)
    sim.do("admit_workflow", plan=plan)
    p1 = sim.do("task_candidates", limit=2)
    assert [c["stepRunId"] for c in p1["candidates"]] == ["sr-a", "sr-b"]
    assert p1["next"] == {"readyAtMs": 1000, "stepRunId": "sr-b"} and p1["truncated"] is True
    p2 = sim.do("task_candidates", limit=2, after=p1["next"])
    assert p2 == {"candidates": [{"runId": "run-0001", "stepRunId": "sr-c", "readyAtMs": 1000,
                                  "planDigest": plan["planDigest"]}], "truncated": False}
    sim.do("request_cancel", runId="run-0001", reason="user", actor={"type": "user"})
    assert sim.do("task_candidates", limit=64)["candidates"] == []


QUERY_FAMILY = {"frontier_candidates": (FRONTIER[0], 64, {"admittedAtMs": 1, "planDigest": D("a")}),
                "task_candidates": (TASK_ADMISSION[0], 64, {"readyAtMs": 1, "stepRunId": "sr-a"}),
                "recovery_candidates": (TASK_RECOVERY[0], 64, {"leaseExpiresAtMs": 1, "attemptId": "wta:x"}),
                "cancellation_candidates": (CANCELLATION[0], 128, {"cancelRequestedAtMs": 1, "runId": "r"})}


@pytest.mark.parametrize("query", QUERY_FAMILY)
def test_query_pages_invalid(query: str) -> None:
    code, limit_max, cursor = QUERY_FAMILY[query]
    sim = situation("leased").sim
    assert sim.do(query, limit=limit_max, after=cursor)["truncated"] is False
    first_key = next(iter(cursor))
    bad_cursors: list[object] = [{**cursor, "x": 1}, {first_key: cursor[first_key]}, {**cursor, first_key: -1},
                   {**cursor, first_key: True}, None, [], {k: "" if k != first_key else v for k, v in cursor.items()}]
    cases: list[dict[str, object]] = [{"limit": 0}, {"limit": limit_max + 1}, {"limit": True}, {"limit": "1"}, {},
                                      {"limit": 1, "extra": 1}, *({"limit": 1, "after": c} for c in bad_cursors)]
    for args in cases:
        sim.refuse(query, "Invalid", code, "page_invalid", **args)


def test_frontier_cursor_digest_shape() -> None:
    sim = Sim(clock=1000)
    sim.refuse("frontier_candidates", "Invalid", FRONTIER[0], "page_invalid", limit=1,
               after={"admittedAtMs": 1, "planDigest": D("A")})


# ==================================================================================================
# Clock floor (S-14) per writing command
FLOOR_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "advance_frontier": (FRONTIER[0], {"runId": "run-0001"}),
    "claim_lease": (TASK_EXECUTION[0], {"attemptId": DEMO_ATTEMPT_ID, "workerId": "w1", "durationMs": 5000}),
    "renew_lease": (TASK_EXECUTION[0], {"attemptId": DEMO_ATTEMPT_ID, "workerId": "w1", "leaseGeneration": 1,
                                        "durationMs": 5000}),
    "release_lease": (TASK_EXECUTION[0], {"attemptId": DEMO_ATTEMPT_ID, "workerId": "w1", "leaseGeneration": 1,
                                          "reason": "declined"}),
    "start_attempt": (TASK_EXECUTION[0], {"attemptId": DEMO_ATTEMPT_ID, "workerId": "w1", "leaseGeneration": 1,
                                          "timeoutMs": None}),
    "record_running": (TASK_EXECUTION[0], {"attemptId": DEMO_ATTEMPT_ID, "workerId": "w1", "leaseGeneration": 1}),
    "fail_start": (TASK_EXECUTION[0], {"attemptId": DEMO_ATTEMPT_ID, "workerId": "w1", "leaseGeneration": 1}),
    "complete_attempt": (TASK_EXECUTION[0], {"attemptId": DEMO_ATTEMPT_ID, "workerId": "w1", "leaseGeneration": 1,
                                             "exitCode": 0}),
    "recover_attempt": (TASK_RECOVERY[0], {"attemptId": DEMO_ATTEMPT_ID, "evidence": "not_running"}),
    "request_cancel": (CANCEL_REQUEST[0], {"runId": "run-0001", "reason": "user", "actor": {"type": "user"}}),
}


@pytest.mark.parametrize("command", FLOOR_CASES)
def test_clock_regression(command: str) -> None:
    code, args = FLOOR_CASES[command]
    sim = situation("leased").sim  # last event at 3000
    sim.rewind(2999)
    sim.refuse(command, "Invalid", code, "clock_regression", **args)


def test_apply_refuses_time_travel_as_a_programming_error() -> None:
    state = situation("admitted").sim.state
    with pytest.raises(ValueError):
        apply(state, {"name": "advance_frontier", "args": {"runId": "run-0001"}}, state.clock - 1)
    with pytest.raises(ValueError):
        apply(state, {"name": "no_such_command", "args": {}})


# ==================================================================================================
# Determinism, untouched inputs, unchanged State on error
def script(sim: Sim) -> list[Any]:
    """A mixed scenario over three workflows; invariants are asserted after every step by Sim."""
    out: list[Any] = []
    plans = [make_plan({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, run_id=f"m{n}", plan_id=f"mp{n}",
                       prefix=f"m{n}-") for n in range(3)]
    for p in plans:
        out.append(sim.do("admit_workflow", plan=p))
    out.append(sim.do("task_candidates", limit=64))
    aids = {}
    for p in plans:
        aids[p["runId"]] = sim.do("admit_task_attempt", runId=p["runId"], stepRunId=f"{p['runId']}-a",
                                  binding=binding_for(p, "a"))["attempt"]["id"]
        out.append(sim.do("claim_lease", attemptId=aids[p["runId"]], workerId="w1", durationMs=5000))
    sim.tick(100)
    fence = {"workerId": "w1", "leaseGeneration": 1}
    out.append(sim.do("start_attempt", attemptId=aids["m0"], timeoutMs=50, **fence))
    out.append(sim.do("record_running", attemptId=aids["m0"], **fence))
    sim.tick(100)
    out.append(sim.do("renew_lease", attemptId=aids["m0"], durationMs=5000, **fence))
    out.append(sim.do("complete_attempt", attemptId=aids["m0"], exitCode=0, **fence))  # deadline passed
    out.append(sim.do("advance_frontier", runId="m0"))
    out.append(sim.do("request_cancel", runId="m1", reason="timeout", actor={"type": "scheduler"}))
    out.append(sim.do("converge_cancellation_page", limit=8))
    out.append(sim.do("start_attempt", attemptId=aids["m2"], timeoutMs=None, **fence))
    sim.tick(10_000)
    out.append(sim.do("recovery_candidates", limit=64))
    for aid in (aids["m1"], aids["m2"]):
        out.append(sim.do("recover_attempt", attemptId=aid, evidence="not_running"))
    out.append(sim.do("converge_cancellation", runId="m1"))
    out.append(sim.do("frontier_candidates", limit=64))
    out.append(sim.do("advance_frontier", runId="m2"))
    out.append(sim.do("admit_workflow", plan=plans[0]))
    return out


def test_determinism_of_a_whole_scenario() -> None:
    a, b = Sim(clock=1000), Sim(clock=1000)
    out_a, out_b = script(a), script(b)
    assert out_a == out_b
    assert a.state.snapshot() == b.state.snapshot()
    assert a.run("m0")["status"] == "failed" and a.run("m1")["status"] == "timed_out"  # m0: timed_out + skipped
    assert a.run("m2")["status"] == "failed"
    assert check_invariants(a.state) == []


def test_apply_is_pure_on_its_inputs() -> None:
    sim = Sim(clock=1000)
    script(sim)
    state = sim.state
    snap = copy.deepcopy(state.snapshot())
    commands = [
        {"name": "admit_workflow", "args": {"plan": demo_plan()}},
        {"name": "advance_frontier", "args": {"runId": "m0"}},
        {"name": "request_cancel", "args": {"runId": "m2", "reason": "user", "actor": {"type": "user", "id": "u"}}},
        {"name": "converge_cancellation_page", "args": {"limit": 3}},
        {"name": "frontier_candidates", "args": {"limit": 2}},
        {"name": "admit_task_attempt", "args": {"runId": "m0", "stepRunId": "m0-b",
                                                 "binding": binding_for(make_plan({"a": [], "b": ["a"], "c": ["a"],
                                                                                   "d": ["b", "c"]}), "b")}},
    ]
    for cmd in commands:
        before = copy.deepcopy(cmd)
        o1 = apply(state, cmd)
        o2 = apply(state, copy.deepcopy(cmd))
        assert cmd == before
        assert state.snapshot() == snap  # the old State is a value
        assert (o1.result, o1.error and o1.error.to_json(), o1.state.snapshot()) == (
            o2.result, o2.error and o2.error.to_json(), o2.state.snapshot())


def test_errors_leave_the_state_unchanged() -> None:
    sc = situation("running", cancel="user")
    state = sc.sim.state
    failing = [
        {"name": "advance_frontier", "args": {"runId": "run-0001"}},
        {"name": "admit_task_attempt", "args": {"runId": "run-0001", "stepRunId": "sr-report",
                                                 "binding": DEMO_BINDING}},
        {"name": "start_attempt", "args": {**sc.fence(workerId="w2"), "timeoutMs": None}},
        {"name": "release_lease", "args": {**sc.fence(), "reason": "declined"}},
        {"name": "recover_attempt", "args": {"attemptId": DEMO_ATTEMPT_ID, "evidence": "not_running"}},
        {"name": "request_cancel", "args": {"runId": "nope", "reason": "user", "actor": {"type": "user"}}},
        {"name": "converge_cancellation_page", "args": {"limit": 0}},
        {"name": "admit_workflow", "args": {"plan": {}}},
        {"name": "complete_attempt", "args": {**sc.fence(), "exitCode": 2**31}},
        {"name": "renew_lease", "args": {**sc.fence(workerId="w2"), "durationMs": 5000}},
        {"name": "admit_workflow", "args": {"plan": demo_plan(), "extra": 1}},
    ]
    snap = state.snapshot()
    for cmd in failing:
        out = apply(state, cmd, state.clock + 5)
        assert out.error is not None, cmd
        assert out.state is state and out.state.snapshot() == snap and out.result is None


def _pure_calls() -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    plan = demo_plan()
    fetch = create_admission_bundle(plan)["stepMutations"][0]["stepRun"]
    receipt = make_receipt(plan, fetch, binding=DEMO_BINDING, admitted_at=2000)
    attempt = make_attempt(receipt, workerId="w1", leaseGeneration=1, leaseVersion=0, leaseExpiresAtMs=9000)
    cmd = {"expectedVersion": 1, "expectedDigest": fetch["stepRunDigest"], "mutationId": "m", "to": "running",
           "atMs": 3000}
    ctx = {"expectedRunVersion": 4, "expectedRunEventSequence": 4, "eventId": "e", "dedupeKey": "e",
           "actor": {"type": "worker", "id": "w1"}}
    mutation = transition_step_run_mutation(fetch, cmd, ctx)
    return [
        (normalize_plan, (plan,)),
        (normalize_step_run, (fetch,)),
        (normalize_admission_receipt, (create_admission_bundle(plan)["receipt"],)),
        (normalize_task_receipt, (receipt,)),
        (normalize_binding, (DEMO_BINDING,)),
        (sign_plan, (unsigned_plan(),)),
        (create_admission_bundle, (plan,)),
        (transition_step_run, (fetch, cmd)),
        (transition_step_run_mutation, (fetch, cmd, ctx)),
        (resolve_step_run_mutation, (fetch, mutation)),
        (resolve_frontier, ({"plan": plan, "run": make_run(plan), "stepRuns": step_runs_for(plan, {
            "fetch": "failed"}), "observedAtMs": 5000},)),
        (is_frontier_candidate, (make_run(plan), plan, {"fetch": "succeeded", "report": "pending"})),
        (build_task_attempt_admission, ({"plan": plan, "run": make_run(plan), "stepRun": fetch,
                                         "binding": DEMO_BINDING, "attemptNumber": 1, "admittedAtMs": 2000},)),
        (build_task_recovery, ({"admission": receipt, "run": make_run(plan, version=5), "attempt": attempt,
                                "stepRun": fetch, "reason": "unstarted_claim_expired", "observedAtMs": 9000},)),
        (resolve_cancellation, ({"run": cancelling_run(plan, version=5), "stepRuns": [
            fetch, step_run_for(plan, "report", "pending")], "activeTaskAttempts": [
            {"admission": receipt, "attempt": attempt, "leaseStatus": "released"}], "observedAtMs": 6000},)),
        (check_page_result, (4, {"scanned": 1, "settledRuns": 1, "settledAttempts": 0, "blocked": 0,
                                 "hasMore": False, "next": None, "outcomes": []})),
    ]


@pytest.mark.parametrize(("fn", "args"), _pure_calls(), ids=lambda x: getattr(x, "__name__", ""))
def test_pure_functions_leave_inputs_untouched_and_are_deterministic(fn: Callable[..., Any],
                                                                      args: tuple[Any, ...]) -> None:
    frozen = copy.deepcopy(args)
    first = fn(*args)
    assert args == frozen
    second = fn(*copy.deepcopy(args))
    assert first == second
    if isinstance(first, dict):
        assert json_key_orders(first) == json_key_orders(second)


def json_key_orders(x: Any) -> Any:
    if isinstance(x, dict):
        return [(k, json_key_orders(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [json_key_orders(v) for v in x]
    return x


def test_outputs_do_not_alias_inputs() -> None:
    plan = demo_plan()
    res = resolve_frontier({"plan": plan, "run": make_run(plan), "stepRuns": step_runs_for(plan, {
        "fetch": "succeeded"}), "observedAtMs": 5000})
    res["stepMutations"][0]["stepRun"]["status"] = "mutated"
    assert plan == demo_plan()
    bundle = create_admission_bundle(plan)
    bundle["plan"]["steps"][0]["needs"].append("x")
    assert plan == demo_plan()


def test_initial_state_and_snapshot_order() -> None:
    assert State(clock=5).snapshot() == {k: [] for k in ("admissions", "admissionSteps", "runs", "stepRuns",
                                                         "mutations", "events", "attempts", "taskReceipts", "leases")}
    sim = Sim(clock=1000)
    script(sim)
    snap = sim.state.snapshot()
    assert [r["id"] for r in snap["runs"]] == sorted(r["id"] for r in snap["runs"])
    assert [(e["runId"], e["sequence"]) for e in snap["events"]] == sorted((e["runId"], e["sequence"])
                                                                           for e in snap["events"])
    assert State.from_snapshot(snap, clock=sim.state.clock).snapshot() == snap


def test_long_chain_invariants() -> None:
    """A 12-step chain run to completion; invariants after every step."""
    keys = [f"k{i:02d}" for i in range(12)]
    plan = make_plan({k: ([keys[i - 1]] if i else []) for i, k in enumerate(keys)})
    sim = Sim(clock=1000)
    sim.do("admit_workflow", plan=plan)
    for k in keys:
        finish_step(sim, "run-0001", plan, k)
        sim.tick(LEASE_MS)
        res = sim.do("advance_frontier", runId="run-0001")
    assert res["status"] == "terminal" and sim.run()["version"] == 13 + 12 * 7 + 11 + 1


# ==================================================================================================
# state-machines.md §9: the invariant checker detects violations (drift-injected states)
def _events(sim: Sim, fn: Callable[[list[Record]], list[Record]]) -> None:
    ev = dict(sim.state.events)
    ev["run-0001"] = tuple(fn(list(ev["run-0001"])))
    sim.tamper(events=ev)


def _bad_dedupe(sim: Sim) -> None:
    _events(sim, lambda log: [*log[:-1], {**log[-1], "dedupeKey": "other"}])


def _long_attempt_id(sim: Sim) -> None:
    at = dict(sim.state.attempts)
    a = at.pop(DEMO_ATTEMPT_ID)
    sim.tamper(attempts={**at, "w" * 37: {**a, "id": "w" * 37}})


def _ready_report(sim: Sim) -> None:
    r = sim.step("sr-report")
    sim.put("step_runs", "sr-report", seal_step_run({**r, "status": "ready", "readyAtMs": 1000}))


def _skipped_report(sim: Sim) -> None:
    r = sim.step("sr-report")
    sim.put("step_runs", "sr-report", seal_step_run({**r, "status": "skipped", "finishedAtMs": 1000,
                                                     "resultCode": "dependency_not_succeeded"}))


def _work_after_intent(sim: Sim) -> None:
    run = sim.run()
    sim.put("runs", "run-0001", {k: v for k, v in run.items() if k not in ("cancelRequestedAtMs", "cancelReason")})
    sim.do("admit_task_attempt", runId="run-0001", stepRunId="sr-fetch", binding=DEMO_BINDING)
    sim.put("runs", "run-0001", ordered({**sim.run(), "cancelRequestedAtMs": run["cancelRequestedAtMs"],
                                         "cancelReason": run["cancelReason"]}, RUN_KEYS))


def _second_active_attempt(sim: Sim) -> None:
    a = sim.attempt(DEMO_ATTEMPT_ID)
    sim.put("attempts", "wta:second", {**a, "id": "wta:second", "attempt": 2})


def _lease_too_long(sim: Sim) -> None:
    sim.put("leases", DEMO_ATTEMPT_ID, {**sim.held_lease(DEMO_ATTEMPT_ID), "expiresAtMs": 3000 + 600001})


def _mirror(sim: Sim) -> None:
    sim.put("attempts", DEMO_ATTEMPT_ID, {**sim.attempt(DEMO_ATTEMPT_ID), "leaseVersion": 3})


def _terminal_attempt_with_lease(sim: Sim) -> None:
    sim.put("attempts", DEMO_ATTEMPT_ID, {**sim.attempt(DEMO_ATTEMPT_ID), "status": "succeeded",
                                          "finishedAtMs": 3000})


def _wrong_terminal_code(sim: Sim) -> None:
    finish_step(sim, "run-0001", demo_plan(), "fetch", exit_code=1, at=2000)
    sim.do("advance_frontier", runId="run-0001")
    sim.put("runs", "run-0001", {**sim.run(), "errorCode": "workflow_step_timed_out"})


def _double_timeout_request(sim: Sim) -> None:
    sim.do("renew_lease", 5000, attemptId=DEMO_ATTEMPT_ID, workerId="w1", leaseGeneration=1, durationMs=5000)
    _events(sim, lambda log: [*log, {**log[-1], "id": "wxa:dup", "dedupeKey": "wxa:dup", "sequence": len(log) + 1}])
    n = len(sim.events())
    sim.put("runs", "run-0001", {**sim.run(), "version": n, "eventSequence": n})


INVARIANT_CASES: dict[str, tuple[str, dict[str, Any], Callable[[Sim], None]]] = {
    "INV-2": ("admitted", {}, _bad_dedupe),
    "INV-3": ("claimed", {}, _long_attempt_id),
    "INV-4": ("admitted", {}, lambda sim: sim.rewind(999)),
    "INV-6": ("admitted", {}, lambda sim: sim.put("step_runs", "sr-report", {**sim.step("sr-report"),
                                                                             "stepRunDigest": D("0")})),
    "INV-10": ("admitted", {}, lambda sim: sim.put("runs", "run-0001", {**sim.run(), "finishedAtMs": 5})),
    "INV-11": ("admitted", {}, lambda sim: sim.put("runs", "run-0001", {**sim.run(), "status": "failed",
                                                                        "finishedAtMs": 1000})),
    "INV-13": ("admitted", {}, _wrong_terminal_code),
    "INV-14": ("admitted", {}, lambda sim: sim.put("runs", "run-0001", {**sim.run(), "cancelRequestedAtMs": 1000,
                                                                        "cancelReason": "user"})),
    "INV-15": ("admitted", {"cancel": "user"}, _work_after_intent),
    "INV-16": ("admitted", {}, _ready_report),
    "INV-17": ("admitted", {}, _skipped_report),
    "INV-19": ("claimed", {}, _second_active_attempt),
    "INV-20": ("claimed", {}, lambda sim: sim.put("receipts", DEMO_ATTEMPT_ID, None)),
    "INV-24": ("leased", {}, _terminal_attempt_with_lease),
    "INV-25": ("leased", {}, _mirror),
    "INV-26": ("leased", {}, _lease_too_long),
    "INV-31": ("starting", {"timeout_ms": 1000}, _double_timeout_request),
}


@pytest.mark.parametrize("inv", INVARIANT_CASES)
def test_invariants_detect_violations(inv: str) -> None:
    stage, kw, tamper = INVARIANT_CASES[inv]
    sim = situation(stage, **kw).sim
    assert check_invariants(sim.state) == []
    tamper(sim)
    found = {v.invariant for v in check_invariants(sim.state)}
    assert inv in found, found


def test_invariants_report_counter_drift() -> None:
    sim = situation("admitted").sim
    sim.put("runs", "run-0001", {**sim.run(), "version": 4, "eventSequence": 4})
    assert "INV-1" in {v.invariant for v in check_invariants(sim.state)}
