"""frontier.md §4–§6: resolve_frontier (rules, counters, outputs, validation), candidacy (§5)
against resolution, and the advance_frontier outcome table through system.apply."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from model_fixtures import (
    BLOCKING_STEP,
    DOMAIN_FRONTIER_ID,
    FRONTIER,
    PLAN_INVALID,
    SCHEMA_FRONTIER,
    STEP_RUN_INVALID,
    STEP_STATUSES,
    TERMINAL_STEP,
    D,
    Record,
    Sim,
    binding_for,
    demo_plan,
    finish_step,
    id_hash,
    make_plan,
    make_run,
    raises,
    seal_step_run,
    situation,
    step_run_for,
    step_runs_for,
)
from qlwf.model.frontier import is_frontier_candidate, resolve_frontier

F_INVALID, F_CONFLICT, F_UNAVAILABLE = FRONTIER
OBS = 5000


def snap(plan: Record, statuses: dict[str, str], *, run: Record | None = None, observed: int = OBS,
         t: int | None = None) -> Record:
    return {"plan": plan, "run": run or make_run(plan, version=20),
            "stepRuns": step_runs_for(plan, statuses, t), "observedAtMs": observed}


def targets(res: Record) -> dict[str, str]:
    return {m["stepRun"]["stepKey"]: m["stepRun"]["status"] for m in res["stepMutations"]}


def agg(statuses: list[str]) -> str | None:
    """state-machines.md §1 AGG, written from the spec."""
    if any(s not in TERMINAL_STEP for s in statuses):
        return None
    if any(s in ("failed", "skipped") for s in statuses):
        return "failed"
    if "timed_out" in statuses:
        return "timed_out"
    if "cancelled" in statuses:
        return "cancelled"
    return "succeeded"


def oracle(plan: Record, status: dict[str, str]) -> dict[str, str]:
    """frontier.md §4.3 written from the spec: which pending steps become ready or skipped."""
    needs = {p["stepKey"]: p["needs"] for p in plan["steps"]}
    memo: dict[str, bool] = {}

    def cannot(k: str) -> bool:
        if k not in memo:
            s = status[k]
            memo[k] = True if s in BLOCKING_STEP else False if s != "pending" else any(cannot(d) for d in needs[k])
        return memo[k]

    out = {}
    for k in sorted(needs):
        if status[k] != "pending":
            continue
        if cannot(k):
            out[k] = "skipped"
        elif all(status[d] == "succeeded" for d in needs[k]):
            out[k] = "ready"
    return out


CHAIN = make_plan({"a": [], "b": ["a"], "c": ["b"], "d": ["c"]})
DIAMOND = make_plan({"a": [], "b": [], "c": ["a", "b"], "d": ["c"]})


# ==================================================================================================
# §4.3 rules
def test_ready_rule_every_need_succeeded() -> None:
    res = resolve_frontier(snap(DIAMOND, {"a": "succeeded", "b": "succeeded", "c": "pending", "d": "pending"}))
    assert targets(res) == {"c": "ready"}
    (m,) = res["stepMutations"]
    s = m["stepRun"]
    assert (s["readyAtMs"], s["updatedAtMs"], s["version"], s["resultCode"]) == (OBS, OBS, 2, None)


def test_ready_rule_partial_needs_wait() -> None:
    res = resolve_frontier(snap(DIAMOND, {"a": "succeeded", "b": "ready"}))
    assert targets(res) == {}


def test_root_pending_step_is_readied() -> None:
    res = resolve_frontier(snap(DIAMOND, {"a": "pending", "b": "succeeded"}))
    assert targets(res) == {"a": "ready"}


def test_transitive_skip_in_one_pass() -> None:
    res = resolve_frontier(snap(CHAIN, {"a": "failed"}))
    assert targets(res) == {"b": "skipped", "c": "skipped", "d": "skipped"}
    for m in res["stepMutations"]:
        s = m["stepRun"]
        assert (s["resultCode"], s["errorSummary"], s["readyAtMs"], s["startedAtMs"], s["finishedAtMs"]) == (
            "dependency_not_succeeded", None, None, None, OBS)
    assert res["terminalStatus"] == "failed"


@pytest.mark.parametrize("blocking", BLOCKING_STEP)
def test_every_blocking_status_dooms_dependents(blocking: str) -> None:
    assert targets(resolve_frontier(snap(CHAIN, {"a": "succeeded", "b": blocking}))) == {
        "c": "skipped", "d": "skipped"}


@pytest.mark.parametrize("running_like", ["ready", "running", "waiting_approval", "lost"])
def test_skip_beats_waiting(running_like: str) -> None:
    res = resolve_frontier(snap(DIAMOND, {"a": "cancelled", "b": running_like}))
    assert targets(res) == {"c": "skipped", "d": "skipped"}


@pytest.mark.parametrize("unfinished", ["ready", "running", "waiting_approval", "lost"])
def test_unfinished_needs_wait(unfinished: str) -> None:
    res = resolve_frontier(snap(CHAIN, {"a": unfinished}))
    assert res["stepMutations"] == [] and res["terminalStatus"] is None and res["terminalTransition"] is None


def test_decisions_read_snapshot_not_projection() -> None:
    res = resolve_frontier(snap(CHAIN, {"a": "succeeded"}))
    assert targets(res) == {"b": "ready"}  # c stays pending although b is projected ready


def test_skip_through_pending_chain_but_not_through_ready() -> None:
    plan = make_plan({"a": [], "b": ["a"], "c": ["b"], "x": [], "y": ["x"]})
    res = resolve_frontier(snap(plan, {"a": "timed_out", "x": "ready"}))
    assert targets(res) == {"b": "skipped", "c": "skipped"}


def test_mutation_ids_and_events() -> None:
    res = resolve_frontier(snap(DIAMOND, {"a": "succeeded", "b": "failed"}))
    pd = DIAMOND["planDigest"]
    for m in res["stepMutations"]:
        s = m["stepRun"]
        h = id_hash(DOMAIN_FRONTIER_ID, pd, s["id"], s["version"] - 1, s["status"])
        assert m["mutationId"] == s["lastMutationId"] == "workflow-frontier:" + h
        e = m["event"]
        assert e["id"] == e["dedupeKey"] == "wff:" + h[:32]
        assert (e["type"], e["actorType"], e["createdAtMs"]) == (f"step.{s['status']}", "reconciler", OBS)
        assert "actorId" not in e and "attemptId" not in e and e["stepRunId"] == s["id"]


# ==================================================================================================
# counters and sequence arithmetic
def test_counters_follow_run_version_and_sequence_separately() -> None:
    plan = make_plan({"a": [], "b": ["a"], "c": ["a"], "d": ["b"]})
    run = make_run(plan, version=10, event_sequence=20)
    res = resolve_frontier(snap(plan, {"a": "failed"}, run=run))
    ms = res["stepMutations"]
    assert [m["stepRun"]["stepKey"] for m in ms] == ["b", "c", "d"]  # canonical order
    assert [(m["expectedRunVersion"], m["expectedRunEventSequence"], m["event"]["sequence"]) for m in ms] == [
        (10, 20, 21), (11, 21, 22), (12, 22, 23)]
    tt = res["terminalTransition"]
    assert (res["expectedRunVersion"], res["expectedRunEventSequence"]) == (10, 20)
    assert (tt["expectedRunVersion"], tt["expectedRunEventSequence"], tt["event"]["sequence"]) == (13, 23, 24)
    t = id_hash(DOMAIN_FRONTIER_ID, plan["planDigest"], "terminal", 13, "failed")
    assert tt["event"]["id"] == "wft:" + t[:32]


def test_step_version_in_identifier_is_version_before() -> None:
    plan = make_plan({"a": [], "b": ["a"]})
    steps = [step_run_for(plan, "a", "succeeded"), step_run_for(plan, "b", "pending", version=1)]
    res = resolve_frontier({"plan": plan, "run": make_run(plan), "stepRuns": steps, "observedAtMs": OBS})
    h = id_hash(DOMAIN_FRONTIER_ID, plan["planDigest"], "sr-b", 1, "ready")
    assert res["stepMutations"][0]["mutationId"] == "workflow-frontier:" + h


# ==================================================================================================
# §4.4 outputs
def test_ready_ids_include_already_ready_in_canonical_order() -> None:
    plan = make_plan({"z": [], "m": [], "a": ["m"], "b": ["z"]})
    res = resolve_frontier(snap(plan, {"z": "ready", "m": "succeeded", "a": "pending", "b": "pending"}))
    assert res["readyStepRunIds"] == ["sr-a", "sr-z"]


def test_resolution_object_shape() -> None:
    plan = demo_plan()
    res = resolve_frontier(snap(plan, {"fetch": "ready"}))
    assert list(res) == ["schema", "runId", "planDigest", "expectedRunVersion", "expectedRunEventSequence",
                         "stepMutations", "readyStepRunIds", "terminalStatus", "terminalTransition", "observedAtMs"]
    assert (res["schema"], res["runId"], res["planDigest"], res["observedAtMs"]) == (
        SCHEMA_FRONTIER, "run-0001", plan["planDigest"], OBS)
    assert res["readyStepRunIds"] == ["sr-fetch"] and res["stepMutations"] == []


PLAN3 = make_plan({"a": [], "b": [], "c": []})
COMBOS = list(itertools.product(TERMINAL_STEP, repeat=3))


def test_agg_every_terminal_combination() -> None:
    errors = {"succeeded": None, "failed": "workflow_step_failed", "timed_out": "workflow_step_timed_out",
              "cancelled": "workflow_step_cancelled"}
    for combo in COMBOS:
        res = resolve_frontier(snap(PLAN3, dict(zip("abc", combo, strict=True))))
        want = agg(list(combo))
        assert want is not None and res["terminalStatus"] == want, combo
        tt = res["terminalTransition"]
        assert (tt["status"], tt["errorCode"], tt["finishedAtMs"]) == (want, errors[want], OBS), combo
        assert res["readyStepRunIds"] == []


@pytest.mark.parametrize("open_status", ["pending", "ready", "waiting_approval", "running", "lost"])
def test_agg_none_while_open(open_status: str) -> None:
    plan = make_plan({"a": [], "b": [], "c": []})
    res = resolve_frontier(snap(plan, {"a": "succeeded", "b": "failed", "c": open_status}))
    assert res["terminalStatus"] is None and res["terminalTransition"] is None


def test_terminal_transition_exact() -> None:
    plan = demo_plan()
    run = make_run(plan, version=7, event_sequence=7)
    res = resolve_frontier(snap(plan, {"fetch": "failed"}, run=run))
    assert targets(res) == {"report": "skipped"}
    t = id_hash(DOMAIN_FRONTIER_ID, plan["planDigest"], "terminal", 8, "failed")
    assert res["terminalTransition"] == {
        "expectedRunVersion": 8, "expectedRunEventSequence": 8, "status": "failed", "finishedAtMs": OBS,
        "errorCode": "workflow_step_failed",
        "event": {"id": "wft:" + t[:32], "runId": "run-0001", "sequence": 9, "type": "workflow.failed",
                  "dedupeKey": "wft:" + t[:32], "actorType": "reconciler",
                  "payload": {"planDigest": plan["planDigest"], "workflowId": "nightly", "stepCount": 2,
                              "status": "failed"},
                  "createdAtMs": OBS},
    }
    assert list(res["terminalTransition"]["event"]) == ["id", "runId", "sequence", "type", "dedupeKey", "actorType",
                                                        "payload", "createdAtMs"]


# ==================================================================================================
# §4.2 validation, each rule failing closed
def test_rule1_snapshot_object() -> None:
    bad: object
    for bad in ([], None, "x", 1):
        raises("Invalid", F_INVALID, resolve_frontier, bad)


def test_rule2_plan_code() -> None:
    s = snap(demo_plan(), {})
    raises("Invalid", PLAN_INVALID, resolve_frontier, {**s, "plan": {**s["plan"], "planDigest": D("0")}})
    # plan is checked before run, observedAtMs and stepRuns
    raises("Invalid", PLAN_INVALID, resolve_frontier,
           {**s, "plan": {**s["plan"], "planId": ""}, "run": [], "observedAtMs": -1, "stepRuns": None})


def test_rule2_plan_checked_before_missing_keys() -> None:
    s = snap(demo_plan(), {})
    bad_plan = {**s["plan"], "planDigest": D("0")}
    raises("Invalid", PLAN_INVALID, resolve_frontier, {"plan": bad_plan, "stepRuns": [], "observedAtMs": 0})
    raises("Invalid", PLAN_INVALID, resolve_frontier, {k: v for k, v in s.items() if k != "plan"})


RUN_CASES: dict[str, Any] = {
    "id": ("id", "run-0002"), "projectId": ("projectId", "proj-2"), "taskId": ("taskId", "other"),
    "taskRevision": ("taskRevision", D("9")), "triggerType": ("triggerType", "manual"),
    "executionOrigin": ("executionOrigin", "manual"), "executionOwner": ("executionOwner", "legacy"),
    "requestId": ("requestId", "plan-0002"), "idempotencyKey": ("idempotencyKey", "x"),
    "status succeeded": ("status", "succeeded"), "status created": ("status", "created"),
    "intent": ("cancelRequestedAtMs", 5000), "intent null": ("cancelRequestedAtMs", None),
    "version negative": ("version", -1), "version bool": ("version", True), "version float": ("version", 3.0),
    "eventSequence string": ("eventSequence", "3"), "version null": ("version", None),
}


@pytest.mark.parametrize("case", RUN_CASES)
def test_rule3_run(case: str) -> None:
    key, value = RUN_CASES[case]
    s = snap(demo_plan(), {})
    raises("Invalid", F_INVALID, resolve_frontier, {**s, "run": {**s["run"], key: value}})


def test_rule3_run_missing_and_not_object() -> None:
    s = snap(demo_plan(), {})
    for key in ("id", "status", "version", "eventSequence", "triggerType"):
        raises("Invalid", F_INVALID, resolve_frontier, {**s, "run": {k: v for k, v in s["run"].items() if k != key}})
    raises("Invalid", F_INVALID, resolve_frontier, {**s, "run": [s["run"]]})


def test_rule3_other_run_keys_not_checked() -> None:
    s = snap(demo_plan(), {"fetch": "ready"})
    run = {k: v for k, v in s["run"].items() if k not in ("taskSnapshotRef", "priority", "createdAtMs")}
    run |= {"version": 0, "eventSequence": 99, "extra": "ignored"}
    res = resolve_frontier({**s, "run": run, "extra": "ignored too"})
    assert res["expectedRunVersion"] == 0 and res["expectedRunEventSequence"] == 99


@pytest.mark.parametrize("obs", [-1, True, 5000.0, "5000", None])
def test_rule4_observed_at(obs: Any) -> None:
    raises("Invalid", F_INVALID, resolve_frontier, {**snap(demo_plan(), {}), "observedAtMs": obs})


def _step_case(plan: Record, name: str) -> Any:
    steps = step_runs_for(plan, {"fetch": "ready"})
    f = steps[0]
    cases = {
        "not array": tuple(steps),
        "too few": steps[:1],
        "too many": [*steps, steps[0]],
        "duplicate step": [steps[0], steps[0]],
        "does not normalize": [{**f, "stepRunDigest": D("0")}, steps[1]],
        "unknown stepKey": [seal_step_run({**f, "stepKey": "other"}), steps[1]],
        "id mismatch": [seal_step_run({**f, "id": "sr-other"}), steps[1]],
        "runId mismatch": [seal_step_run({**f, "runId": "run-0002"}), steps[1]],
        "parent set": [seal_step_run({**f, "parentStepRunId": "sr-x"}), steps[1]],
        "kind tool": [seal_step_run({**f, "kind": "tool"}), steps[1]],
        "definitionRef": [seal_step_run({**f, "definitionRef": "plugin-package:x"}), steps[1]],
        "definitionDigest": [seal_step_run({**f, "definitionDigest": D("f")}), steps[1]],
        "required false": [seal_step_run({**f, "required": False}), steps[1]],
        "updated after observed": [step_run_for(plan, "fetch", "ready", t=OBS + 1), steps[1]],
    }
    return cases[name]


STEP_CASE_NAMES = ["not array", "too few", "too many", "duplicate step", "does not normalize", "unknown stepKey",
                   "id mismatch", "runId mismatch", "parent set", "kind tool", "definitionRef", "definitionDigest",
                   "required false", "updated after observed"]


@pytest.mark.parametrize("case", STEP_CASE_NAMES)
def test_rules5_and_6_step_runs(case: str) -> None:
    plan = demo_plan()
    s = snap(plan, {})
    err = raises("Invalid", F_INVALID, resolve_frontier, {**s, "stepRuns": _step_case(plan, case)})
    assert err.code != STEP_RUN_INVALID


def test_rule5_input_order_irrelevant_and_rule6_equality_allowed() -> None:
    plan = DIAMOND
    s = snap(plan, {"a": "succeeded", "b": "succeeded"}, t=OBS)
    res = resolve_frontier(s)
    assert resolve_frontier({**s, "stepRuns": list(reversed(s["stepRuns"]))}) == res
    assert targets(res) == {"c": "ready"}


def test_step_run_invalid_only_from_counter_overflow() -> None:
    plan = demo_plan()
    s = snap(plan, {"fetch": "succeeded"}, run=make_run(plan, version=2147483648, event_sequence=5))
    raises("Invalid", STEP_RUN_INVALID, resolve_frontier, s)
    # without a mutation the counters are only read
    s = snap(plan, {"fetch": "running"}, run=make_run(plan, version=2147483648, event_sequence=2147483648))
    assert resolve_frontier(s)["stepMutations"] == []


# ==================================================================================================
# Property tests: rules, exclusivity, determinism and §5 candidacy on random DAG states
@st.composite
def dag_states(draw: Any) -> tuple[Record, dict[str, str]]:
    n = draw(st.integers(1, 6))
    keys = [f"s{i}" for i in range(n)]
    dag = {k: sorted(draw(st.sets(st.sampled_from(keys[:i]))) if i else []) for i, k in enumerate(keys)}
    statuses = {k: draw(st.sampled_from(STEP_STATUSES)) for k in keys}
    return make_plan(dag), statuses


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(dag_states())
def test_property_resolution_matches_spec_rules(case: tuple[Record, dict[str, str]]) -> None:
    plan, statuses = case
    s = snap(plan, statuses)
    res = resolve_frontier(s)
    assert targets(res) == oracle(plan, statuses)
    needs = {p["stepKey"]: p["needs"] for p in plan["steps"]}
    for k, target in targets(res).items():
        if target == "ready":  # exclusivity: no need is blocking or pending
            assert all(statuses[d] == "succeeded" for d in needs[k])
    projected = {**statuses, **targets(res)}
    assert res["terminalStatus"] == agg(list(projected.values()))
    assert res["readyStepRunIds"] == [f"sr-{k}" for k in sorted(projected) if projected[k] == "ready"]
    writes = bool(res["stepMutations"]) or res["terminalTransition"] is not None
    assert is_frontier_candidate(s["run"], plan, statuses) == writes
    assert resolve_frontier(copy.deepcopy(s)) == res  # deterministic


def test_candidacy_refuses_intent_and_terminal_runs() -> None:
    plan = demo_plan()
    statuses = {"fetch": "succeeded", "report": "pending"}
    assert is_frontier_candidate(make_run(plan), plan, statuses)
    assert not is_frontier_candidate(make_run(plan, cancelRequestedAtMs=1, cancelReason="user"), plan, statuses)
    done = {"fetch": "succeeded", "report": "succeeded"}
    assert is_frontier_candidate(make_run(plan), plan, done)
    assert not is_frontier_candidate(make_run(plan, status="succeeded", finishedAtMs=9), plan, done)


def test_candidacy_examples_from_spec() -> None:
    plan = CHAIN
    # nearest pending step under a blocking one has a direct blocking need
    assert is_frontier_candidate(make_run(plan), plan, {"a": "failed", "b": "pending", "c": "pending",
                                                        "d": "pending"})
    # only ready/running/lost open work: not a candidate
    for s in ("ready", "running", "lost"):
        assert not is_frontier_candidate(make_run(plan), plan, {"a": s, "b": "pending", "c": "pending",
                                                                "d": "pending"})


# ==================================================================================================
# §6 advance_frontier outcomes through system.apply
RESULT_KEYS = ["status", "runId", "planDigest", "stepMutationCount", "readyStepRunIds", "terminalStatus",
               "runVersion", "runEventSequence", "observedAtMs"]


def test_advance_unchanged() -> None:
    sc = situation("admitted")
    sim = sc.sim
    before = sim.state.snapshot()
    res = sim.do("advance_frontier", 1500, runId="run-0001")
    assert list(res) == RESULT_KEYS
    assert res == {"status": "unchanged", "runId": "run-0001", "planDigest": sc.plan["planDigest"],
                   "stepMutationCount": 0, "readyStepRunIds": ["sr-fetch"], "terminalStatus": None,
                   "runVersion": 3, "runEventSequence": 3, "observedAtMs": 1500}
    assert sim.state.snapshot() == before


def test_advance_advanced_then_terminal_succeeded() -> None:
    sc = situation("admitted")
    sim, plan = sc.sim, sc.plan
    finish_step(sim, "run-0001", plan, "fetch", at=2000)
    v = sim.run()["version"]
    res = sim.do("advance_frontier", 2500, runId="run-0001")
    assert (res["status"], res["stepMutationCount"], res["readyStepRunIds"], res["terminalStatus"]) == (
        "advanced", 1, ["sr-report"], None)
    assert (res["runVersion"], res["runEventSequence"]) == (v + 1, v + 1)
    e = sim.events()[-1]
    assert (e["type"], e["actorType"], e["createdAtMs"], e["payload"]["from"]) == ("step.ready", "reconciler", 2500,
                                                                                    "pending")
    assert sim.step("sr-report")["readyAtMs"] == 2500
    assert sim.state.mutations[sim.step("sr-report")["lastMutationId"]]["committedAtMs"] == 2500
    finish_step(sim, "run-0001", plan, "report", at=3000)
    v = sim.run()["version"]
    res = sim.do("advance_frontier", 3500, runId="run-0001")
    assert (res["status"], res["stepMutationCount"], res["readyStepRunIds"], res["terminalStatus"]) == (
        "terminal", 0, [], "succeeded")
    assert res["runVersion"] == v + 1
    run = sim.run()
    assert (run["status"], run["finishedAtMs"]) == ("succeeded", 3500)
    assert "errorCode" not in run and "errorSummary" not in run
    last = sim.events()[-1]
    assert (last["type"], last["actorType"], last["sequence"]) == ("workflow.succeeded", "reconciler", v + 1)
    assert "actorId" not in last and last["payload"] == {"planDigest": plan["planDigest"], "workflowId": "nightly",
                                                          "stepCount": 2, "status": "succeeded"}
    # settled on replay
    res = sim.do("advance_frontier", 4000, runId="run-0001")
    assert res == {"status": "settled", "runId": "run-0001", "planDigest": plan["planDigest"], "stepMutationCount": 0,
                   "readyStepRunIds": [], "terminalStatus": "succeeded", "runVersion": v + 1,
                   "runEventSequence": v + 1, "observedAtMs": 4000}


def test_advance_skip_and_fail_in_one_pass() -> None:
    sc = situation("admitted")
    sim = sc.sim
    finish_step(sim, "run-0001", sc.plan, "fetch", exit_code=3, at=2000)
    v = sim.run()["version"]
    res = sim.do("advance_frontier", 2100, runId="run-0001")
    assert (res["status"], res["stepMutationCount"], res["readyStepRunIds"], res["terminalStatus"]) == (
        "terminal", 1, [], "failed")
    assert res["runVersion"] == v + 2
    run = sim.run()
    assert (run["status"], run["errorCode"], "errorSummary" in run) == ("failed", "workflow_step_failed", False)
    assert [e["type"] for e in sim.events()[-2:]] == ["step.skipped", "workflow.failed"]
    assert sim.step("sr-report")["resultCode"] == "dependency_not_succeeded"


def test_advance_terminal_timed_out() -> None:
    plan = make_plan({"solo": []})
    sim = Sim(clock=1000)
    sim.do("admit_workflow", plan=plan)
    b = {"runId": "run-0001", "stepRunId": "sr-solo"}
    aid = sim.do("admit_task_attempt", **b, binding=_binding(plan))["attempt"]["id"]
    sim.do("claim_lease", attemptId=aid, workerId="w1", durationMs=10000)
    sim.do("start_attempt", attemptId=aid, workerId="w1", leaseGeneration=1, timeoutMs=100)
    sim.do("fail_start", 1100, attemptId=aid, workerId="w1", leaseGeneration=1)
    res = sim.do("advance_frontier", 1200, runId="run-0001")
    assert (res["status"], res["terminalStatus"]) == ("terminal", "timed_out")
    assert sim.run()["errorCode"] == "workflow_step_timed_out"


def _binding(plan: Record) -> Record:
    return binding_for(plan, plan["steps"][0]["stepKey"])


def test_advance_refuses_intent_running_and_terminal() -> None:
    sc = situation("admitted", cancel="user")
    sim = sc.sim
    sim.refuse("advance_frontier", "Conflict", F_CONFLICT, "cancellation_requested", runId="run-0001")
    sim.do("converge_cancellation", runId="run-0001")
    assert sim.run()["status"] == "cancelled"
    sim.refuse("advance_frontier", "Conflict", F_CONFLICT, "cancellation_requested", runId="run-0001")


def test_advance_argument_missing_and_clock() -> None:
    sc = situation("admitted")
    sim = sc.sim
    for bad in ("r" * 37, 7, None, "run 1"):
        sim.refuse("advance_frontier", "Invalid", F_INVALID, "argument_invalid", runId=bad)
    sim.refuse("advance_frontier", "Conflict", F_CONFLICT, "run_missing", runId="run-0009")
    finish_step(sim, "run-0001", sc.plan, "fetch", at=3000)
    sim.rewind(2999)
    sim.refuse("advance_frontier", "Invalid", F_INVALID, "clock_regression", runId="run-0001")


def test_advance_terminal_drift() -> None:
    sc = situation("admitted")
    sim = sc.sim
    finish_step(sim, "run-0001", sc.plan, "fetch", exit_code=1, at=2000)
    sim.do("advance_frontier", 2000, runId="run-0001")
    sim.put("runs", "run-0001", {**sim.run(), "status": "timed_out", "errorCode": "workflow_step_timed_out"})
    sim.refuse("advance_frontier", "Unavailable", F_UNAVAILABLE, "terminal_drift", runId="run-0001")


def test_advance_step_drift_is_unavailable() -> None:
    sc = situation("admitted")
    sim = sc.sim
    sim.put("step_runs", "sr-report", {**sim.step("sr-report"), "stepRunDigest": D("0")})
    sim.refuse("advance_frontier", "Unavailable", F_UNAVAILABLE, "step_drift", runId="run-0001")


def test_advance_many_runs_random_dags() -> None:
    """Drive random DAGs to completion with random exit codes; INV-28 is asserted after every step."""
    rng = random.Random(7)
    for n in range(6):
        keys = [f"t{i}" for i in range(rng.randint(1, 5))]
        dag = {k: sorted(rng.sample(keys[:i], rng.randint(0, i))) if i else [] for i, k in enumerate(keys)}
        plan = make_plan(dag, run_id=f"run-r{n}", plan_id=f"plan-r{n}")
        sim = Sim(clock=1000)
        sim.do("admit_workflow", plan=plan)
        for _ in range(len(keys) + 1):
            ready = [p["stepKey"] for p in plan["steps"] if sim.step(p["stepRunId"])["status"] == "ready"]
            for k in ready:
                finish_step(sim, plan["runId"], plan, k, exit_code=rng.choice([0, 0, 0, 1]))
            res = sim.do("advance_frontier", runId=plan["runId"])
            if res["status"] in ("terminal", "settled"):
                break
        statuses = [sim.step(p["stepRunId"])["status"] for p in plan["steps"]]
        assert sim.run(plan["runId"])["status"] == agg(statuses)


def test_plan_arrays_must_be_lists_regardless_of_call_history() -> None:
    plan = make_plan({"a": [], "b": ["a"]}, plan_id="plan-memo")
    good = snap(plan, {"a": "succeeded"})
    bad = copy.deepcopy(good)
    bad["plan"]["steps"][1]["needs"] = tuple(bad["plan"]["steps"][1]["needs"])
    raises("Invalid", PLAN_INVALID, resolve_frontier, bad)  # cold: rejected
    resolve_frontier(good)
    raises("Invalid", PLAN_INVALID, resolve_frontier, bad)  # warm: must still be rejected
