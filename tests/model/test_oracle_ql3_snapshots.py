"""The oracle answers snapshots in the shape ql3 stores them (issue 9 §1, records.md §6.7).

A ql3 RunAttempt is the generic record: it may carry keys outside the model subset
(`workerSessionId`, `pid`, ...), a remote-worker claim has workerId, leaseGeneration and
leaseExpiresAtMs but no leaseVersion, and keys come in any order. Each pure function checks such
an attempt only by its own list (cancellation.md §3 item 8, task-attempts.md §8 item 4) plus "every
key is a key of the generic record". The snapshots here are taken from model states, then reshaped
the way ql3 would store them; the model-shaped snapshot of the same state is the reference answer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from model_fixtures import cancel_input_of
from qlwf.conformance.generate.ql3_shape import copy_problem, ql3_attempt, ql3_input, reversed_keys
from qlwf.model import tables as T
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.invariants import consistent_binding
from qlwf.model.oracle import consult
from qlwf.model.records import GENERIC_ATTEMPT_EXTRA_KEYS
from qlwf.model.steprun import transition_step_run
from qlwf.model.system import WorkflowSystem

from qlwf.gate.checks import load_script

Record = dict[str, Any]
generate = load_script(Path(__file__).resolve().parents[2] / "examples" / "generate.py", "qlwf_examples_generate")
DIAMOND = [("fetch", []), ("left", ["fetch"]), ("right", ["fetch"]), ("report", ["left", "right"])]
APPENDED = ("finishedAtMs", "errorCode", "errorSummary")  # records.md §6.7 "Updated copies"


def demo_plan(run_id: str, steps: list[tuple[str, list[str]]] = DIAMOND) -> Record:
    """The examples' demo plan (examples/generate.py) for `run_id`."""
    plan: Record = generate.demo_plan(run_id, f"plan-{run_id}", steps)
    return plan


def ok(out: Any) -> Any:
    assert out.ok, out.error
    return out


class World:
    """One workflow driven through the model; its records are the reference snapshots."""

    def __init__(self, run_id: str, steps: list[tuple[str, list[str]]] = DIAMOND) -> None:
        self.run_id = run_id
        self.plan = demo_plan(run_id, steps)
        self.w = WorkflowSystem(clock=1000)
        ok(self.w.apply("admit_workflow", plan=self.plan))
        self.w.advance(1000)

    def admit(self, step_key: str) -> str:
        step = next(s for s in self.plan["steps"] if s["stepKey"] == step_key)
        out = ok(self.w.apply("admit_task_attempt", runId=self.run_id, stepRunId=step["stepRunId"],
                              binding=consistent_binding(self.plan, step)))
        return str(out.result["attempt"]["id"])

    def fence(self, aid: str) -> Record:
        return {"attemptId": aid, "workerId": "worker-1", "leaseGeneration": 1}

    def run_to(self, step_key: str, stage: str) -> str:
        """Admit an attempt of `step_key` and drive it to claimed / leased / released / starting / running / done."""
        aid = self.admit(step_key)
        stages = ["claimed", "leased", "starting", "running", "done"]
        if stage == "released":
            ok(self.w.apply("claim_lease", attemptId=aid, workerId="worker-1", durationMs=30000))
            ok(self.w.apply("release_lease", **self.fence(aid), reason="declined"))
            return aid
        for s in stages[1: stages.index(stage) + 1]:
            self.w.advance(10)
            if s == "leased":
                ok(self.w.apply("claim_lease", attemptId=aid, workerId="worker-1", durationMs=30000))
            elif s == "starting":
                ok(self.w.apply("start_attempt", **self.fence(aid), timeoutMs=None))
            elif s == "running":
                ok(self.w.apply("record_running", **self.fence(aid)))
            else:
                ok(self.w.apply("complete_attempt", **self.fence(aid), exitCode=0))
        return aid

    @property
    def state(self) -> Any:
        return self.w.state

    def cancel_snapshot(self) -> Record:
        return cancel_input_of(self.state, self.run_id)

    def recovery_input(self, aid: str, reason: str) -> Record:
        s = self.state
        a = s.attempts[aid]
        return copy.deepcopy({"admission": s.receipts[aid], "run": s.runs[self.run_id], "attempt": a,
                              "stepRun": s.step_runs[a["stepRunId"]], "reason": reason, "observedAtMs": s.clock})


def reversed_record(x: Record) -> Record:
    return reversed_keys(x)


def ql3_run(run: Record) -> Record:
    """A ql3 Run: keys in reverse order (the pure functions check only the keys their lists name)."""
    return reversed_keys(run)


def assert_copy(input_record: Record, output: Record, changed: tuple[str, ...]) -> None:
    problem = copy_problem(input_record, output, changed)
    assert problem is None, problem


# --------------------------------------------------------------------------------------------------
# Scenarios


def cancelling_world() -> tuple[World, dict[str, str]]:
    """A cancelling diamond: fetch done, left running and right claimed + leased by a remote worker
    (both block convergence). Returns the world and the attempt ids by role."""
    w = World("run-q1")
    w.run_to("fetch", "done")
    ok(w.w.apply("advance_frontier", runId=w.run_id))
    ids = {"running": w.run_to("left", "running"), "leased": w.run_to("right", "leased")}
    w.w.advance(1000)
    ok(w.w.apply("request_cancel", runId=w.run_id, reason="user", actor={"type": "user", "id": "alice"}))
    w.w.advance(100)
    return w, ids


def settling_world(stage: str) -> tuple[World, str]:
    """A cancelling workflow whose only active attempt is a claim that convergence settles."""
    w = World(f"run-s-{stage}")
    aid = w.run_to("fetch", stage)
    w.w.advance(100)
    ok(w.w.apply("request_cancel", runId=w.run_id, reason="timeout", actor={"type": "scheduler"}))
    w.w.advance(100)
    return w, aid


def ql3_cancel_snapshot(snap: Record) -> Record:
    q: Record = ql3_input("cancel", snap)
    return q


# --------------------------------------------------------------------------------------------------
# cancel


def test_cancel_remote_worker_claim_resolves_like_the_model_shape() -> None:
    w, ids = cancelling_world()
    snap = w.cancel_snapshot()
    leased = next(e["attempt"] for e in snap["activeTaskAttempts"] if e["attempt"]["id"] == ids["leased"])
    assert "leaseVersion" in leased  # the model stores the full lease mirror ...
    q = ql3_cancel_snapshot(snap)
    q_leased = next(e["attempt"] for e in q["activeTaskAttempts"] if e["attempt"]["id"] == ids["leased"])
    assert "leaseVersion" not in q_leased and "workerId" in q_leased  # ... ql3 does not
    expected = consult("cancel", snap).resolution
    got = consult("cancel", q).resolution
    assert got["blockedAttemptIds"] == expected["blockedAttemptIds"] == sorted(ids.values())
    assert got["stepMutations"] == expected["stepMutations"]
    assert got["terminalTransition"] is None and got["attemptTransitions"] == []
    assert_copy(q["run"], got["run"], ("version", "eventSequence"))


@pytest.mark.parametrize("stage", ["claimed", "released"])
def test_cancel_settled_claim_copy_keeps_every_ql3_key_in_place(stage: str) -> None:
    w, _aid = settling_world(stage)
    snap = w.cancel_snapshot()
    q = ql3_cancel_snapshot(snap)
    expected = consult("cancel", snap).resolution
    got = consult("cancel", q).resolution
    (tr,) = got["attemptTransitions"]
    q_attempt = q["activeTaskAttempts"][0]["attempt"]
    assert_copy(q_attempt, tr["attempt"], ("status", *APPENDED))
    assert list(tr["attempt"])[-3:] == list(APPENDED)
    assert tr["attempt"]["status"] == "timed_out"
    for k in GENERIC_ATTEMPT_EXTRA_KEYS[:1]:
        assert tr["attempt"][k] == q_attempt[k]
    # Everything but the attempt copy is what the model-shaped snapshot gives.
    (etr,) = expected["attemptTransitions"]
    assert tr["event"] == etr["event"] and got["stepMutations"] == expected["stepMutations"]
    assert got["terminalTransition"] == expected["terminalTransition"]
    assert_copy(q["run"], got["run"], ("status", "version", "eventSequence", *APPENDED))


def test_cancel_attempt_with_a_key_outside_the_generic_record_is_invalid() -> None:
    w, _aid = settling_world("claimed")
    q = ql3_cancel_snapshot(w.cancel_snapshot())
    q["activeTaskAttempts"][0]["attempt"]["leaseHolderNote"] = "x"
    err = _invalid("cancel", q)
    assert err.code == T.FAMILIES["cancellation"].invalid and "leaseHolderNote" in err.message


# --------------------------------------------------------------------------------------------------
# recover


def recovery_world(stage: str) -> tuple[World, str]:
    w = World(f"run-r-{stage}")
    aid = w.run_to("fetch", stage)
    w.w.advance(60_000)  # the 30 s lease has expired
    return w, aid


@pytest.mark.parametrize(("stage", "reason"), [("leased", "unstarted_claim_expired"),
                                               ("starting", "execution_not_running"),
                                               ("running", "execution_not_running")])
def test_recover_ql3_attempt_resolves_and_keeps_its_keys(stage: str, reason: str) -> None:
    w, aid = recovery_world(stage)
    inp = w.recovery_input(aid, reason)
    q = dict(reversed(list(inp.items())))
    q["attempt"] = ql3_attempt(inp["attempt"])
    q["run"] = ql3_run(inp["run"])
    expected = consult("recover", inp).resolution
    got = consult("recover", q).resolution
    assert got["stepMutations"] == expected["stepMutations"] and got["attemptEvent"] == expected["attemptEvent"]
    assert got["disposition"] == expected["disposition"]
    assert_copy(q["attempt"], got["attempt"], ("status", *APPENDED))
    assert list(got["attempt"])[-3:] == list(APPENDED) and got["attempt"]["status"] == "lost"
    assert_copy(q["run"], got["run"], ("version", "eventSequence"))


def test_recover_attempt_with_a_key_outside_the_generic_record_is_invalid() -> None:
    w, aid = recovery_world("leased")
    inp = w.recovery_input(aid, "unstarted_claim_expired")
    inp["attempt"] = ql3_attempt(inp["attempt"]) | {"leaseOwner": "w"}
    err = _invalid("recover", inp)
    assert err.code == T.FAMILIES["task_recovery"].invalid and "leaseOwner" in err.message


# --------------------------------------------------------------------------------------------------
# The functions without attempt inputs: non-canonical key order resolves; copies keep their keys.


def test_frontier_snapshot_in_non_canonical_order_resolves() -> None:
    w = World("run-f")
    w.run_to("fetch", "done")
    s = w.state
    snap = copy.deepcopy({"plan": s.admission_of_run(w.run_id)[0]["plan"], "run": s.runs[w.run_id],
                          "stepRuns": s.steps_of_run(w.run_id), "observedAtMs": s.clock})
    q = {"observedAtMs": snap["observedAtMs"], "stepRuns": [reversed_record(x) for x in reversed(snap["stepRuns"])],
         "run": ql3_run(snap["run"]) | {"workerPool": "default"},  # frontier.md §4.2: other Run keys unchecked
         "plan": reversed_record(snap["plan"]), "ql3Meta": {"v": 1}}  # extra snapshot keys are ignored
    assert consult("frontier", q).resolution == consult("frontier", snap).resolution


def test_admit_attempt_in_non_canonical_order_keeps_the_run_copy() -> None:
    w = World("run-a")
    s = w.state
    plan = s.admission_of_run(w.run_id)[0]["plan"]
    step = next(p for p in plan["steps"] if p["stepKey"] == "fetch")
    inp = copy.deepcopy({"plan": plan, "run": s.runs[w.run_id], "stepRun": s.step_runs["sr-fetch"],
                         "binding": consistent_binding(plan, step), "attemptNumber": 1, "admittedAtMs": s.clock})
    q = {k: (reversed_record(v) if isinstance(v, dict) else v) for k, v in reversed(list(inp.items()))}
    got = consult("admit-attempt", q).resolution
    expected = consult("admit-attempt", inp).resolution
    assert {k: got[k] for k in ("receipt", "attempt", "event")} == {k: expected[k] for k in ("receipt", "attempt",
                                                                                            "event")}
    assert_copy(q["run"], got["run"], ("version", "eventSequence"))


def test_admit_workflow_and_step_transition_in_non_canonical_order() -> None:
    plan = demo_plan("run-w")
    assert consult("admit-workflow", reversed_record(plan)).resolution == consult("admit-workflow", plan).resolution
    w = World("run-t")
    cur = copy.deepcopy(w.state.step_runs["sr-fetch"])
    command = {"expectedVersion": cur["version"], "expectedDigest": cur["stepRunDigest"], "mutationId": "m-1",
               "to": "cancelled", "atMs": w.state.clock, "resultCode": "workflow_cancelled"}
    context = {"expectedRunVersion": 5, "expectedRunEventSequence": 5, "eventId": "e-1", "dedupeKey": "e-1",
               "actor": {"type": "system"}}
    ref = consult("step-transition", {"current": cur, "command": command, "context": context}).resolution
    got = consult("step-transition", {"context": reversed_record(context), "command": reversed_record(command),
                                      "current": reversed_record(cur)}).resolution
    assert got == ref and ref["stepRun"]["status"] == "cancelled"


@pytest.mark.parametrize("fn", ["frontier", "admit-attempt", "step-transition", "admit-workflow"])
def test_an_exact_record_with_an_unknown_key_is_invalid(fn: str) -> None:
    w = World(f"run-u-{fn}")
    s = w.state
    plan = s.admission_of_run(w.run_id)[0]["plan"]
    cur = copy.deepcopy(s.step_runs["sr-fetch"]) | {"bogusKey": 1}
    step = next(p for p in plan["steps"] if p["stepKey"] == "fetch")
    inputs = {
        "frontier": {"plan": plan, "run": s.runs[w.run_id], "observedAtMs": s.clock,
                     "stepRuns": [cur, *(x for x in s.steps_of_run(w.run_id) if x["id"] != "sr-fetch")]},
        "admit-attempt": {"plan": plan, "run": s.runs[w.run_id], "stepRun": cur,
                          "binding": consistent_binding(plan, step), "attemptNumber": 1, "admittedAtMs": s.clock},
        "step-transition": {"current": cur, "context": {}, "command": {}},
        "admit-workflow": plan | {"bogusKey": 1},
    }
    _invalid(fn, copy.deepcopy(inputs[fn]))


# --------------------------------------------------------------------------------------------------
# One corruption per snapshot: the error names that corruption, never a shape check in front of it.


def _invalid(fn: str, inp: Any) -> QlwfError:
    with pytest.raises(Invalid) as info:
        consult(fn, inp)
    return info.value


def _requeued(step_run: Record, at: int) -> Record:
    """The same StepRun one epoch later (ready → ready), with a valid digest."""
    return transition_step_run(step_run, {"expectedVersion": step_run["version"],
                                          "expectedDigest": step_run["stepRunDigest"], "mutationId": "m-requeue",
                                          "to": "ready", "atMs": at})


def _cancel_entry(q: Record) -> Record:
    entry: Record = q["activeTaskAttempts"][0]
    return entry


CancelCorruption = Callable[[Record], None]


def _wrong_epoch(q: Record) -> None:
    e = _cancel_entry(q)
    i = next(i for i, s in enumerate(q["stepRuns"]) if s["id"] == e["attempt"]["stepRunId"])
    q["stepRuns"][i] = reversed_record(_requeued(q["stepRuns"][i], q["observedAtMs"]))


CANCEL_CORRUPTIONS: dict[str, tuple[CancelCorruption, str]] = {
    "wrong epoch": (_wrong_epoch, "pre-start Attempt crossed its admitted StepRun epoch"),
    "wrong admission time": (lambda q: _cancel_entry(q)["attempt"].__setitem__(
        "createdAtMs", _cancel_entry(q)["attempt"]["createdAtMs"] + 1), "disagrees with its admission"),
    "attempt number as float": (lambda q: _cancel_entry(q)["attempt"].__setitem__("attempt", 1.0),
                                "disagrees with its admission"),
    "attempt number as boolean": (lambda q: _cancel_entry(q)["attempt"].__setitem__("attempt", True),
                                  "disagrees with its admission"),
    "foreign run": (lambda q: _cancel_entry(q)["attempt"].__setitem__("runId", "run-other"),
                    "disagrees with its admission"),
    "missing id": (lambda q: _cancel_entry(q)["attempt"].pop("id"), "disagrees with its admission"),
    "terminal status": (lambda q: _cancel_entry(q)["attempt"].__setitem__("status", "lost"),
                        "is not claimed, starting or running"),
    "callbackSequence as string": (lambda q: _cancel_entry(q)["attempt"].__setitem__("callbackSequence", "0"),
                                   "callbackSequence invalid"),
    "lease status unknown": (lambda q: _cancel_entry(q).__setitem__("leaseStatus", "expired"),
                             "leaseStatus invalid"),
    "claim with startedAtMs": (lambda q: _cancel_entry(q)["attempt"].__setitem__("startedAtMs", 1),
                               "pre-start Attempt crossed its admitted StepRun epoch"),
    "admission edited": (lambda q: _cancel_entry(q)["admission"].__setitem__("attemptNumber", 2),
                         "active Attempt admission is invalid"),
}


@pytest.mark.parametrize("name", sorted(CANCEL_CORRUPTIONS))
def test_cancel_single_corruption_of_a_ql3_attempt_fails_for_its_reason(name: str) -> None:
    w, _aid = settling_world("leased")
    q = ql3_cancel_snapshot(w.cancel_snapshot())
    assert consult("cancel", copy.deepcopy(q)).resolution  # the uncorrupted snapshot resolves
    corrupt, message = CANCEL_CORRUPTIONS[name]
    corrupt(q)
    err = _invalid("cancel", q)
    assert (err.code, err.reason) == (T.FAMILIES["cancellation"].invalid, "snapshot_invalid")
    assert message in err.message, err.message


def test_cancel_running_attempt_started_after_observation_fails_for_its_time() -> None:
    w, ids = cancelling_world()
    q = ql3_cancel_snapshot(w.cancel_snapshot())
    e = next(e for e in q["activeTaskAttempts"] if e["attempt"]["id"] == ids["running"])
    e["attempt"]["startedAtMs"] = q["observedAtMs"] + 1
    assert "observedAtMs precedes an Attempt time" in _invalid("cancel", q).message
    e["attempt"]["startedAtMs"] = None  # present but not a time: a typed failure at the check reading it
    assert "startedAtMs is not a timestamp" in _invalid("cancel", q).message


RecoveryCorruption = Callable[[Record], None]
RECOVERY_CORRUPTIONS: dict[str, tuple[RecoveryCorruption, str]] = {
    "wrong epoch": (lambda q: q.__setitem__("stepRun", _requeued(q["stepRun"], q["observedAtMs"])),
                    "StepRun is not at the admitted epoch"),
    "wrong admission time": (lambda q: q["attempt"].__setitem__("createdAtMs", q["attempt"]["createdAtMs"] - 1),
                             "attempt disagrees with its receipt"),
    "attempt number as float": (lambda q: q["attempt"].__setitem__("attempt", 1.0),
                                "attempt disagrees with its receipt"),
    "executor type of another binding": (lambda q: q["attempt"].__setitem__("executorType", "local_process"),
                                         "attempt disagrees with its receipt"),
    "terminal status": (lambda q: q["attempt"].__setitem__("status", "cancelled"), "attempt is not active"),
    "callbackSequence negative": (lambda q: q["attempt"].__setitem__("callbackSequence", -1),
                                  "callbackSequence invalid"),
    "time before creation": (lambda q: q.__setitem__("observedAtMs", q["attempt"]["createdAtMs"] - 1),
                             "observedAtMs precedes a recorded time"),
    "finishedAtMs in the future": (lambda q: q["attempt"].__setitem__("finishedAtMs", q["observedAtMs"] + 1),
                                   "observedAtMs precedes a recorded time"),
    "finishedAtMs not a time": (lambda q: q["attempt"].__setitem__("finishedAtMs", "soon"),
                               "a recorded Run or attempt time is not a timestamp"),
    "reason does not fit": (lambda q: q.__setitem__("reason", "execution_not_running"),
                            "does not fit a claimed attempt"),
}


@pytest.mark.parametrize("name", sorted(RECOVERY_CORRUPTIONS))
def test_recover_single_corruption_of_a_ql3_attempt_fails_for_its_reason(name: str) -> None:
    w, aid = recovery_world("leased")
    inp = w.recovery_input(aid, "unstarted_claim_expired")
    inp["attempt"] = ql3_attempt(inp["attempt"])
    assert consult("recover", copy.deepcopy(inp)).resolution
    assert inp["observedAtMs"] - 1 >= inp["stepRun"]["updatedAtMs"]  # the time corruption stays about the attempt
    corrupt, message = RECOVERY_CORRUPTIONS[name]
    corrupt(inp)
    err = _invalid("recover", inp)
    assert (err.code, err.reason) == (T.FAMILIES["task_recovery"].invalid, "input_invalid")
    assert message in err.message, err.message
