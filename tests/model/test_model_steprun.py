"""state-machines.md §3: the StepRun transition table (§3.1), the transition function with its
ordered checks and field effects (§3.2), mutations and replay resolution (§3.3)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from model_fixtures import (
    SCHEMA_STEP_RUN_MUTATION,
    STEP_RUN_FENCE_CONFLICT,
    STEP_RUN_INVALID,
    STEP_RUN_MUTATION_CONFLICT,
    STEP_RUN_STATE_CONFLICT,
    STEP_STATUSES,
    D,
    Record,
    demo_plan,
    raises,
    seal_mutation,
    seal_step_run,
    step_run_for,
)
from qlwf.model.admission import create_admission_bundle
from qlwf.model.steprun import resolve_step_run_mutation, transition_step_run, transition_step_run_mutation

PLAN = demo_plan()

# state-machines.md §3.1, copied from the table
ALLOWED: dict[str, set[str]] = {
    "pending": {"ready", "skipped", "cancelled"},
    "ready": {"ready", "waiting_approval", "running", "failed", "skipped", "cancelled", "timed_out"},
    "waiting_approval": {"ready", "running", "cancelled", "timed_out"},
    "running": {"lost", "succeeded", "failed", "cancelled", "timed_out"},
    "lost": {"ready", "failed", "cancelled"},
    "succeeded": set(), "failed": set(), "skipped": set(), "cancelled": set(), "timed_out": set(),
}
RESULT_REQUIRED = {"failed", "skipped", "cancelled", "timed_out", "lost"}
SUMMARY_ALLOWED = {"failed", "timed_out", "lost"}
TERMINAL = {"succeeded", "failed", "skipped", "cancelled", "timed_out"}


def sr(status: str, **over: Any) -> Record:
    return step_run_for(PLAN, "fetch", status, **over)


def command(cur: Record, to: str, *, at: int | None = None, mutation_id: str = "mut-next", **opt: Any) -> Record:
    """A shape-valid command for `to` (the shape rules of §3.2 check 7)."""
    c: Record = {"expectedVersion": cur["version"], "expectedDigest": cur["stepRunDigest"], "mutationId": mutation_id,
                 "to": to, "atMs": cur["updatedAtMs"] + 50 if at is None else at}
    if to in RESULT_REQUIRED:
        c["resultCode"] = "some_code"
    if to == "waiting_approval":
        c["approvalRequestId"] = "apr-2"
    if to == "running" and cur["status"] == "waiting_approval":
        c["approvalRequestId"] = cur["approvalRequestId"]
    c.update(opt)
    return c


def expected_after(cur: Record, cmd: Record) -> Record:
    """The field-effects table of §3.2, written out from the spec."""
    to, at = cmd["to"], cmd["atMs"]
    n = dict(cur)
    n["outputRef"] = n["resultCode"] = n["errorSummary"] = None
    if to == "ready":
        n["readyAtMs"] = cur["readyAtMs"] if cur["readyAtMs"] is not None else at
        n["startedAtMs"] = n["finishedAtMs"] = n["approvalRequestId"] = None
    elif to == "waiting_approval":
        n["approvalRequestId"] = cmd["approvalRequestId"]
    elif to == "running":
        n["startedAtMs"] = at
        n["finishedAtMs"] = None
        n["attemptCount"] = cur["attemptCount"] + 1
        if "approvalRequestId" in cmd:
            n["approvalRequestId"] = cmd["approvalRequestId"]
    elif to == "lost":
        n["resultCode"] = cmd["resultCode"]
        n["errorSummary"] = cmd.get("errorSummary")
    else:
        n["finishedAtMs"] = at
        n["outputRef"] = cmd.get("outputRef")
        n["resultCode"] = cmd.get("resultCode")
        n["errorSummary"] = cmd.get("errorSummary")
    n.update(status=to, version=cur["version"] + 1, updatedAtMs=at, lastMutationId=cmd["mutationId"])
    return seal_step_run(n)


# ==================================================================================================
# §3.1 every (from, to) pair
PAIRS = [(f, t) for f in STEP_STATUSES for t in STEP_STATUSES]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{f}->{t}" for f, t in PAIRS])
def test_3_1_every_pair(source: str, target: str) -> None:
    cur = sr(source)
    cmd = command(cur, target)
    if target in ALLOWED[source]:
        out = transition_step_run(cur, cmd)
        assert out == expected_after(cur, cmd)
        assert list(out) == list(cur)
    else:
        raises("Conflict", STEP_RUN_STATE_CONFLICT, transition_step_run, cur, cmd)


def test_3_1_table_is_complete() -> None:
    assert sum(len(v) for v in ALLOWED.values()) == 22
    assert sorted(ALLOWED) == sorted(STEP_STATUSES)


# ==================================================================================================
# §3.2 field effects (explicit values)
def test_3_2_ready_from_pending_sets_ready_at() -> None:
    cur = sr("pending")
    out = transition_step_run(cur, command(cur, "ready", at=1500))
    assert (out["status"], out["version"], out["readyAtMs"], out["updatedAtMs"]) == ("ready", 2, 1500, 1500)
    assert out["lastMutationId"] == "mut-next" and out["attemptCount"] == 0


def test_3_2_ready_refresh_keeps_ready_at() -> None:
    cur = sr("ready")  # readyAtMs 1100, version 2
    out = transition_step_run(cur, command(cur, "ready", at=1700))
    assert (out["readyAtMs"], out["version"], out["updatedAtMs"]) == (1100, 3, 1700)


def test_3_2_ready_from_lost_clears_start_and_result() -> None:
    cur = sr("lost")
    out = transition_step_run(cur, command(cur, "ready", at=1700))
    assert (out["readyAtMs"], out["startedAtMs"], out["finishedAtMs"]) == (1100, None, None)
    assert (out["resultCode"], out["errorSummary"], out["attemptCount"]) == (None, None, 1)


def test_3_2_ready_from_waiting_approval_clears_approval() -> None:
    cur = sr("waiting_approval")
    assert transition_step_run(cur, command(cur, "ready"))["approvalRequestId"] is None


def test_3_2_waiting_approval_keeps_timestamps() -> None:
    cur = sr("ready")
    out = transition_step_run(cur, command(cur, "waiting_approval", at=1800))
    assert (out["approvalRequestId"], out["readyAtMs"], out["startedAtMs"]) == ("apr-2", 1100, None)


def test_3_2_running_counts_an_attempt() -> None:
    cur = sr("ready")
    out = transition_step_run(cur, command(cur, "running", at=1800))
    assert (out["startedAtMs"], out["attemptCount"], out["finishedAtMs"]) == (1800, 1, None)
    cur = sr("waiting_approval")
    out = transition_step_run(cur, command(cur, "running", at=1800))
    assert (out["approvalRequestId"], out["attemptCount"]) == ("apr-1", 1)


@pytest.mark.parametrize("to", sorted(TERMINAL - {"skipped"}))
def test_3_2_terminal_from_running(to: str) -> None:
    cur = sr("running")
    opt: dict[str, Any] = {}
    if to in SUMMARY_ALLOWED:
        opt["errorSummary"] = "it broke"
    if to == "succeeded":
        opt["outputRef"] = "ref://out"
    out = transition_step_run(cur, command(cur, to, at=1900, **opt))
    assert (out["finishedAtMs"], out["readyAtMs"], out["startedAtMs"]) == (1900, 1100, 1100)
    assert out["resultCode"] == ("some_code" if to in RESULT_REQUIRED else None)
    assert out["errorSummary"] == opt.get("errorSummary")
    assert out["outputRef"] == opt.get("outputRef")


def test_3_2_lost_keeps_timestamps() -> None:
    cur = sr("running")
    out = transition_step_run(cur, command(cur, "lost", at=1900, errorSummary="gone"))
    assert (out["finishedAtMs"], out["startedAtMs"], out["resultCode"], out["errorSummary"]) == (
        None, 1100, "some_code", "gone")


def test_3_2_terminal_from_waiting_approval_carries_approval() -> None:
    cur = sr("waiting_approval")
    out = transition_step_run(cur, command(cur, "cancelled"))
    assert out["approvalRequestId"] == "apr-1" and out["readyAtMs"] == 1100


def test_3_2_result_fields_reset_when_not_set() -> None:
    cur = sr("lost")  # carries a resultCode
    out = transition_step_run(cur, command(cur, "cancelled"))
    assert (out["resultCode"], out["errorSummary"]) == ("some_code", None)


def test_3_2_digest_recomputed_and_input_untouched() -> None:
    cur = sr("ready")
    before = copy.deepcopy(cur)
    out = transition_step_run(cur, command(cur, "running"))
    assert cur == before
    assert out["stepRunDigest"] == seal_step_run(out)["stepRunDigest"] != cur["stepRunDigest"]


# ==================================================================================================
# §3.2 checks, first failure wins
def test_3_2_check1_current_invalid_beats_everything() -> None:
    cur = {**sr("ready"), "stepRunDigest": D("0")}
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, {"to": "nope"})
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, command(sr("ready"), "running"))


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda c: c.update(extra=1), id="extra key"),
    pytest.param(lambda c: c.pop("atMs"), id="missing atMs"),
    pytest.param(lambda c: c.pop("mutationId"), id="missing mutationId"),
    pytest.param(lambda c: c.update(to="done"), id="unknown target"),
    pytest.param(lambda c: c.update(to=None), id="null target"),
    pytest.param(lambda c: c.update(to=["ready"]), id="list target"),
])
def test_3_2_check2_command_shape_beats_fence(mutate: Any) -> None:
    cur = sr("ready")
    cmd = command(cur, "running", expectedVersion=99)  # would be a fence conflict
    mutate(cmd)
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, cmd)


def test_3_2_check2_command_not_object() -> None:
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, sr("ready"), ["running"])


@pytest.mark.parametrize(("field", "value"), [
    ("expectedVersion", True), ("expectedVersion", 1.0), ("expectedVersion", "1"), ("expectedVersion", 0),
    ("expectedVersion", 2147483648), ("expectedDigest", None), ("expectedDigest", "x"),
])
def test_3_2_check3_fence_shape_is_invalid(field: str, value: Any) -> None:
    cur = sr("pending")  # version 1: True == 1 would pass an unguarded equality
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, {**command(cur, "ready"), field: value})


def test_3_2_check3_uppercase_digest_is_invalid_not_fence() -> None:
    cur = sr("pending")
    cmd = command(cur, "ready", expectedDigest=cur["stepRunDigest"].upper())
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, cmd)


def test_3_2_check3b_fence_beats_state_and_time() -> None:
    cur = sr("succeeded")
    cmd = command(cur, "ready", expectedVersion=cur["version"] + 1, at=0)
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, transition_step_run, cur, cmd)
    cmd = command(cur, "ready", expectedDigest=D("0"), at=0)
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, transition_step_run, cur, cmd)


def test_3_2_check4_state_beats_time_and_shape() -> None:
    cur = sr("pending")
    cmd = command(cur, "running", at=0, mutationId="", resultCode="x")
    raises("Conflict", STEP_RUN_STATE_CONFLICT, transition_step_run, cur, cmd)


@pytest.mark.parametrize("at", [1099, -1, True, 1200.0, "1200", None])
def test_3_2_check5_time(at: Any) -> None:
    cur = sr("ready")  # updatedAtMs 1100
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, {**command(cur, "running"), "atMs": at})


def test_3_2_check5_equal_time_allowed() -> None:
    cur = sr("ready")
    assert transition_step_run(cur, command(cur, "running", at=1100))["startedAtMs"] == 1100


@pytest.mark.parametrize("mid", ["", "-x", "a b", "m" * 129, 5, None])
def test_3_2_check6_mutation_id(mid: Any) -> None:
    cur = sr("ready")
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, command(cur, "failed", mutation_id=mid))


SHAPE_CASES: dict[str, tuple[str, str, dict[str, Any], list[str]]] = {
    # name: (from, to, extra optional keys, optional keys to drop)
    "waiting_approval needs approvalRequestId": ("ready", "waiting_approval", {}, ["approvalRequestId"]),
    "running from waiting_approval with another id": ("waiting_approval", "running",
                                                      {"approvalRequestId": "apr-9"}, []),
    "running from waiting_approval without id": ("waiting_approval", "running", {}, ["approvalRequestId"]),
    "approvalRequestId with ready": ("waiting_approval", "ready", {"approvalRequestId": "apr-1"}, []),
    "approvalRequestId with running from ready": ("ready", "running", {"approvalRequestId": "apr-1"}, []),
    "approvalRequestId with cancelled": ("waiting_approval", "cancelled", {"approvalRequestId": "apr-1"}, []),
    "outputRef with failed": ("running", "failed", {"outputRef": "ref://x"}, []),
    "outputRef with lost": ("running", "lost", {"outputRef": "ref://x"}, []),
    **{f"resultCode missing for {t}": (f, t, {}, ["resultCode"]) for f, t in (
        ("running", "failed"), ("pending", "skipped"), ("pending", "cancelled"), ("ready", "timed_out"),
        ("running", "lost"))},
    **{f"resultCode forbidden for {t}": (f, t, {"resultCode": "x"}, []) for f, t in (
        ("running", "succeeded"), ("pending", "ready"), ("ready", "running"), ("ready", "waiting_approval"))},
    **{f"errorSummary forbidden for {t}": (f, t, {"errorSummary": "x"}, []) for f, t in (
        ("running", "succeeded"), ("pending", "skipped"), ("pending", "cancelled"), ("pending", "ready"),
        ("ready", "running"))},
    "resultCode pattern": ("running", "failed", {"resultCode": "Bad-Code"}, []),
    "errorSummary control character": ("running", "failed", {"errorSummary": "a\tb"}, []),
    "errorSummary too long": ("running", "failed", {"errorSummary": "é" * 1025}, []),
    "outputRef empty": ("running", "succeeded", {"outputRef": ""}, []),
    "approvalRequestId invalid": ("ready", "waiting_approval", {"approvalRequestId": " x"}, []),
}


@pytest.mark.parametrize("case", SHAPE_CASES)
def test_3_2_check7_shape_rules(case: str) -> None:
    source, to, extra, drop = SHAPE_CASES[case]
    cur = sr(source)
    cmd = command(cur, to, **extra)
    for k in drop:
        cmd.pop(k, None)
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, cmd)


def test_3_2_check7_allowed_optional_keys() -> None:
    cur = sr("running")
    assert transition_step_run(cur, command(cur, "succeeded", outputRef="ref://x"))["outputRef"] == "ref://x"
    for to in ("failed", "timed_out", "lost"):
        assert transition_step_run(cur, command(cur, to, errorSummary="why"))["errorSummary"] == "why"


def _exhausted() -> Record:
    return sr("ready", attemptCount=64)


def test_3_2_check8_attempts_exhausted() -> None:
    cur = _exhausted()
    raises("Conflict", STEP_RUN_STATE_CONFLICT, transition_step_run, cur, command(cur, "running"))
    # other targets are unaffected by attemptCount
    assert transition_step_run(cur, command(cur, "cancelled"))["status"] == "cancelled"


def test_3_2_checks_5_6_7_beat_check8() -> None:
    cur = _exhausted()
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, command(cur, "running", at=0))
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, command(cur, "running", mutation_id=""))
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, command(cur, "running", resultCode="x"))


def test_3_2_check9_version_ceiling_and_check8_first() -> None:
    cur = sr("ready", version=2147483647)
    raises("Invalid", STEP_RUN_INVALID, transition_step_run, cur, command(cur, "cancelled"))
    cur = sr("ready", version=2147483647, attemptCount=64)
    raises("Conflict", STEP_RUN_STATE_CONFLICT, transition_step_run, cur, command(cur, "running"))
    cur = sr("ready", version=2147483646)
    assert transition_step_run(cur, command(cur, "cancelled"))["version"] == 2147483647


# ==================================================================================================
# §3.3 mutations
CTX: Record = {"expectedRunVersion": 10, "expectedRunEventSequence": 20, "eventId": "evt-1", "dedupeKey": "evt-1",
               "actor": {"type": "worker", "id": "w1"}}


def test_3_3_mutation_record() -> None:
    cur = sr("ready")
    cmd = command(cur, "failed", at=1500, errorSummary="boom")
    m = transition_step_run_mutation(cur, cmd, CTX)
    post = expected_after(cur, cmd)
    event: Record = {"id": "evt-1", "runId": "run-0001", "sequence": 21, "type": "step.failed", "dedupeKey": "evt-1",
                     "actorType": "worker", "actorId": "w1", "stepRunId": "sr-fetch",
                     "payload": {"stepRunId": "sr-fetch", "stepKey": "fetch", "kind": "task", "from": "ready",
                                 "to": "failed", "version": 3, "stepRunDigest": post["stepRunDigest"]},
                     "createdAtMs": 1500}
    want = seal_mutation({"schema": SCHEMA_STEP_RUN_MUTATION, "mutationId": "mut-next", "runId": "run-0001",
                          "expectedRunVersion": 10, "expectedRunEventSequence": 20, "expectedStepRunVersion": 2,
                          "expectedStepRunDigest": cur["stepRunDigest"], "previousStatus": "ready", "stepRun": post,
                          "event": event})
    assert m == want
    assert list(m) == list(want) and list(m["event"]) == list(event) and list(m["event"]["payload"]) == list(
        event["payload"])


def test_3_3_mutation_event_without_actor_id() -> None:
    cur = sr("pending")
    m = transition_step_run_mutation(cur, command(cur, "ready"), {**CTX, "actor": {"type": "reconciler"}})
    assert "actorId" not in m["event"] and m["event"]["actorType"] == "reconciler"
    assert "attemptId" not in m["event"]


@pytest.mark.parametrize("ctx", [
    pytest.param({k: v for k, v in CTX.items() if k != "dedupeKey"}, id="missing key"),
    pytest.param({**CTX, "extra": 1}, id="extra key"),
    pytest.param({**CTX, "expectedRunVersion": True}, id="bool version"),
    pytest.param({**CTX, "expectedRunVersion": -1}, id="negative version"),
    pytest.param({**CTX, "expectedRunEventSequence": 2147483648}, id="sequence over int31"),
    pytest.param({**CTX, "expectedRunEventSequence": 1.5}, id="float sequence"),
    pytest.param({**CTX, "eventId": ""}, id="empty event id"),
    pytest.param({**CTX, "dedupeKey": "a b"}, id="bad dedupeKey"),
    pytest.param({**CTX, "actor": {"type": "robot"}}, id="actor type"),
    pytest.param({**CTX, "actor": {"type": "worker", "id": ""}}, id="actor id"),
    pytest.param({**CTX, "actor": {"type": "worker", "name": "x"}}, id="actor extra key"),
    pytest.param({**CTX, "actor": "worker"}, id="actor not object"),
    pytest.param([], id="context not object"),
])
def test_3_3_mutation_context_invalid(ctx: Any) -> None:
    cur = sr("pending")
    raises("Invalid", STEP_RUN_INVALID, transition_step_run_mutation, cur, command(cur, "ready"), ctx)


def test_3_3_mutation_keeps_transition_errors() -> None:
    cur = sr("succeeded")
    raises("Conflict", STEP_RUN_STATE_CONFLICT, transition_step_run_mutation, cur, command(cur, "ready"), CTX)
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, transition_step_run_mutation, cur,
           command(cur, "ready", expectedVersion=9), CTX)


# ---- resolve_step_run_mutation -------------------------------------------------------------------
def _mutation(cur: Record, to: str = "running", **kw: Any) -> Record:
    return transition_step_run_mutation(cur, command(cur, to, **kw), CTX)


def test_3_3_resolve_apply_and_existing() -> None:
    cur = sr("ready")
    m = _mutation(cur)
    assert resolve_step_run_mutation(cur, m) == "apply"
    assert resolve_step_run_mutation(m["stepRun"], m) == "existing"


def test_3_3_resolve_creation_mutation() -> None:
    m = create_admission_bundle(PLAN)["stepMutations"][0]
    assert resolve_step_run_mutation(None, m) == "apply"
    assert resolve_step_run_mutation(m["stepRun"], m) == "existing"
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, resolve_step_run_mutation, sr("ready"), m)


def test_3_3_resolve_same_id_different_record_is_mutation_conflict() -> None:
    cur = sr("ready")
    stored = _mutation(cur, at=1500)["stepRun"]
    other = _mutation(cur, at=1600)  # same mutationId, different post-image
    raises("Conflict", STEP_RUN_MUTATION_CONFLICT, resolve_step_run_mutation, stored, other)


def test_3_3_resolve_fence_conflicts() -> None:
    cur = sr("ready")
    m = _mutation(cur)
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, resolve_step_run_mutation, None, m)
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, resolve_step_run_mutation, sr("ready", version=3), m)
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, resolve_step_run_mutation, sr("ready", updatedAtMs=1150), m)
    # records.md §6.5: the event is rebuilt from the mutation, so a different previousStatus also
    # changes the event payload's `from`; keep the record valid so that only the fence differs.
    event = {**m["event"], "payload": {**m["event"]["payload"], "from": "waiting_approval"}}
    wrong_status = seal_mutation({**m, "previousStatus": "waiting_approval", "event": event})
    raises("Conflict", STEP_RUN_FENCE_CONFLICT, resolve_step_run_mutation, cur, wrong_status)
    inconsistent = seal_mutation({**m, "previousStatus": "waiting_approval"})
    raises("Invalid", STEP_RUN_INVALID, resolve_step_run_mutation, cur, inconsistent)


@pytest.mark.parametrize(("field", "value"), [
    ("stepKey", "other"), ("definitionRef", "plugin-package:x"), ("definitionDigest", D("f")), ("inputRef", "in"),
    ("createdAtMs", 999), ("parentStepRunId", "sr-parent"), ("kind", "tool"), ("runId", "run-0002"),
])
def test_3_3_resolve_immutable_fields(field: str, value: Any) -> None:
    cur = sr("ready")
    m = _mutation(cur)
    tampered = seal_mutation({**m, "stepRun": seal_step_run({**m["stepRun"], field: value})})
    raises("Invalid", STEP_RUN_INVALID, resolve_step_run_mutation, cur, tampered)


@pytest.mark.parametrize(("field", "value"), [
    ("readyAtMs", 1105), ("attemptCount", 2), ("startedAtMs", 1120), ("version", 4),
])
def test_3_3_resolve_post_image_must_match_transition(field: str, value: Any) -> None:
    cur = sr("ready")
    m = _mutation(cur)
    tampered = seal_mutation({**m, "stepRun": seal_step_run({**m["stepRun"], field: value})})
    raises("Invalid", STEP_RUN_INVALID, resolve_step_run_mutation, cur, tampered)


def test_3_3_resolve_applies_optional_fields() -> None:
    cur = sr("running")
    m = _mutation(cur, "failed", errorSummary="e")
    assert resolve_step_run_mutation(cur, m) == "apply"
    w = sr("waiting_approval")
    assert resolve_step_run_mutation(w, _mutation(w, "running")) == "apply"
    r = sr("ready")
    assert resolve_step_run_mutation(r, _mutation(r, "waiting_approval")) == "apply"
    s = _mutation(sr("running"), "succeeded", outputRef="ref://o")
    assert resolve_step_run_mutation(sr("running"), s) == "apply"


@pytest.mark.parametrize("change", [
    pytest.param({"schema": "qinglong/step-run-mutation@v2"}, id="schema"),
    pytest.param({"runId": "run-0002"}, id="runId differs from stepRun.runId"),
    pytest.param({"expectedRunVersion": True}, id="expectedRunVersion bool"),
    pytest.param({"expectedRunEventSequence": -5}, id="expectedRunEventSequence negative"),
    pytest.param("event.sequence", id="event sequence not expectedRunEventSequence + 1"),
    pytest.param("event.type", id="event type not step.<status>"),
])
def test_3_3_resolve_rejects_invalid_mutation_records(change: Any) -> None:
    cur = sr("ready")
    m = _mutation(cur)
    if change == "event.sequence":
        tampered = {**m, "event": {**m["event"], "sequence": m["event"]["sequence"] + 7}}
    elif change == "event.type":
        tampered = {**m, "event": {**m["event"], "type": "step.succeeded"}}
    else:
        tampered = {**m, **change}
    raises("Invalid", STEP_RUN_INVALID, resolve_step_run_mutation, cur, seal_mutation(tampered))


def test_3_3_mutation_current_check_does_not_depend_on_call_history() -> None:
    import collections
    cur = sr("ready", t=1888)
    cmd = command(cur, "running")
    raises("Invalid", STEP_RUN_INVALID, transition_step_run_mutation, collections.OrderedDict(cur), cmd, CTX)
    transition_step_run_mutation(cur, cmd, CTX)
    raises("Invalid", STEP_RUN_INVALID, transition_step_run_mutation, collections.OrderedDict(cur), cmd, CTX)
