"""cancellation.md §2–§8 and commands.md §4.15–§4.18: resolve_cancellation (validation, reason
mapping, decision tables, processing order, ids, counters), request_cancel, converge_cancellation
and converge_cancellation_page (paging, cursor, hasMore, outcomes, bounds)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
from model_fixtures import (
    CANCEL_REASONS,
    CANCEL_REQUEST,
    CANCELLATION,
    DEMO_ATTEMPT_ID,
    DOMAIN_CANCEL_REQUEST_ID,
    DOMAIN_CANCELLATION_ID,
    LEASE_MS,
    PAGE_INVALID,
    PAGE_UNAVAILABLE,
    SCHEMA_CANCELLATION,
    STEP_STATUSES,
    TEXT,
    D,
    Record,
    Sim,
    binding_for,
    cancelling_run,
    finish_step,
    id_hash,
    make_attempt,
    make_plan,
    make_receipt,
    raises,
    reversed_keys,
    seal_step_run,
    seal_task_receipt,
    situation,
    step_run_for,
)
from qlwf.model.cancellation import check_page_result, page_outcome, resolve_cancellation

C_INVALID, C_CONFLICT, C_UNAVAILABLE = CANCELLATION
Q_INVALID, Q_CONFLICT, Q_UNAVAILABLE = CANCEL_REQUEST
PLAN = make_plan({"a": [], "b": [], "c": [], "d": ["a"]})
AT = 5000  # cancelRequestedAtMs
OBS = 7000
TARGET = {r: ("timed_out", "EXECUTION_TIMED_OUT") if r == "timeout" else ("cancelled", "EXECUTION_CANCELLED")
          for r in CANCEL_REASONS}


def C(kind: str, target: str, epoch: int, run_id: str = "run-0001", at: int = AT) -> str:
    return id_hash(DOMAIN_CANCELLATION_ID, run_id, at, kind, target, epoch)[:32]


def steps(statuses: dict[str, str]) -> list[Record]:
    return [step_run_for(PLAN, k, statuses.get(k, "succeeded"), t=1500) for k in ("a", "b", "c", "d")]


def claimed_entry(key: str, lease_status: str | None = None, status: str = "claimed",
                  step: Record | None = None) -> tuple[Record, Record]:
    """(ready StepRun, active entry) for an attempt of `key` at the StepRun's current epoch."""
    s = step or step_run_for(PLAN, key, "ready", t=1500)
    r = make_receipt(PLAN, s, admitted_at=2000, run_version=6)
    extra: Record = {}
    if lease_status in ("leased", "completed"):
        extra = {"workerId": "w1", "leaseGeneration": 1, "leaseVersion": 0, "leaseExpiresAtMs": 9000}
    return s, {"admission": r, "attempt": make_attempt(r, status, **extra), "leaseStatus": lease_status}


def running_entry(key: str, lease_status: str | None = "leased") -> tuple[Record, Record]:
    ready = step_run_for(PLAN, key, "ready", t=1500)
    r = make_receipt(PLAN, ready, admitted_at=2000, run_version=6)
    running = seal_step_run({**ready, "status": "running", "version": ready["version"] + 1, "attemptCount": 1,
                             "startedAtMs": 3000, "updatedAtMs": 3000, "lastMutationId": "m-running"})
    a = make_attempt(r, "running", workerId="w1", leaseGeneration=1, leaseVersion=0, leaseExpiresAtMs=9000,
                     startedAtMs=3000)
    return running, {"admission": r, "attempt": a, "leaseStatus": lease_status}


def snapshot(step_runs: list[Record], entries: Sequence[Record] = (), reason: str = "user", **run_over: Any) -> Record:
    run = cancelling_run(PLAN, reason, AT, version=10)
    run.update(run_over)
    return {"run": run, "stepRuns": list(step_runs), "activeTaskAttempts": list(entries), "observedAtMs": OBS}


def with_step(statuses: dict[str, str], replacement: Record) -> list[Record]:
    return [replacement if s["id"] == replacement["id"] else s for s in steps(statuses)]


# ==================================================================================================
# §5 attempt table, every row
ATTEMPT_ROWS = [("claimed", None, "settle"), ("claimed", "released", "settle"), ("claimed", "completed", "settle"),
                ("claimed", "leased", "blocked"),
                *[(a, ls, "blocked") for a in ("starting", "running") for ls in (None, "leased", "released",
                                                                                  "completed")]]


@pytest.mark.parametrize(("status", "lease_status", "decision"), ATTEMPT_ROWS)
def test_5_attempt_table(status: str, lease_status: str | None, decision: str) -> None:
    if status == "running":
        step, entry = running_entry("a", lease_status)
    else:
        step, entry = claimed_entry("a", lease_status, status)
    res = resolve_cancellation(snapshot(with_step({}, step), [entry]))
    aid = entry["attempt"]["id"]
    if decision == "settle":
        assert [t["attempt"]["id"] for t in res["attemptTransitions"]] == [aid]
        assert res["blockedAttemptIds"] == [] and res["blockedStepRunIds"] == []
        assert [m["stepRun"]["id"] for m in res["stepMutations"]] == ["sr-a"]
        assert res["terminalTransition"]["status"] == "cancelled"
    else:
        assert res["attemptTransitions"] == [] and res["stepMutations"] == []
        assert (res["blockedAttemptIds"], res["blockedStepRunIds"]) == ([aid], ["sr-a"])
        assert res["terminalTransition"] is None and res["run"]["status"] == "running"


# ==================================================================================================
# §5 StepRun table (no attempts) and §4 reason mapping, every row
@pytest.mark.parametrize("reason", ["user", "timeout"])
@pytest.mark.parametrize("status", STEP_STATUSES)
def test_5_step_table(status: str, reason: str) -> None:
    res = resolve_cancellation(snapshot(steps({"a": status}), reason=reason))
    muts = {m["stepRun"]["id"]: m["stepRun"] for m in res["stepMutations"]}
    if status in ("succeeded", "failed", "skipped", "cancelled", "timed_out"):
        assert muts == {} and res["terminalTransition"] is not None
    elif status == "running":
        assert muts == {} and res["blockedStepRunIds"] == ["sr-a"] and res["blockedAttemptIds"] == []
        assert res["terminalTransition"] is None
    else:
        timed = reason == "timeout" and status in ("ready", "waiting_approval")
        s = muts["sr-a"]
        want = (("timed_out", "workflow_timed_out", TEXT["EXECUTION_TIMED_OUT"]) if timed
                else ("cancelled", "workflow_cancelled", None))
        assert (s["status"], s["resultCode"], s["errorSummary"], s["finishedAtMs"]) == (*want, OBS)
        assert res["terminalTransition"]["status"] == TARGET[reason][0]


@pytest.mark.parametrize("reason", CANCEL_REASONS)
def test_4_reason_mapping(reason: str) -> None:
    step, entry = claimed_entry("a")
    res = resolve_cancellation(snapshot(with_step({"b": "ready"}, step), [entry], reason=reason))
    status, code = TARGET[reason]
    a = res["attemptTransitions"][0]["attempt"]
    assert (a["status"], a["errorCode"], a["errorSummary"], a["finishedAtMs"]) == (status, code, TEXT[code], OBS)
    tt = res["terminalTransition"]
    assert (tt["status"], tt["errorCode"], tt["errorSummary"], tt["finishedAtMs"]) == (status, code, TEXT[code], OBS)
    run = res["run"]
    assert (run["status"], run["errorCode"], run["errorSummary"], run["finishedAtMs"]) == (status, code, TEXT[code],
                                                                                           OBS)
    ready_target = "timed_out" if reason == "timeout" else "cancelled"
    assert {m["stepRun"]["id"]: m["stepRun"]["status"] for m in res["stepMutations"]} == {
        "sr-a": ready_target, "sr-b": ready_target}


def test_5_parent_ends_cancelled_even_if_all_succeeded() -> None:
    res = resolve_cancellation(snapshot(steps({})))
    assert res["stepMutations"] == [] and res["terminalTransition"]["status"] == "cancelled"


# ==================================================================================================
# §6 processing order, identifiers, counters, result
def test_6_order_ids_counters_and_result() -> None:
    s_a, e_a = claimed_entry("a", "released")
    s_b, e_b = claimed_entry("b", None)
    s_c, e_c = claimed_entry("c", "leased")  # blocked
    first, second = sorted([e_a, e_b], key=lambda e: e["attempt"]["id"])
    run_in = reversed_keys(cancelling_run(PLAN, "user", AT, version=10, event_sequence=30))
    snap = {"run": run_in, "stepRuns": [step_run_for(PLAN, "d", "pending"), s_c, s_b, s_a],
            "activeTaskAttempts": [e_c, e_b, e_a], "observedAtMs": OBS}
    before = copy.deepcopy(snap)
    res = resolve_cancellation(snap)
    assert snap == before
    assert list(res) == ["schema", "expectedRunVersion", "expectedRunEventSequence", "run", "attemptTransitions",
                         "stepMutations", "blockedAttemptIds", "blockedStepRunIds", "terminalTransition",
                         "observedAtMs"]
    assert (res["schema"], res["expectedRunVersion"], res["expectedRunEventSequence"], res["observedAtMs"]) == (
        SCHEMA_CANCELLATION, 10, 30, OBS)
    # attempt phase: ascending attempt id; V/S advance separately
    ts = res["attemptTransitions"]
    assert [t["attempt"]["id"] for t in ts] == [first["attempt"]["id"], second["attempt"]["id"]]
    for j, (t, e) in enumerate(zip(ts, (first, second), strict=True)):
        a_in = e["attempt"]
        assert t["previousStatus"] == "claimed"
        assert list(t["attempt"]) == [*a_in, "finishedAtMs", "errorCode", "errorSummary"]
        assert t["attempt"]["callbackSequence"] == a_in["callbackSequence"]
        d = C("attempt", a_in["id"], a_in["callbackSequence"])
        assert t["event"] == {
            "id": f"wca:{d}", "runId": "run-0001", "sequence": 31 + j, "type": "workflow.task_attempt.cancelled",
            "dedupeKey": f"wca:{d}", "actorType": "reconciler", "actorId": "runtime:cancellation",
            "attemptId": a_in["id"], "stepRunId": a_in["stepRunId"],
            "payload": {"execution_scope": "workflow_task", "attempt_id": a_in["id"],
                        "step_run_id": a_in["stepRunId"], "from_status": "claimed", "to_status": "cancelled",
                        "cancel_reason": "user", "cancel_requested_at_ms": AT, "error_code": "EXECUTION_CANCELLED",
                        "version": 11 + j},
            "createdAtMs": OBS}
    # step phase: ascending stepKey; blocked c untouched
    ms = res["stepMutations"]
    assert [m["stepRun"]["id"] for m in ms] == ["sr-a", "sr-b", "sr-d"]
    for j, m in enumerate(ms):
        prev = {"sr-a": s_a, "sr-b": s_b, "sr-d": step_run_for(PLAN, "d", "pending")}[m["stepRun"]["id"]]
        d = C("step", prev["id"], prev["version"])
        assert (m["mutationId"], m["event"]["id"], m["event"]["dedupeKey"]) == (f"wcm:{d}", f"wcs:{d}", f"wcs:{d}")
        assert (m["expectedRunVersion"], m["expectedRunEventSequence"], m["event"]["sequence"]) == (12 + j, 32 + j,
                                                                                                     33 + j)
        assert (m["event"]["actorType"], m["event"]["actorId"], m["event"]["type"]) == (
            "reconciler", "runtime:cancellation", "step.cancelled")
        assert "attemptId" not in m["event"]
    assert res["blockedAttemptIds"] == [e_c["attempt"]["id"]] and res["blockedStepRunIds"] == ["sr-c"]
    assert res["terminalTransition"] is None
    assert list(res["run"]) == list(run_in)
    assert res["run"] == {**run_in, "version": 15, "eventSequence": 35}


def test_6_terminal_phase() -> None:
    s_a, e_a = claimed_entry("a")
    run_in = cancelling_run(PLAN, "timeout", AT, version=10, event_sequence=30)
    res = resolve_cancellation({"run": run_in, "stepRuns": with_step({"b": "waiting_approval", "c": "lost"}, s_a),
                                "activeTaskAttempts": [e_a], "observedAtMs": OBS})
    assert [m["stepRun"]["status"] for m in res["stepMutations"]] == ["timed_out", "timed_out", "cancelled"]
    d = C("run", "run-0001", 14)
    tt = res["terminalTransition"]
    assert tt == {
        "expectedRunVersion": 14, "expectedRunEventSequence": 34, "status": "timed_out", "finishedAtMs": OBS,
        "errorCode": "EXECUTION_TIMED_OUT", "errorSummary": TEXT["EXECUTION_TIMED_OUT"],
        "event": {"id": f"wcr:{d}", "runId": "run-0001", "sequence": 35, "type": "workflow.timed_out",
                  "dedupeKey": f"wcr:{d}", "actorType": "reconciler", "actorId": "runtime:cancellation",
                  "payload": {"from_status": "running", "to_status": "timed_out", "step_count": 4,
                              "cancel_reason": "timeout", "cancel_requested_at_ms": AT,
                              "error_code": "EXECUTION_TIMED_OUT", "version": 15},
                  "createdAtMs": OBS}}
    assert list(tt) == ["expectedRunVersion", "expectedRunEventSequence", "status", "finishedAtMs", "errorCode",
                        "errorSummary", "event"]
    assert list(res["run"]) == [*run_in, "finishedAtMs", "errorCode", "errorSummary"]
    assert res["run"] == {**run_in, "status": "timed_out", "version": 15, "eventSequence": 35, "finishedAtMs": OBS,
                          "errorCode": "EXECUTION_TIMED_OUT", "errorSummary": TEXT["EXECUTION_TIMED_OUT"]}
    assert res["run"]["cancelRequestedAtMs"] == AT  # intent kept


def test_6_input_order_irrelevant() -> None:
    s_a, e_a = claimed_entry("a")
    s_b, e_b = claimed_entry("b", "released")
    base = snapshot([s_a, s_b, *steps({"c": "pending"})[2:]], [e_a, e_b])
    shuffled = {**base, "stepRuns": list(reversed(base["stepRuns"])),
                "activeTaskAttempts": list(reversed(base["activeTaskAttempts"]))}
    assert resolve_cancellation(shuffled) == resolve_cancellation(base)


@pytest.mark.parametrize("over", [{"version": 2147483647}, {"eventSequence": 2147483647}])
def test_6_counter_ceiling(over: Record) -> None:
    raises("Invalid", C_INVALID, resolve_cancellation, snapshot(steps({"a": "ready"}), **over))
    raises("Invalid", C_INVALID, resolve_cancellation, snapshot(steps({}), **over))  # the terminal event


def test_6_counter_ceiling_not_reached_without_writes() -> None:
    res = resolve_cancellation(snapshot(steps({"a": "running"}), version=2147483647, eventSequence=2147483647))
    assert res["blockedStepRunIds"] == ["sr-a"] and res["run"]["version"] == 2147483647


# ==================================================================================================
# §3 validation checks
def _run(**over: Any) -> Record:
    return {**cancelling_run(PLAN, "user", AT, version=10), **over}


def _no(key: str) -> Record:
    return {k: v for k, v in cancelling_run(PLAN, "user", AT, version=10).items() if k != key}


VALIDATION: dict[str, dict[str, Any]] = {
    "run triggerType": {"run": _run(triggerType="manual")},
    "run origin": {"run": _run(executionOrigin="boot")},
    "run owner": {"run": _run(executionOwner="legacy")},
    "run status": {"run": _run(status="cancelled")},
    "run without intent": {"run": _no("cancelRequestedAtMs")},
    "run without reason": {"run": _no("cancelReason")},
    "run reason unknown": {"run": _run(cancelReason="abort")},
    "run reason list": {"run": _run(cancelReason=["user"])},
    "run version negative": {"run": _run(version=-1)},
    "run version 2^31": {"run": _run(version=2147483648)},
    "run version bool": {"run": _run(version=True)},
    "run sequence float": {"run": _run(eventSequence=10.0)},
    "run requested negative": {"run": _run(cancelRequestedAtMs=-1)},
    "run requested string": {"run": _run(cancelRequestedAtMs="5000")},
    "run not object": {"run": [1]},
    "observed before intent": {"observedAtMs": AT - 1},
    "observed bool": {"observedAtMs": True},
    "observed negative": {"observedAtMs": -1},
    "stepRuns empty": {"stepRuns": []},
    "stepRuns not array": {"stepRuns": "x"},
    "stepRuns 129": {"stepRuns": [step_run_for(PLAN, "a", "pending")] * 129},
    "active not array": {"activeTaskAttempts": None},
    "step does not normalize": {"stepRuns": [{**step_run_for(PLAN, "a", "pending"), "version": 0}]},
    "step foreign run": {"stepRuns": [seal_step_run({**step_run_for(PLAN, "a", "pending"), "runId": "run-0002"})]},
    "step duplicated": {"stepRuns": [step_run_for(PLAN, "a", "pending")] * 2},
    "step updated after observed": {"stepRuns": [step_run_for(PLAN, "a", "ready", t=OBS + 1)]},
}


@pytest.mark.parametrize("case", VALIDATION)
def test_3_validation(case: str) -> None:
    raises("Invalid", C_INVALID, resolve_cancellation, {**snapshot(steps({})), **VALIDATION[case]})


def test_3_snapshot_object() -> None:
    bad: object
    for bad in ([], None, "x"):
        raises("Invalid", C_INVALID, resolve_cancellation, bad)


def _entry_case(name: str) -> tuple[list[Record], list[Any]]:
    s_a, e = claimed_entry("a")
    a, r = e["attempt"], e["admission"]
    run_step, run_e = running_entry("a")
    sts = with_step({}, s_a)
    cases: dict[str, tuple[list[Record], list[Any]]] = {
        "entry extra key": (sts, [{**e, "x": 1}]),
        "entry missing key": (sts, [{"admission": r, "attempt": a}]),
        "entry not object": (sts, [[r, a, None]]),
        "admission invalid": (sts, [{**e, "admission": {**r, "receiptDigest": D("0")}}]),
        "attempt terminal": (sts, [{**e, "attempt": {**a, "status": "lost"}}]),
        "attempt status list": (sts, [{**e, "attempt": {**a, "status": ["claimed"]}}]),
        "attempt not object": (sts, [{**e, "attempt": None}]),
        "attempt id": (sts, [{**e, "attempt": {**a, "id": "wta:x"}}]),
        "attempt runId": (sts, [{**e, "attempt": {**a, "runId": "run-0002"}}]),
        "attempt stepRunId": (sts, [{**e, "attempt": {**a, "stepRunId": "sr-b"}}]),
        "attempt number": (sts, [{**e, "attempt": {**a, "attempt": 2}}]),
        "attempt executor": (sts, [{**e, "attempt": {**a, "executorType": "local_process"}}]),
        "attempt createdAtMs": (sts, [{**e, "attempt": {**a, "createdAtMs": 2001}}]),
        "callbackSequence bool": (sts, [{**e, "attempt": {**a, "callbackSequence": True}}]),
        "callbackSequence negative": (sts, [{**e, "attempt": {**a, "callbackSequence": -1}}]),
        "leaseStatus unknown": (sts, [{**e, "leaseStatus": "expired"}]),
        "receipt runId": (sts, [{**e, "admission": seal_task_receipt({**r, "runId": "run-0002"}),
                                 "attempt": {**a, "runId": "run-0002"}}]),
        "step missing": (steps({}), [e]),
        "claimed step at another epoch": (with_step({}, seal_step_run({**s_a, "version": 3})), [e]),
        "claimed step not ready": (with_step({}, step_run_for(PLAN, "a", "waiting_approval", t=1500)), [e]),
        "claimed with startedAtMs": (sts, [{**e, "attempt": {**a, "startedAtMs": 2500}}]),
        "starting step running": (with_step({}, run_step), [{**e, "attempt": {**a, "status": "starting"}}]),
        "running step ready": (sts, [{**e, "attempt": {**a, "status": "running", "startedAtMs": 3000,
                                                       "callbackSequence": 1}}]),
        "running without startedAtMs": (with_step({}, run_step), [{**run_e, "attempt": {
            k: v for k, v in run_e["attempt"].items() if k != "startedAtMs"}}]),
        "two entries for one step": (sts, [e, {**e, "attempt": {**a, "id": "wta:zzz"}, "admission": seal_task_receipt(
            {**r, "attemptId": "wta:zzz"})}]),
        "observed before attempt created": (sts, [{**e, "admission": seal_task_receipt({**r, "admittedAtMs": OBS + 1}),
                                                   "attempt": {**a, "createdAtMs": OBS + 1}}]),
    }
    return cases[name]


ENTRY_CASES = ["entry extra key", "entry missing key", "entry not object", "admission invalid", "attempt terminal",
               "attempt not object", "attempt id", "attempt runId", "attempt stepRunId", "attempt number",
               "attempt executor", "attempt createdAtMs", "callbackSequence bool", "callbackSequence negative",
               "leaseStatus unknown", "receipt runId", "step missing", "claimed step at another epoch",
               "claimed step not ready", "claimed with startedAtMs", "starting step running", "running step ready",
               "running without startedAtMs", "two entries for one step", "observed before attempt created"]


@pytest.mark.parametrize("case", ENTRY_CASES)
def test_3_active_entries(case: str) -> None:
    sts, entries = _entry_case(case)
    raises("Invalid", C_INVALID, resolve_cancellation, snapshot(sts, entries))


def test_3_attempt_status_of_wrong_type_fails_closed() -> None:
    sts, entries = _entry_case("attempt status list")
    raises("Invalid", C_INVALID, resolve_cancellation, snapshot(sts, entries))


# ==================================================================================================
# request_cancel (commands.md §4.15)
def test_request_cancel_requested() -> None:
    sc = situation("claimed")
    sim = sc.sim
    res = sim.do("request_cancel", 5000, runId="run-0001", reason="policy", actor={"type": "api_app", "id": "app-1"})
    assert list(res) == ["status", "runId", "cancelRequestedAtMs", "cancelReason", "runVersion"]
    assert res == {"status": "requested", "runId": "run-0001", "cancelRequestedAtMs": 5000, "cancelReason": "policy",
                   "runVersion": 5}
    run = sim.run()
    assert (run["cancelRequestedAtMs"], run["cancelReason"], run["version"], run["status"]) == (5000, "policy", 5,
                                                                                                 "running")
    q = id_hash(DOMAIN_CANCEL_REQUEST_ID, "run-0001", 5000, "policy")[:32]
    assert sim.events()[-1] == {"id": f"wcq:{q}", "runId": "run-0001", "sequence": 5,
                                "type": "workflow.cancel_requested", "dedupeKey": f"wcq:{q}", "actorType": "api_app",
                                "actorId": "app-1",
                                "payload": {"cancel_reason": "policy", "cancel_requested_at_ms": 5000, "version": 5},
                                "createdAtMs": 5000}


def test_request_cancel_existing_before_terminality() -> None:
    sc = situation("admitted")
    sim = sc.sim
    sim.do("request_cancel", 2000, runId="run-0001", reason="user", actor={"type": "user"})
    assert "actorId" not in sim.events()[-1]
    snap = sim.state.snapshot()
    again = sim.do("request_cancel", 3000, runId="run-0001", reason="timeout", actor={"type": "system"})
    assert again == {"status": "existing", "runId": "run-0001", "cancelRequestedAtMs": 2000, "cancelReason": "user",
                     "runVersion": 4}
    assert sim.state.snapshot() == snap
    sim.do("converge_cancellation", runId="run-0001")
    assert sim.run()["status"] == "cancelled"
    res = sim.do("request_cancel", runId="run-0001", reason="shutdown", actor={"type": "user"})
    assert (res["status"], res["cancelReason"], res["runVersion"]) == ("existing", "user", sim.run()["version"])


def test_request_cancel_refusals() -> None:
    sc = situation("admitted")
    sim = sc.sim
    good = {"runId": "run-0001", "reason": "user", "actor": {"type": "user"}}
    for bad in ({"reason": "abort"}, {"reason": None}, {"actor": {"type": "robot"}}, {"actor": {"id": "x"}},
                {"actor": {"type": "user", "id": ""}}, {"actor": {"type": "user", "name": "x"}}, {"actor": "user"},
                {"runId": "r" * 37}):
        sim.refuse("request_cancel", "Invalid", Q_INVALID, "argument_invalid", **{**good, **bad})
    sim.refuse("request_cancel", "Conflict", Q_CONFLICT, "run_missing", **{**good, "runId": "run-0404"})
    finish_step(sim, "run-0001", sc.plan, "fetch", at=2000)
    sim.rewind(1999)
    sim.refuse("request_cancel", "Invalid", Q_INVALID, "clock_regression", **good)


def test_request_cancel_on_terminal_run_without_intent() -> None:
    sc = situation("admitted")
    sim = sc.sim
    finish_step(sim, "run-0001", sc.plan, "fetch", exit_code=1, at=2000)
    sim.do("advance_frontier", runId="run-0001")
    assert sim.run()["status"] == "failed"
    sim.refuse("request_cancel", "Conflict", Q_CONFLICT, "run_terminal", runId="run-0001", reason="user",
               actor={"type": "user"})


# ==================================================================================================
# converge_cancellation (commands.md §4.17)
CONVERGE_KEYS = ["status", "runId", "settledAttempts", "stepMutationCount", "blockedAttemptIds", "blockedStepRunIds",
                 "terminalStatus", "runVersion", "runEventSequence", "observedAtMs"]


def test_converge_terminal_and_settled() -> None:
    sc = situation("claimed", cancel="user")  # intent at 6000, version 5
    sim = sc.sim
    lease_before = sim.lease(DEMO_ATTEMPT_ID)
    res = sim.do("converge_cancellation", 6500, runId="run-0001")
    assert list(res) == CONVERGE_KEYS
    assert res == {"status": "terminal", "runId": "run-0001", "settledAttempts": 1, "stepMutationCount": 2,
                   "blockedAttemptIds": [], "blockedStepRunIds": [], "terminalStatus": "cancelled", "runVersion": 9,
                   "runEventSequence": 9, "observedAtMs": 6500}
    assert [e["type"] for e in sim.events()[5:]] == ["workflow.task_attempt.cancelled", "step.cancelled",
                                                     "step.cancelled", "workflow.cancelled"]
    assert sim.lease(DEMO_ATTEMPT_ID) == lease_before is None
    a = sim.attempt(DEMO_ATTEMPT_ID)
    assert (a["status"], a["errorCode"], a["callbackSequence"]) == ("cancelled", "EXECUTION_CANCELLED", 0)
    run = sim.run()
    assert (run["status"], run["finishedAtMs"], run["errorCode"], run["errorSummary"], run["cancelReason"]) == (
        "cancelled", 6500, "EXECUTION_CANCELLED", TEXT["EXECUTION_CANCELLED"], "user")
    snap = sim.state.snapshot()
    again = sim.do("converge_cancellation", 7000, runId="run-0001")
    assert again == {"status": "settled", "runId": "run-0001", "settledAttempts": 0, "stepMutationCount": 0,
                     "blockedAttemptIds": [], "blockedStepRunIds": [], "terminalStatus": "cancelled", "runVersion": 9,
                     "runEventSequence": 9, "observedAtMs": 7000}
    assert sim.state.snapshot() == snap


@pytest.mark.parametrize("stage", ["starting", "running"])
def test_converge_blocked_by_execution(stage: str) -> None:
    sc = situation(stage, cancel="timeout")
    sim = sc.sim
    v = sim.run()["version"]
    res = sim.do("converge_cancellation", runId="run-0001")
    assert (res["status"], res["settledAttempts"], res["stepMutationCount"], res["terminalStatus"]) == (
        "blocked", 0, 1, None)
    assert (res["blockedAttemptIds"], res["blockedStepRunIds"]) == ([DEMO_ATTEMPT_ID], ["sr-fetch"])
    assert res["runVersion"] == v + 1 and sim.step("sr-report")["status"] == "cancelled"  # pending → cancelled
    assert sim.step("sr-fetch")["status"] in ("ready", "running")
    # the worker completes under intent: mapped to timed_out, then convergence terminalizes
    sim.do("complete_attempt", 8000, exitCode=0, **sc.fence())
    assert sim.attempt(DEMO_ATTEMPT_ID)["status"] == "timed_out"
    assert sim.do("converge_cancellation", runId="run-0001")["terminalStatus"] == "timed_out"


def test_converge_expired_leased_claim_blocks_d7() -> None:
    sc = situation("leased", cancel="user")
    sim = sc.sim
    res = sim.do("converge_cancellation", 3000 + LEASE_MS + 5000, runId="run-0001")
    assert res["status"] == "blocked" and res["blockedAttemptIds"] == [DEMO_ATTEMPT_ID]
    assert sim.attempt(DEMO_ATTEMPT_ID)["status"] == "claimed"


def test_converge_settles_released_claim() -> None:
    sc = situation("leased", cancel="reconcile")
    sim = sc.sim
    sim.do("release_lease", 7000, reason="shutdown", **sc.fence())
    lease_before = sim.lease(DEMO_ATTEMPT_ID)
    res = sim.do("converge_cancellation", runId="run-0001")
    assert (res["status"], res["settledAttempts"]) == ("terminal", 1)
    assert sim.lease(DEMO_ATTEMPT_ID) == lease_before  # convergence never touches a lease


def test_converge_refusals() -> None:
    sc = situation("claimed")
    sim = sc.sim
    sim.refuse("converge_cancellation", "Conflict", C_CONFLICT, "not_cancelling", runId="run-0001")
    sim.refuse("converge_cancellation", "Conflict", C_CONFLICT, "run_missing", runId="run-0002")
    sim.refuse("converge_cancellation", "Invalid", C_INVALID, "argument_invalid", runId="")
    sc = situation("claimed", cancel="user")
    sc.sim.put("receipts", DEMO_ATTEMPT_ID, None)
    sc.sim.refuse("converge_cancellation", "Unavailable", C_UNAVAILABLE, "receipt_drift", runId="run-0001")
    sc = situation("leased", cancel="user")
    sc.sim.put("leases", DEMO_ATTEMPT_ID, {**sc.sim.held_lease(DEMO_ATTEMPT_ID), "workerId": "w9"})
    sc.sim.refuse("converge_cancellation", "Unavailable", C_UNAVAILABLE, "lease_drift", runId="run-0001")
    sc = situation("claimed", cancel="user")
    sc.sim.do("converge_cancellation", runId="run-0001")
    sc.sim.put("runs", "run-0001", {**sc.sim.run(), "status": "timed_out"})
    sc.sim.refuse("converge_cancellation", "Unavailable", C_UNAVAILABLE, "terminal_drift", runId="run-0001")


def test_converge_clock_floor_includes_leases() -> None:
    sc = situation("leased", cancel="user")  # last event at 6000
    sim = sc.sim
    res = sim.do("renew_lease", 8000, durationMs=5000, **sc.fence())  # writes the lease only
    assert res["status"] == "stop_requested"
    sim.rewind(7000)
    sim.refuse("converge_cancellation", "Invalid", C_INVALID, "clock_regression", runId="run-0001")


# ==================================================================================================
# converge_cancellation_page (commands.md §4.18, cancellation.md §8)
def page_world() -> Sim:
    """r1: claimed (settles, terminal); r2: leased (blocked); r3: claimed; r4: no intent; r5: pending only."""
    sim = Sim(clock=1000)
    plans = {n: make_plan({"a": [], "b": ["a"]}, run_id=f"r{n}", plan_id=f"p{n}", prefix=f"r{n}-") for n in range(1, 6)}
    for n, plan in plans.items():
        sim.do("admit_workflow", plan=plan)
        if n in (1, 2, 3):
            aid = sim.do("admit_task_attempt", runId=f"r{n}", stepRunId=f"r{n}-a",
                         binding=binding_for(plan, "a"))["attempt"]["id"]
            if n == 2:
                sim.do("claim_lease", attemptId=aid, workerId="w1", durationMs=600000)
    for n, at in ((1, 2000), (3, 3000), (2, 3000), (5, 4000)):
        sim.do("request_cancel", at, runId=f"r{n}", reason="user", actor={"type": "user"})
    return sim


PAGE_KEYS = ["scanned", "settledRuns", "settledAttempts", "blocked", "hasMore", "next", "outcomes"]
OUTCOME_KEYS = ["runId", "status", "settledAttempts", "stepMutationCount", "terminalStatus", "blockedStepRunIds",
                "error"]


def test_page_sweep_with_cursor() -> None:
    sim = page_world()
    assert [c["runId"] for c in sim.do("cancellation_candidates", limit=10)["candidates"]] == ["r1", "r2", "r3", "r5"]
    page = sim.do("converge_cancellation_page", 5000, limit=2)
    assert list(page) == PAGE_KEYS
    assert (page["scanned"], page["settledRuns"], page["settledAttempts"], page["blocked"], page["hasMore"]) == (
        2, 1, 1, 1, True)
    assert page["next"] == {"cancelRequestedAtMs": 3000, "runId": "r2"}
    o1, o2 = page["outcomes"]
    assert list(o1) == OUTCOME_KEYS
    assert o1 == {"runId": "r1", "status": "terminal", "settledAttempts": 1, "stepMutationCount": 2,
                  "terminalStatus": "cancelled", "blockedStepRunIds": [], "error": None}
    assert o2 == {"runId": "r2", "status": "blocked", "settledAttempts": 0, "stepMutationCount": 1,
                  "terminalStatus": None, "blockedStepRunIds": ["r2-a"], "error": None}
    page = sim.do("converge_cancellation_page", limit=2, after=page["next"])
    assert [(o["runId"], o["status"]) for o in page["outcomes"]] == [("r3", "terminal"), ("r5", "terminal")]
    assert (page["scanned"], page["settledRuns"], page["settledAttempts"], page["blocked"]) == (2, 2, 1, 0)
    assert page["next"] is None and page["hasMore"] is True  # r2 is still cancelling, before the cursor
    page = sim.do("converge_cancellation_page", limit=128)
    assert [o["runId"] for o in page["outcomes"]] == ["r2"] and page["hasMore"] is True and page["next"] is None
    assert sim.run("r4")["status"] == "running" and "cancelRequestedAtMs" not in sim.run("r4")


def test_page_failed_workflow_does_not_stop_the_page() -> None:
    sim = page_world()
    aid = next(a["id"] for a in sim.state.attempts.values() if a["runId"] == "r1")
    sim.put("receipts", aid, None)
    page = sim.do("converge_cancellation_page", 5000, limit=10)
    o = page["outcomes"][0]
    assert o == {"runId": "r1", "status": "failed", "settledAttempts": 0, "stepMutationCount": 0,
                 "terminalStatus": None, "blockedStepRunIds": [],
                 "error": {"class": "Unavailable", "code": C_UNAVAILABLE, "reason": "receipt_drift"}}
    assert [x["status"] for x in page["outcomes"]] == ["failed", "blocked", "terminal", "terminal"]
    assert (page["scanned"], page["settledRuns"], page["blocked"], page["hasMore"], page["next"]) == (4, 2, 2, True,
                                                                                                      None)
    assert sim.run("r1")["status"] == "running" and sim.run("r3")["status"] == "cancelled"


def test_page_empty_and_after_cursor_beyond_end() -> None:
    sim = Sim(clock=1000)
    assert sim.do("converge_cancellation_page", limit=1) == {
        "scanned": 0, "settledRuns": 0, "settledAttempts": 0, "blocked": 0, "hasMore": False, "next": None,
        "outcomes": []}
    sim = page_world()
    page = sim.do("converge_cancellation_page", limit=5, after={"cancelRequestedAtMs": 9999, "runId": "a"})
    assert page["scanned"] == 0 and page["hasMore"] is True


@pytest.mark.parametrize("args", [
    {"limit": 0}, {"limit": 129}, {"limit": True}, {"limit": 1.0}, {}, {"limit": 1, "x": 1},
    {"limit": 1, "after": {"cancelRequestedAtMs": 1}}, {"limit": 1, "after": {"cancelRequestedAtMs": -1, "runId": "r"}},
    {"limit": 1, "after": {"cancelRequestedAtMs": 1, "runId": "r" * 37}},
    {"limit": 1, "after": {"cancelRequestedAtMs": 1, "runId": "r", "x": 1}}, {"limit": 1, "after": None},
])
def test_page_invalid(args: Record) -> None:
    sim = page_world()
    sim.refuse("converge_cancellation_page", "Invalid", PAGE_INVALID, "page_invalid", **args)


def _page(**over: Any) -> Record:
    return {"scanned": 2, "settledRuns": 1, "settledAttempts": 3, "blocked": 1, "hasMore": False, "next": None,
            "outcomes": [], **over}


def test_page_result_bounds() -> None:
    assert check_page_result(2, _page()) == _page()
    assert check_page_result(1, _page(scanned=1, settledRuns=0, settledAttempts=128, blocked=1))["scanned"] == 1
    bad = [_page(scanned=3), _page(scanned=-1), _page(settledRuns=3), _page(settledRuns=-1),
           _page(settledAttempts=257), _page(settledAttempts=-1), _page(blocked=2), _page(blocked=-1),
           _page(hasMore=0), _page(hasMore=None), _page(scanned=True), _page(settledAttempts=1.0)]
    for b in bad:
        raises("Unavailable", PAGE_UNAVAILABLE, check_page_result, 2, b, reason="result_invalid")
    raises("Unavailable", PAGE_UNAVAILABLE, check_page_result, 2, {**_page(), "extra": 1}, reason="result_invalid")
    raises("Unavailable", PAGE_UNAVAILABLE, check_page_result, 2, {k: v for k, v in _page().items() if k != "next"},
           reason="result_invalid")


def test_page_outcome_shapes() -> None:
    for status in ("raced", "locked"):
        assert page_outcome("r1", status) == {"runId": "r1", "status": status, "settledAttempts": 0,
                                              "stepMutationCount": 0, "terminalStatus": None,
                                              "blockedStepRunIds": [], "error": None}


def test_cancellation_candidates_paging() -> None:
    sim = page_world()
    p1 = sim.do("cancellation_candidates", limit=2)
    assert p1 == {"candidates": [{"runId": "r1", "cancelRequestedAtMs": 2000},
                                 {"runId": "r2", "cancelRequestedAtMs": 3000}], "truncated": True,
                  "next": {"cancelRequestedAtMs": 3000, "runId": "r2"}}
    p2 = sim.do("cancellation_candidates", limit=2, after=p1["next"])
    assert p2 == {"candidates": [{"runId": "r3", "cancelRequestedAtMs": 3000},
                                 {"runId": "r5", "cancelRequestedAtMs": 4000}], "truncated": False}
    sim.refuse("cancellation_candidates", "Invalid", C_INVALID, "page_invalid", limit=129)


def test_3_step_run_object_check_does_not_depend_on_call_history() -> None:
    import collections
    s = step_run_for(PLAN, "a", "ready", t=1777)
    odd = with_step({}, collections.OrderedDict(s))
    raises("Invalid", C_INVALID, resolve_cancellation, snapshot(odd))  # cold
    resolve_cancellation(snapshot(with_step({}, s)))
    raises("Invalid", C_INVALID, resolve_cancellation, snapshot(odd))  # warm
