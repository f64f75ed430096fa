"""records.md: test vectors (§8.1–§8.3), canonical JSON (§5), value patterns (§3) and the
exact-key normalizers (§4, §6). Every expected value is taken from the spec text."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from model_fixtures import (
    ADMISSION_RECEIPT_INVALID,
    DEMO_ATTEMPT_ID,
    DEMO_BINDING,
    DEMO_PLAN_DIGEST,
    DEMO_UNSIGNED,
    DOMAIN_PLAN,
    PLAN_INVALID,
    STEP_RUN_INVALID,
    STEP_RUN_KEYS,
    T_CLAIM,
    TASK_ADMISSION,
    D,
    Record,
    cancelling_run,
    demo_plan,
    json_digest,
    make_attempt,
    make_receipt,
    make_run,
    plan_step,
    raises,
    raw_sign,
    reversed_keys,
    seal_step_run,
    seal_task_receipt,
    situation,
    step_run_for,
    step_runs_for,
    unsigned_plan,
)
from qlwf.model import ids, values
from qlwf.model.admission import create_admission_bundle
from qlwf.model.attempts import build_task_attempt_admission
from qlwf.model.cancellation import resolve_cancellation
from qlwf.model.canonical import canonical_json, id_hash
from qlwf.model.canonical import json_digest as model_json_digest
from qlwf.model.frontier import resolve_frontier
from qlwf.model.records import (
    normalize_admission_receipt,
    normalize_binding,
    normalize_plan,
    normalize_step_run,
    normalize_task_receipt,
    plan_digest,
    sign_plan,
    step_run_digest,
)
from qlwf.model.recovery import build_task_recovery

TA_INVALID = TASK_ADMISSION[0]
PD = DEMO_PLAN_DIGEST

# records.md §8.2, the canonical JSON of the unsigned demo plan (1345 bytes), verbatim.
DEMO_CANONICAL = (
    '{"schema":"qinglong/plugin-package-workflow-execution-plan@v1","planId":"plan-0001","runId":"run-000'
    '1","target":{"projectId":"proj-1","packageName":"demo-pkg","installationId":"inst-1","lockDigest":"1'
    '111111111111111111111111111111111111111111111111111111111111111","generation":1,"generationDigest":"'
    '2222222222222222222222222222222222222222222222222222222222222222","materializedRevisionDigest":"3333'
    '333333333333333333333333333333333333333333333333333333333333","publicationDigest":"44444444444444444'
    '44444444444444444444444444444444444444444444444","workflowId":"nightly","workflowDefinitionDigest":"'
    '5555555555555555555555555555555555555555555555555555555555555555"},"steps":[{"stepRunId":"sr-fetch",'
    '"stepKey":"fetch","taskId":"fetcher","taskDefinitionRef":"plugin-package:333333333333333333333333333'
    '3333333333333333333333333333333333333:task:fetcher","taskDefinitionDigest":"666666666666666666666666'
    '6666666666666666666666666666666666666666","needs":[],"initialStatus":"ready","required":true},{"step'
    'RunId":"sr-report","stepKey":"report","taskId":"reporter","taskDefinitionRef":"plugin-package:333333'
    '3333333333333333333333333333333333333333333333333333333333:task:reporter","taskDefinitionDigest":"77'
    '77777777777777777777777777777777777777777777777777777777777777","needs":["fetch"],"initialStatus":"p'
    'ending","required":true}],"plannedAtMs":1000}'
)


# ==================================================================================================
# §8.1 frontier and StepRun vectors
A64 = D("a")


def test_8_1_frontier_step_hash_ready() -> None:
    h = "d0f82064b1a59594de5e0fe69f88bd22b31920dd5dd0589281b6f4109991c703"
    assert ids.frontier_step_hash(A64, "wf-summary-x", 1, "ready") == h
    assert ids.frontier_step_ids(A64, "wf-summary-x", 1, "ready") == (
        "workflow-frontier:" + h, "wff:d0f82064b1a59594de5e0fe69f88bd22")


def test_8_1_frontier_step_hash_skipped() -> None:
    h = "b1f8252827685d229b2879f3012c743b3359a9a9438d014512e43e1d85708f22"
    assert ids.frontier_step_hash(A64, "wf-summary-x", 1, "skipped") == h
    assert ids.frontier_step_ids(A64, "wf-summary-x", 1, "skipped") == (
        "workflow-frontier:" + h, "wff:b1f8252827685d229b2879f3012c743b")


@pytest.mark.parametrize(("status", "event_id"), [
    ("succeeded", "wft:45188057510d46164553c0dc71789120"),
    ("failed", "wft:a149dc221045f2b819105aabd42dcd27"),
])
def test_8_1_frontier_terminal_ids(status: str, event_id: str) -> None:
    assert ids.frontier_terminal_event_id(A64, 6, status) == event_id


def vector_step_run() -> Record:
    return {
        "schema": "qinglong/step-run@v1", "id": "wf-summary-x", "runId": "wf-run-x", "parentStepRunId": None,
        "stepKey": "summarize", "kind": "task", "definitionRef": "plugin-package:" + D("b") + ":task:beta",
        "definitionDigest": D("c"), "required": True, "status": "pending", "version": 1, "attemptCount": 0,
        "inputRef": None, "outputRef": None, "approvalRequestId": None, "readyAtMs": None, "startedAtMs": None,
        "finishedAtMs": None, "resultCode": None, "errorSummary": None, "createdAtMs": 3000, "updatedAtMs": 3000,
        "lastMutationId": "wfm:" + "a" * 56 + ":2",
    }


STEP_RUN_VECTOR = "0f62d538a9c0e5d3b2fadedc29bb7422276b237a464200e2e9c63b6667549410"


def test_8_1_step_run_digest() -> None:
    body = vector_step_run()
    assert step_run_digest(body) == STEP_RUN_VECTOR
    record = {**body, "stepRunDigest": STEP_RUN_VECTOR}
    assert normalize_step_run(record) == record
    # the digest is recomputed regardless of input key order (§6.3)
    assert normalize_step_run(reversed_keys(record)) == record
    raises("Invalid", STEP_RUN_INVALID, normalize_step_run, {**record, "stepRunDigest": D("0")})


# ==================================================================================================
# §8.2 admission vectors
def test_8_2_canonical_json_of_unsigned_plan() -> None:
    plan = sign_plan(copy.deepcopy(DEMO_UNSIGNED))
    unsigned = {k: v for k, v in plan.items() if k != "planDigest"}
    text = canonical_json(unsigned)
    assert text == DEMO_CANONICAL.encode()
    assert len(text) == 1345
    assert len(canonical_json(plan)) == 1425
    assert canonical_json(plan) == DEMO_CANONICAL[:-1].encode() + f',"planDigest":"{PD}"}}'.encode()


def test_8_2_plan_digest() -> None:
    assert plan_digest(json.loads(DEMO_CANONICAL)) == PD
    assert sign_plan(copy.deepcopy(DEMO_UNSIGNED))["planDigest"] == PD
    assert normalize_plan({**json.loads(DEMO_CANONICAL), "planDigest": PD})["planDigest"] == PD
    # the independent recomputation from §5.2 agrees (guards the fixtures)
    assert json_digest(DOMAIN_PLAN, json.loads(DEMO_CANONICAL)) == PD


def test_8_2_admission_bundle() -> None:
    b = create_admission_bundle(demo_plan())
    assert b["admissionEvent"]["id"] == b["admissionEvent"]["dedupeKey"] == "wfa:8f52bf506f9a5824edfd235258e2cace"
    m1, m2 = b["stepMutations"]
    assert m1["mutationId"] == "wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:1"
    assert m1["event"]["id"] == "wfe:8f52bf506f9a5824edfd235258e:1"
    assert m1["stepRun"]["stepRunDigest"] == "d91b792cb73f66df294415695ad64f1b3412f434d6d91c2190923970f3003a10"
    assert (m1["expectedRunVersion"], m1["event"]["sequence"]) == (1, 2)
    assert m1["mutationDigest"] == "a8c562852ab2cfce632a3bce2c8585d33cc59793cf13c275a52b3ac9f52801b6"
    assert m2["mutationId"] == "wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:2"
    assert m2["event"]["id"] == "wfe:8f52bf506f9a5824edfd235258e:2"
    assert m2["stepRun"]["stepRunDigest"] == "84f68d0304ead8f7853ef0e4161bfee6165fc051240df096ca93e735e23db054"
    assert (m2["expectedRunVersion"], m2["event"]["sequence"]) == (2, 3)
    assert m2["mutationDigest"] == "99f4bedcc2f96c6a6eb62e7d982ecaef8c784072b9380360213fe5d008379bc4"
    r = b["receipt"]
    assert (r["finalRunVersion"], r["finalRunEventSequence"], r["admittedAtMs"]) == (3, 3, 1000)
    assert r["receiptDigest"] == "859d2325758e7c130cc6fe2c8b5ba472bb1e783ecda52bb832c2e8439e8a79a3"
    assert m1["stepRun"]["readyAtMs"] == 1000 and m2["stepRun"]["readyAtMs"] is None


def test_8_2_admission_through_the_system() -> None:
    sc = situation("admitted")
    sim = sc.sim
    assert sim.state.admissions[PD]["receipt"]["receiptDigest"] == (
        "859d2325758e7c130cc6fe2c8b5ba472bb1e783ecda52bb832c2e8439e8a79a3")
    assert [e["id"] for e in sim.events()] == [
        "wfa:8f52bf506f9a5824edfd235258e2cace", "wfe:8f52bf506f9a5824edfd235258e:1",
        "wfe:8f52bf506f9a5824edfd235258e:2"]
    assert sim.step("sr-fetch")["stepRunDigest"] == "d91b792cb73f66df294415695ad64f1b3412f434d6d91c2190923970f3003a10"
    assert sim.step("sr-report")["stepRunDigest"] == (
        "84f68d0304ead8f7853ef0e4161bfee6165fc051240df096ca93e735e23db054")
    assert sim.state.mutations["wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:1"][
        "mutationDigest"] == "a8c562852ab2cfce632a3bce2c8585d33cc59793cf13c275a52b3ac9f52801b6"


def test_8_2_identifier_lengths() -> None:
    assert len(ids.admission_event_id(PD)) == 36
    assert [len(ids.admission_step_event_id(PD, i)) for i in (1, 10, 128)] == [33, 34, 35]
    assert [len(ids.admission_step_mutation_id(PD, i)) for i in (1, 10, 128)] == [62, 63, 64]


# ==================================================================================================
# §8.3 derived identifier vectors
RECEIPT_VECTOR = "a850e847b992bdefd003c44f9877d33f1e5a894b7619c1d63c5b5b432ead624a"


def test_8_3_attempt_ids_and_receipt_digest_pure() -> None:
    plan = demo_plan()
    fetch = create_admission_bundle(plan)["stepMutations"][0]["stepRun"]
    assert ids.task_attempt_ids(PD, "sr-fetch", 1) == (DEMO_ATTEMPT_ID, "wte:955364285ed507a7fdba9d43dbc8c10f")
    b = build_task_attempt_admission({"plan": plan, "run": make_run(plan), "stepRun": fetch,
                                      "binding": dict(DEMO_BINDING), "attemptNumber": 1, "admittedAtMs": 2000})
    r = b["receipt"]
    assert (r["attemptId"], r["eventId"]) == (DEMO_ATTEMPT_ID, "wte:955364285ed507a7fdba9d43dbc8c10f")
    assert (r["stepRunVersion"], r["runVersion"], r["runEventSequence"], r["admittedAtMs"]) == (1, 4, 4, 2000)
    assert r["receiptDigest"] == RECEIPT_VECTOR


def test_8_3_attempt_admission_through_the_system() -> None:
    sc = situation("claimed")
    assert sc.attempt_id == DEMO_ATTEMPT_ID
    r = sc.sim.state.receipts[DEMO_ATTEMPT_ID]
    assert r["receiptDigest"] == RECEIPT_VECTOR and r["admittedAtMs"] == T_CLAIM
    assert sc.sim.events()[-1]["id"] == "wte:955364285ed507a7fdba9d43dbc8c10f"


def test_8_3_frontier_report_ready() -> None:
    assert ids.frontier_step_ids(PD, "sr-report", 1, "ready") == (
        "workflow-frontier:cd617b8053e4bfa311a9fed8b58e40cc391813571eee3a955a8cd34eba3e2d5b",
        "wff:cd617b8053e4bfa311a9fed8b58e40cc")
    plan = demo_plan()
    res = resolve_frontier({"plan": plan, "run": make_run(plan, version=10),
                            "stepRuns": step_runs_for(plan, {"fetch": "succeeded"}), "observedAtMs": 9000})
    (m,) = res["stepMutations"]
    assert m["mutationId"] == "workflow-frontier:cd617b8053e4bfa311a9fed8b58e40cc391813571eee3a955a8cd34eba3e2d5b"
    assert m["event"]["id"] == m["event"]["dedupeKey"] == "wff:cd617b8053e4bfa311a9fed8b58e40cc"


def test_8_3_frontier_terminal_run_version_9() -> None:
    assert ids.frontier_terminal_event_id(PD, 9, "succeeded") == "wft:99992160943748a7355fc32fe787485c"
    plan = demo_plan()
    res = resolve_frontier({"plan": plan, "run": make_run(plan, version=9),
                            "stepRuns": step_runs_for(plan, {"fetch": "succeeded", "report": "succeeded"}),
                            "observedAtMs": 9000})
    assert res["terminalTransition"]["event"]["id"] == "wft:99992160943748a7355fc32fe787485c"


def test_8_3_recovery_hash_vectors() -> None:
    assert ids.recovery_hash("run-0001", DEMO_ATTEMPT_ID, 0, "sr-fetch", 1, "unstarted_claim_expired") == (
        "06dbc6c81ff52dfe107e4ce28836a165")
    assert ids.recovery_hash("run-0001", DEMO_ATTEMPT_ID, 1, "sr-fetch", 2, "execution_not_running") == (
        "f48fdd529a5040af98312ad5f7f103b4")


def test_8_3_recovery_ids_through_the_system() -> None:
    r1 = "06dbc6c81ff52dfe107e4ce28836a165"
    sc = situation("leased")
    sim = sc.sim
    sim.do("recover_attempt", 3000 + 10000, attemptId=sc.attempt_id, evidence="not_running")
    assert [e["id"] for e in sim.events()[-2:]] == [f"wra:{r1}", f"wqe:{r1}"]
    assert sim.step("sr-fetch")["lastMutationId"] == f"wrq:{r1}"

    r2 = "f48fdd529a5040af98312ad5f7f103b4"
    sc = situation("running")
    sim = sc.sim
    sim.do("recover_attempt", 3000 + 10000, attemptId=sc.attempt_id, evidence="not_running")
    assert [e["id"] for e in sim.events()[-3:]] == [f"wra:{r2}", f"wle:{r2}", f"wfe:{r2}"]
    assert f"wrl:{r2}" in sim.state.mutations and sim.step("sr-fetch")["lastMutationId"] == f"wrf:{r2}"


def test_8_3_cancellation_ids() -> None:
    assert ids.cancellation_hash("run-0001", 5000, "attempt", DEMO_ATTEMPT_ID, 0) == "ce5025fa71c6615f2c2d8597cbed854b"
    assert ids.cancellation_hash("run-0001", 5000, "step", "sr-report", 1) == "db59cdbd15559a88e05e26f040cbc105"
    assert ids.cancellation_hash("run-0001", 5000, "run", "run-0001", 7) == "c006cd11050410f3cf8b2f1e0c90cceb"


def test_8_3_cancellation_ids_through_resolve_cancellation() -> None:
    plan = demo_plan()
    fetch = create_admission_bundle(plan)["stepMutations"][0]["stepRun"]
    report = create_admission_bundle(plan)["stepMutations"][1]["stepRun"]
    receipt = make_receipt(plan, fetch, binding=DEMO_BINDING, admitted_at=2000)
    assert receipt["receiptDigest"] == RECEIPT_VECTOR
    # Run version 4 with intent at 5000: attempt → 5, sr-fetch → 6, sr-report → 7, run epoch 7.
    res = resolve_cancellation({"run": cancelling_run(plan, "user", 5000, version=4), "stepRuns": [fetch, report],
                                "activeTaskAttempts": [{"admission": receipt, "attempt": make_attempt(receipt),
                                                        "leaseStatus": None}], "observedAtMs": 5000})
    assert res["attemptTransitions"][0]["event"]["id"] == "wca:ce5025fa71c6615f2c2d8597cbed854b"
    m = next(m for m in res["stepMutations"] if m["stepRun"]["id"] == "sr-report")
    assert (m["mutationId"], m["event"]["id"]) == ("wcm:db59cdbd15559a88e05e26f040cbc105",
                                                   "wcs:db59cdbd15559a88e05e26f040cbc105")
    assert res["terminalTransition"]["event"]["id"] == "wcr:c006cd11050410f3cf8b2f1e0c90cceb"


def test_8_3_cancel_request_id() -> None:
    assert ids.cancel_request_event_id("run-0001", 5000, "user") == "wcq:970e0f7f06ad4e763057d38356ff0c07"
    sc = situation("claimed")
    res = sc.sim.do("request_cancel", 5000, runId="run-0001", reason="user", actor={"type": "user"})
    assert res["cancelRequestedAtMs"] == 5000
    e = sc.sim.events()[-1]
    assert e["id"] == e["dedupeKey"] == "wcq:970e0f7f06ad4e763057d38356ff0c07"
    # and the unleased claimed attempt is settled with the §8.3 attempt id
    sc.sim.do("converge_cancellation", 5000, runId="run-0001")
    assert "wca:ce5025fa71c6615f2c2d8597cbed854b" in [e["id"] for e in sc.sim.events()]
    assert "wcm:db59cdbd15559a88e05e26f040cbc105" in sc.sim.state.mutations


TASK_EXECUTION_VECTORS = {
    "lease_claimed": "wxa:f70954cfca5dc439deb48588b67afb61",
    "lease_released": "wxa:8d5c683b961a1bc6d05803bf670ad81a",
    "attempt_starting": "wxa:f053b0e8ef12e2ef6b8cee4c3bab859f",
    "attempt_running": "wxa:a500ac76e492b8989f5557f091ff2afa",
    "attempt_terminal": "wxa:eee299897910eae285761b505731010d",
    "timeout_requested": "wxa:06973f311c632b8ad496e162907b5dc5",
}


@pytest.mark.parametrize(("kind", "event_id"), TASK_EXECUTION_VECTORS.items())
def test_8_3_task_execution_event_ids(kind: str, event_id: str) -> None:
    assert ids.task_execution_event_id("run-0001", DEMO_ATTEMPT_ID, 1, kind) == event_id


def test_8_3_task_execution_step_ids() -> None:
    assert ids.task_execution_step_ids("run-0001", DEMO_ATTEMPT_ID, 1, "step_running") == (
        "wxm:b0a14f8f02d01327442341ba14232e7b", "wxe:b0a14f8f02d01327442341ba14232e7b")
    assert ids.task_execution_step_ids("run-0001", DEMO_ATTEMPT_ID, 1, "step_terminal") == (
        "wxm:0fd10e14de6c751fdae498183082d9a7", "wxe:0fd10e14de6c751fdae498183082d9a7")


def test_8_3_task_execution_ids_through_the_system() -> None:
    sc = situation("running")
    sim = sc.sim
    sim.do("complete_attempt", 6000, exitCode=0, **sc.fence())
    by_type = {e["type"]: e["id"] for e in sim.events()}
    assert by_type["workflow.task_dispatch_leased"] == TASK_EXECUTION_VECTORS["lease_claimed"]
    assert by_type["workflow.task_attempt.starting"] == TASK_EXECUTION_VECTORS["attempt_starting"]
    assert by_type["workflow.task_attempt.running"] == TASK_EXECUTION_VECTORS["attempt_running"]
    assert by_type["workflow.task_attempt.succeeded"] == TASK_EXECUTION_VECTORS["attempt_terminal"]
    assert by_type["step.running"] == "wxe:b0a14f8f02d01327442341ba14232e7b"
    assert by_type["step.succeeded"] == "wxe:0fd10e14de6c751fdae498183082d9a7"
    assert "wxm:b0a14f8f02d01327442341ba14232e7b" in sim.state.mutations
    assert sim.step("sr-fetch")["lastMutationId"] == "wxm:0fd10e14de6c751fdae498183082d9a7"

    sc = situation("leased")
    sc.sim.do("release_lease", 4000, reason="declined", **sc.fence())
    assert sc.sim.events()[-1]["id"] == TASK_EXECUTION_VECTORS["lease_released"]

    sc = situation("starting", timeout_ms=1000)
    res = sc.sim.do("renew_lease", 5000, durationMs=10000, **sc.fence())
    assert (res["status"], res["reason"]) == ("stop_requested", "timeout")
    assert sc.sim.events()[-1]["id"] == TASK_EXECUTION_VECTORS["timeout_requested"]


def test_8_3_vectors_through_build_task_recovery() -> None:
    plan = demo_plan()
    fetch = create_admission_bundle(plan)["stepMutations"][0]["stepRun"]
    receipt = make_receipt(plan, fetch, binding=DEMO_BINDING, admitted_at=2000)
    b = build_task_recovery({"admission": receipt, "run": make_run(plan, version=5),
                             "attempt": make_attempt(receipt), "stepRun": fetch,
                             "reason": "unstarted_claim_expired", "observedAtMs": 9000})
    assert b["attemptEvent"]["id"] == "wra:06dbc6c81ff52dfe107e4ce28836a165"


# ==================================================================================================
# §5 canonical JSON, digests, identifier hashes
def test_5_1_canonical_json_rules() -> None:
    value = {"z": 1, "a": [True, False, None, -7, 0], "s": 'q"b\\/\b\t\n\f\r\x00\x01\x1f\x7f é€😀\u2028'}
    expected = ('{"z":1,"a":[true,false,null,-7,0],"s":"q\\"b\\\\/\\b\\t\\n\\f\\r\\u0000\\u0001\\u001f'
                '\x7f é€😀\u2028"}')
    assert canonical_json(value) == expected.encode("utf-8")


def test_5_1_keys_are_not_sorted_and_nested_order_kept() -> None:
    assert canonical_json({"b": {"y": 1, "x": 2}, "a": []}) == b'{"b":{"y":1,"x":2},"a":[]}'


def test_5_2_json_digest_layout() -> None:
    x = {"k": "v", "n": 1}
    assert model_json_digest("dom", x) == hashlib.sha256(b'dom\x00{"k":"v","n":1}').hexdigest()


def test_5_3_id_hash_layout() -> None:
    assert id_hash("dom", "a", 12, "b") == hashlib.sha256(b"dom\x00a\x0012\x00b").hexdigest()
    assert id_hash("dom", "ab") != id_hash("dom", "a", "b")
    assert id_hash("dom", 0) == hashlib.sha256(b"dom\x000").hexdigest()


# ==================================================================================================
# §3 value patterns
@pytest.mark.parametrize(("pred", "good", "bad"), [
    (values.is_identifier, ["a", "A.b_c:d-e", "9", "x" * 128], ["", "-a", ".a", "a b", "x" * 129, "a\n", "é", 1]),
    (values.is_portable_id, ["a", "x" * 36], ["x" * 37, "", "a/b"]),
    (values.is_resource_id, ["a", "a-9", "a" * 63], ["", "9a", "A", "a_b", "a" * 64, "a\n"]),
    (values.is_package_name, ["a", "9", "a-b", "a" * 63], ["", "-a", "a-", "A", "a" * 64]),
    (values.is_digest, [D("a"), D("0")], [D("A"), "a" * 63, "a" * 65, D("g"), D("a") + "\n"]),
    (values.is_result_code, ["a", "a_1", "a" * 64], ["", "A", "1a", "a-b", "a" * 65]),
    (values.is_reference_text, ["x", "é" * 256, "/ é"], ["", "a\nb", "a\x00", "a\x7f", "é" * 257, "\ud800"]),
    (values.is_summary_text, ["x", "é" * 1024], ["", "\t", "é" * 1025, "x\udfff"]),
    (values.is_timestamp, [0, 2**53 - 1], [-1, 2**53, True, 1.0, "1", None]),
    (values.is_int31, [0, 2147483647], [2147483648, -1, False]),
])
def test_3_value_patterns(pred: Callable[[Any], bool], good: list[Any], bad: list[Any]) -> None:
    assert all(pred(x) for x in good), [x for x in good if not pred(x)]
    assert not any(pred(x) for x in bad), [x for x in bad if pred(x)]


@pytest.mark.parametrize(("text", "digest"), [
    ("qltd:v1:1:" + D("a"), D("a")),
    ("qltd:v1:2147483647:" + D("b"), D("b")),
    ("qltd:v1:0:" + D("a"), None),
    ("qltd:v1:01:" + D("a"), None),
    ("qltd:v1:2147483648:" + D("a"), None),
    ("qltd:v1:12345678901:" + D("a"), None),
    ("qltd:v2:1:" + D("a"), None),
    ("qltd:v1:1:" + D("A"), None),
])
def test_3_task_revision(text: str, digest: str | None) -> None:
    assert values.task_revision_digest(text) == digest


def test_3_runtime_task_id() -> None:
    assert values.is_runtime_task_id("pkg:demo-pkg:fetcher")
    for bad in ("pkg:Demo:fetch", "pkg:demo-:fetch", "pkg:demo:9x", "pkg:demo", "xpkg:demo:a", "pkg:demo:a\n"):
        assert not values.is_runtime_task_id(bad), bad


# ==================================================================================================
# §6.1 normalize_plan: failing closed
def _del(key: str) -> Callable[[Record], None]:
    return lambda p: p.pop(key)


def _target(key: str, value: Any) -> Callable[[Record], None]:
    return lambda p: p["target"].__setitem__(key, value)


def _step(i: int, key: str, value: Any) -> Callable[[Record], None]:
    return lambda p: p["steps"][i].__setitem__(key, value)


def _set(key: str, value: Any) -> Callable[[Record], None]:
    return lambda p: p.__setitem__(key, value)


def _many_steps(n: int) -> Callable[[Record], None]:
    def mutate(p: Record) -> None:
        p["steps"] = [plan_step(f"s{i:03d}") for i in range(n)]
    return mutate


def _unsorted_needs(p: Record) -> None:
    p["steps"].append({**plan_step("zeta", ["fetch", "report"]), "needs": ["report", "fetch"]})


def _cycle(p: Record) -> None:
    p["steps"] = [plan_step("a"), plan_step("b", ["a", "c"]), plan_step("c", ["b"])]


PLAN_CASES: dict[str, Callable[[Record], None]] = {
    **{f"missing {k}": _del(k) for k in ("schema", "planId", "runId", "target", "steps", "plannedAtMs")},
    "extra key": _set("extra", 1),
    "schema v2": _set("schema", "qinglong/plugin-package-workflow-execution-plan@v2"),
    "target not object": _set("target", [1]),
    "target missing key": lambda p: p["target"].pop("lockDigest"),
    "target extra key": _target("extra", "x"),
    "generation bool": _target("generation", True),
    "generation float": _target("generation", 1.0),
    "generation string": _target("generation", "1"),
    "generation 0": _target("generation", 0),
    "generation 2^31": _target("generation", 2147483648),
    "projectId empty": _target("projectId", ""),
    "projectId space": _target("projectId", "proj 1"),
    "projectId 129": _target("projectId", "p" * 129),
    "projectId newline": _target("projectId", "proj\n"),
    "packageName upper": _target("packageName", "Demo-pkg"),
    "packageName trailing dash": _target("packageName", "demo-"),
    "packageName 64": _target("packageName", "d" * 64),
    "installationId lone surrogate": _target("installationId", "inst\ud800"),
    "lockDigest upper": _target("lockDigest", D("A")),
    "lockDigest short": _target("lockDigest", "1" * 63),
    "generationDigest int": _target("generationDigest", 2),
    "publicationDigest null": _target("publicationDigest", None),
    "workflowId upper": _target("workflowId", "Nightly"),
    "workflowDefinitionDigest 65": _target("workflowDefinitionDigest", "5" * 65),
    "steps object": _set("steps", {"0": plan_step("fetch")}),
    "steps tuple": _set("steps", tuple(plan_step(k) for k in ("a", "b"))),
    "steps empty": _set("steps", []),
    "steps 129": _many_steps(129),
    "step not object": lambda p: p["steps"].__setitem__(0, ["fetch"]),
    "step missing key": lambda p: p["steps"][0].pop("needs"),
    "step extra key": _step(0, "kind", "task"),
    "initialStatus running": _step(0, "initialStatus", "running"),
    "required false": _step(0, "required", False),
    "required 1": _step(0, "required", 1),
    "stepKey upper": _step(0, "stepKey", "Fetch"),
    "stepKey digit first": _step(0, "stepKey", "1fetch"),
    "stepKey 64": _step(0, "stepKey", "f" * 64),
    "taskId underscore": _step(0, "taskId", "fetch_er"),
    "needs tuple": _step(1, "needs", ("fetch",)),
    "needs string": _step(1, "needs", "fetch"),
    "needs null": _step(1, "needs", None),
    "need not a resource id": _step(1, "needs", ["Fetch"]),
    "need is own key": _step(1, "needs", ["report"]),
    "needs not ascending": _unsorted_needs,
    "needs duplicate": _step(1, "needs", ["fetch", "fetch"]),
    "ready with needs": _step(1, "initialStatus", "ready"),
    "pending without needs": _step(0, "initialStatus", "pending"),
    "taskDefinitionRef mismatch": _step(0, "taskDefinitionRef", "plugin-package:" + D("3") + ":task:other"),
    "taskDefinitionRef other revision": _step(0, "taskDefinitionRef", "plugin-package:" + D("4") + ":task:fetcher"),
    "stepRunId empty": _step(0, "stepRunId", ""),
    "stepRunId space": _step(0, "stepRunId", "sr fetch"),
    "stepRunId 129": _step(0, "stepRunId", "s" * 129),
    "taskDefinitionDigest upper": _step(0, "taskDefinitionDigest", D("F")),
    "duplicate stepKey": lambda p: p["steps"].append({**p["steps"][0], "stepRunId": "sr-other"}),
    "duplicate stepRunId": lambda p: p["steps"].append(plan_step("zeta", step_run_id="sr-fetch")),
    "unknown need": _step(1, "needs", ["fetch", "missing"]),
    "cycle": _cycle,
    "planId empty": _set("planId", ""),
    "planId newline": _set("planId", "plan-0001\n"),
    "planId 129": _set("planId", "p" * 129),
    "runId 37": _set("runId", "r" * 37),
    "runId slash": _set("runId", "run/1"),
    "plannedAtMs bool": _set("plannedAtMs", True),
    "plannedAtMs float": _set("plannedAtMs", 1000.0),
    "plannedAtMs string": _set("plannedAtMs", "1000"),
    "plannedAtMs negative": _set("plannedAtMs", -1),
    "plannedAtMs 2^53": _set("plannedAtMs", 2**53),
}


def _signed(unsigned: Record) -> Record:
    try:
        return raw_sign(unsigned)
    except (UnicodeEncodeError, TypeError, ValueError):
        return {**unsigned, "planDigest": D("0")}


@pytest.mark.parametrize("case", PLAN_CASES)
def test_6_1_plan_fails_closed(case: str) -> None:
    unsigned = copy.deepcopy(DEMO_UNSIGNED)
    PLAN_CASES[case](unsigned)
    raises("Invalid", PLAN_INVALID, normalize_plan, _signed(unsigned))


@pytest.mark.parametrize("value", [None, [], "plan", 1, True])
def test_6_1_plan_not_an_object(value: Any) -> None:
    raises("Invalid", PLAN_INVALID, normalize_plan, value)


@pytest.mark.parametrize("digest", [D("0"), PD.upper(), PD[:63], 1, None])
def test_6_1_plan_digest_mismatch(digest: Any) -> None:
    raises("Invalid", PLAN_INVALID, normalize_plan, {**demo_plan(), "planDigest": digest})


def test_6_1_digest_covers_every_field() -> None:
    plan = demo_plan()
    raises("Invalid", PLAN_INVALID, normalize_plan, {**plan, "plannedAtMs": 1001})
    raises("Invalid", PLAN_INVALID, normalize_plan, {**plan, "target": {**plan["target"], "generation": 2}})


def test_6_1_plan_size_limit() -> None:
    """A 128-step plan where every step needs all earlier ones exceeds 262144 bytes."""
    keys = [f"k{i:03d}" + "x" * 59 for i in range(128)]
    steps = [plan_step(k, keys[:i]) for i, k in enumerate(keys)]
    big = raw_sign(unsigned_plan(steps))
    assert len(json.dumps(big, separators=(",", ":"))) > 262144
    raises("Invalid", PLAN_INVALID, normalize_plan, big)


def test_6_1_plan_accepts_boundaries() -> None:
    unsigned = unsigned_plan([plan_step("a" * 63), plan_step("b", ["a" * 63], step_run_id="s" * 128)],
                             run_id="r" * 36, plan_id="p" * 128, planned_at=2**53 - 1)
    unsigned["target"]["generation"] = 2147483647
    plan = raw_sign(unsigned)
    assert normalize_plan(plan) == plan
    assert normalize_plan({**raw_sign(unsigned_plan(planned_at=0))})["plannedAtMs"] == 0


def test_6_1_128_steps_accepted() -> None:
    plan = raw_sign(unsigned_plan([plan_step(f"s{i:03d}") for i in range(128)]))
    assert len(normalize_plan(plan)["steps"]) == 128


# ---- normalize_plan properties (§4) ---------------------------------------------------------------
def test_4_plan_sorted_idempotent_and_key_order_independent() -> None:
    plan = demo_plan()
    assert [s["stepKey"] for s in plan["steps"]] == ["fetch", "report"]
    shuffled = reversed_keys(plan)
    shuffled["steps"] = list(reversed(shuffled["steps"]))
    out = normalize_plan(shuffled)
    assert out == plan
    assert json.dumps(out) == json.dumps(plan)  # same key order everywhere
    assert normalize_plan(out) == out
    assert normalize_plan(json.loads(canonical_json(plan))) == plan


def test_4_plan_output_is_a_new_object() -> None:
    src = demo_plan()
    out = normalize_plan(src)
    out["target"]["projectId"] = "changed"
    out["steps"][0]["needs"].append("x")
    assert src["target"]["projectId"] == "proj-1" and src["steps"][0]["needs"] == []


# ==================================================================================================
# §6.3 normalize_step_run: failing closed
def _sr(status: str = "failed", **over: Any) -> Record:
    return step_run_for(demo_plan(), "fetch", status, **over)


STEP_RUN_VALUE_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "schema": ("failed", {"schema": "qinglong/step-run@v2"}),
    "id empty": ("failed", {"id": ""}),
    "runId space": ("failed", {"runId": "run 1"}),
    "parentStepRunId equals id": ("failed", {"parentStepRunId": "sr-fetch"}),
    "parentStepRunId invalid": ("failed", {"parentStepRunId": "-x"}),
    "stepKey empty": ("failed", {"stepKey": ""}),
    "kind unknown": ("failed", {"kind": "job"}),
    "definitionRef empty": ("failed", {"definitionRef": ""}),
    "definitionRef newline": ("failed", {"definitionRef": "a\nb"}),
    "definitionRef DEL": ("failed", {"definitionRef": "a\x7f"}),
    "definitionRef 513 bytes": ("failed", {"definitionRef": "é" * 256 + "x"}),
    "definitionDigest upper": ("failed", {"definitionDigest": D("C")}),
    "required 1": ("failed", {"required": 1}),
    "required string": ("failed", {"required": "true"}),
    "status unknown": ("failed", {"status": "done"}),
    "version bool": ("pending", {"version": True}),
    "version float": ("failed", {"version": 2.0}),
    "version string": ("failed", {"version": "2"}),
    "version 0": ("failed", {"version": 0}),
    "version 2^31": ("failed", {"version": 2147483648}),
    "attemptCount bool": ("failed", {"attemptCount": True}),
    "attemptCount -1": ("pending", {"attemptCount": -1}),
    "attemptCount 65": ("failed", {"attemptCount": 65}),
    "inputRef empty": ("failed", {"inputRef": ""}),
    "approvalRequestId invalid": ("waiting_approval", {"approvalRequestId": "a b"}),
    "readyAtMs float": ("ready", {"readyAtMs": 1100.0}),
    "readyAtMs bool": ("failed", {"readyAtMs": True}),
    "startedAtMs string": ("failed", {"startedAtMs": "1100"}),
    "finishedAtMs negative": ("failed", {"finishedAtMs": -1}),
    "resultCode upper": ("failed", {"resultCode": "Execution_failed"}),
    "resultCode dash": ("failed", {"resultCode": "execution-failed"}),
    "resultCode 65": ("failed", {"resultCode": "e" * 65}),
    "errorSummary empty": ("failed", {"errorSummary": ""}),
    "errorSummary control": ("failed", {"errorSummary": "line\nbreak"}),
    "errorSummary 2049 bytes": ("failed", {"errorSummary": "é" * 1024 + "x"}),
    "createdAtMs 2^53": ("failed", {"createdAtMs": 2**53}),
    "lastMutationId empty": ("failed", {"lastMutationId": ""}),
    # record invariants
    "updatedAtMs < createdAtMs": ("pending", {"updatedAtMs": 999}),
    "readyAtMs < createdAtMs": ("ready", {"readyAtMs": 999}),
    "readyAtMs > updatedAtMs": ("ready", {"readyAtMs": 1200}),
    "startedAtMs without readyAtMs": ("failed", {"readyAtMs": None}),
    "startedAtMs < readyAtMs": ("running", {"readyAtMs": 1100, "startedAtMs": 1050, "updatedAtMs": 1100}),
    "finishedAtMs < startedAtMs": ("failed", {"startedAtMs": 1100, "finishedAtMs": 1090, "readyAtMs": 1000,
                                              "updatedAtMs": 1100}),
    "finishedAtMs > updatedAtMs": ("failed", {"finishedAtMs": 1200}),
    "pending with readyAtMs": ("pending", {"readyAtMs": 1000}),
    "ready without readyAtMs": ("ready", {"readyAtMs": None}),
    "ready with finishedAtMs": ("ready", {"finishedAtMs": 1100}),
    "waiting_approval with startedAtMs": ("waiting_approval", {"startedAtMs": 1100, "attemptCount": 1}),
    "running without startedAtMs": ("running", {"startedAtMs": None, "attemptCount": 0}),
    "lost with finishedAtMs": ("lost", {"finishedAtMs": 1100}),
    "terminal without finishedAtMs": ("cancelled", {"finishedAtMs": None}),
    "waiting_approval without approvalRequestId": ("waiting_approval", {"approvalRequestId": None}),
    "outputRef when failed": ("failed", {"outputRef": "ref://x"}),
    "succeeded with resultCode": ("succeeded", {"resultCode": "execution_failed"}),
    "succeeded with errorSummary": ("succeeded", {"errorSummary": "boom"}),
    "failed without resultCode": ("failed", {"resultCode": None}),
    "skipped without resultCode": ("skipped", {"resultCode": None}),
    "lost without resultCode": ("lost", {"resultCode": None}),
    "pending with resultCode": ("pending", {"resultCode": "x"}),
    "ready with errorSummary": ("ready", {"errorSummary": "x"}),
    "running with resultCode": ("running", {"resultCode": "x"}),
    "attemptCount 0 with startedAtMs": ("succeeded", {"attemptCount": 0}),
}


@pytest.mark.parametrize("case", STEP_RUN_VALUE_CASES)
def test_6_3_step_run_fails_closed(case: str) -> None:
    status, over = STEP_RUN_VALUE_CASES[case]
    base = _sr(status)
    raises("Invalid", STEP_RUN_INVALID, normalize_step_run, seal_step_run({**base, **over}))


@pytest.mark.parametrize("key", STEP_RUN_KEYS)
def test_6_3_step_run_missing_key(key: str) -> None:
    s = _sr()
    del s[key]
    raises("Invalid", STEP_RUN_INVALID, normalize_step_run, s)


@pytest.mark.parametrize("bad", [
    pytest.param({"extra": 1}, id="extra key"),
    pytest.param({"stepRunDigest": D("0")}, id="digest mismatch"),
    pytest.param({"errorSummary": "boom\ud800"}, id="lone surrogate"),
    pytest.param({"stepRunDigest": None}, id="digest null"),
])
def test_6_3_step_run_unsealed_failures(bad: dict[str, Any]) -> None:
    raises("Invalid", STEP_RUN_INVALID, normalize_step_run, {**_sr(), **bad})


def test_6_3_step_run_digest_uppercase_rejected() -> None:
    s = _sr()
    raises("Invalid", STEP_RUN_INVALID, normalize_step_run, {**s, "stepRunDigest": s["stepRunDigest"].upper()})


@pytest.mark.parametrize("value", [None, [], "x", 1])
def test_6_3_step_run_not_object(value: Any) -> None:
    raises("Invalid", STEP_RUN_INVALID, normalize_step_run, value)


@pytest.mark.parametrize("status", ["pending", "ready", "waiting_approval", "running", "lost", "succeeded", "failed",
                                    "skipped", "cancelled", "timed_out"])
def test_6_3_step_run_valid_statuses_normalize(status: str) -> None:
    s = _sr(status)
    assert normalize_step_run(s) == s
    assert normalize_step_run(reversed_keys(s)) == s
    assert list(normalize_step_run(reversed_keys(s))) == list(STEP_RUN_KEYS)
    assert normalize_step_run(json.loads(canonical_json(s))) == s


def test_6_3_step_run_boundaries_accepted() -> None:
    s = seal_step_run({**_sr("failed"), "errorSummary": "é" * 1024, "attemptCount": 64, "version": 2147483647,
                       "definitionRef": "é" * 256, "outputRef": None, "parentStepRunId": "p" * 128})
    assert normalize_step_run(s) == s
    ok = seal_step_run({**_sr("succeeded"), "outputRef": "o" * 512})
    assert normalize_step_run(ok) == ok


# ==================================================================================================
# §6.9 admission receipt
def _admission_receipt() -> Record:
    receipt: Record = create_admission_bundle(demo_plan())["receipt"]
    return receipt


def _reseal_admission(r: Record) -> Record:
    body = {k: v for k, v in r.items() if k != "receiptDigest"}
    return {**body, "receiptDigest": json_digest("qinglong/plugin-package-workflow-admission-receipt-digest@v1", body)}


ADMISSION_RECEIPT_CASES: dict[str, Callable[[Record], None]] = {
    "extra key": _set("x", 1),
    "missing key": _del("workflowId"),
    "schema": _set("schema", "x"),
    "planId": _set("planId", ""),
    "planDigest": _set("planDigest", D("G")),
    "runId 37": _set("runId", "r" * 37),
    "finalRunVersion": _set("finalRunVersion", 4),
    "finalRunVersion bool": _set("finalRunVersion", True),
    "finalRunEventSequence": _set("finalRunEventSequence", 2),
    "admittedAtMs": _set("admittedAtMs", -1),
    "steps empty": _set("steps", []),
    "step extra key": lambda r: r["steps"][0].__setitem__("x", 1),
    "step eventId 37": lambda r: r["steps"][0].__setitem__("eventId", "e" * 37),
    "duplicate stepKey": lambda r: r["steps"][1].__setitem__("stepKey", "fetch"),
    "duplicate mutationId": lambda r: r["steps"][1].__setitem__("mutationId", r["steps"][0]["mutationId"]),
}


@pytest.mark.parametrize("case", ADMISSION_RECEIPT_CASES)
def test_6_9_admission_receipt_fails_closed(case: str) -> None:
    r = copy.deepcopy(_admission_receipt())
    ADMISSION_RECEIPT_CASES[case](r)
    raises("Invalid", ADMISSION_RECEIPT_INVALID, normalize_admission_receipt, _reseal_admission(r))


def test_6_9_admission_receipt_digest_and_order() -> None:
    r = _admission_receipt()
    raises("Invalid", ADMISSION_RECEIPT_INVALID, normalize_admission_receipt, {**r, "receiptDigest": D("0")})
    shuffled = reversed_keys(r)
    shuffled["steps"] = list(reversed(shuffled["steps"]))
    assert normalize_admission_receipt(shuffled) == r
    assert normalize_admission_receipt(normalize_admission_receipt(r)) == r
    assert normalize_admission_receipt(json.loads(canonical_json(r))) == r


# ==================================================================================================
# §6.10 execution binding and task attempt receipt
BINDING_CASES: dict[str, dict[str, Any]] = {
    "resourceTaskId upper": {"resourceTaskId": "Fetcher"},
    "receipt digest short": {"taskReconciliationReceiptDigest": "8" * 63},
    "taskId pattern": {"taskId": "pkg:Demo:fetcher"},
    "taskId missing pkg": {"taskId": "demo-pkg:fetcher"},
    "taskRevision leading zero": {"taskRevision": "qltd:v1:01:" + D("9")},
    "taskRevision over int31": {"taskRevision": "qltd:v1:2147483648:" + D("9")},
    "taskRevision digest differs": {"taskRevision": "qltd:v1:1:" + D("8")},
    "taskDefinitionDigest int": {"taskDefinitionDigest": 9},
    "executorType unknown": {"executorType": "docker"},
    "executionDigest null": {"executionDigest": None},
}


@pytest.mark.parametrize("case", BINDING_CASES)
def test_6_10_binding_fails_closed(case: str) -> None:
    raises("Invalid", TA_INVALID, normalize_binding, {**DEMO_BINDING, **BINDING_CASES[case]})


def test_6_10_binding_keys() -> None:
    raises("Invalid", TA_INVALID, normalize_binding, {**DEMO_BINDING, "extra": 1})
    raises("Invalid", TA_INVALID, normalize_binding, {k: v for k, v in DEMO_BINDING.items() if k != "taskId"})
    raises("Invalid", TA_INVALID, normalize_binding, list(DEMO_BINDING.items()))
    assert normalize_binding(reversed_keys(DEMO_BINDING)) == DEMO_BINDING
    assert list(normalize_binding(reversed_keys(DEMO_BINDING))) == list(DEMO_BINDING)


def _task_receipt() -> Record:
    plan = demo_plan()
    return make_receipt(plan, step_run_for(plan, "fetch", "ready"), binding=DEMO_BINDING)


TASK_RECEIPT_CASES: dict[str, dict[str, Any]] = {
    "schema": {"schema": "x"},
    "attemptId 37": {"attemptId": "w" * 37},
    "planDigest": {"planDigest": D("Z")},
    "stepRunVersion bool": {"stepRunVersion": True},
    "stepRunVersion 0": {"stepRunVersion": 0},
    "stepRunDigest": {"stepRunDigest": "x"},
    "taskRevision digest differs": {"taskRevision": "qltd:v1:1:" + D("8")},
    "executorType": {"executorType": "x"},
    "attemptNumber 8193": {"attemptNumber": 8193},
    "attemptNumber 0": {"attemptNumber": 0},
    "attemptNumber float": {"attemptNumber": 1.0},
    "eventId 37": {"eventId": "e" * 37},
    "runVersion 0": {"runVersion": 0, "runEventSequence": 0},
    "runEventSequence differs": {"runEventSequence": 5},
    "runEventSequence bool": {"runVersion": 1, "runEventSequence": True},
    "admittedAtMs string": {"admittedAtMs": "2000"},
}


@pytest.mark.parametrize("case", TASK_RECEIPT_CASES)
def test_6_10_task_receipt_fails_closed(case: str) -> None:
    r = seal_task_receipt({**_task_receipt(), **TASK_RECEIPT_CASES[case]})
    raises("Invalid", TA_INVALID, normalize_task_receipt, r)


def test_6_10_task_receipt_digest_keys_and_order() -> None:
    r = _task_receipt()
    assert normalize_task_receipt(r) == r
    assert normalize_task_receipt(reversed_keys(r)) == r and list(normalize_task_receipt(reversed_keys(r))) == list(r)
    assert normalize_task_receipt(json.loads(canonical_json(r))) == r
    raises("Invalid", TA_INVALID, normalize_task_receipt, {**r, "receiptDigest": D("0")})
    raises("Invalid", TA_INVALID, normalize_task_receipt, {**r, "extra": 1})
    raises("Invalid", TA_INVALID, normalize_task_receipt, {k: v for k, v in r.items() if k != "eventId"})
    raises("Invalid", TA_INVALID, normalize_task_receipt, None)


def test_6_10_binding_digest_not_compared_with_plan_step() -> None:
    """taskDefinitionDigest of the binding (9×64) differs from the plan step's (6×64) and is accepted."""
    assert DEMO_BINDING["taskDefinitionDigest"] != demo_plan()["steps"][0]["taskDefinitionDigest"]
    assert normalize_binding(DEMO_BINDING) == DEMO_BINDING


def test_normalizers_reject_wrong_types_without_crashing() -> None:
    """Every value is type-checked: odd JSON types never escape as Python exceptions (README §6)."""
    odd: list[Any] = [None, [], {}, 1.5, True, "x", -1]
    plan = demo_plan()
    for v in odd:
        for key in ("planId", "runId", "target", "steps", "plannedAtMs"):
            raises("Invalid", PLAN_INVALID, normalize_plan, {**plan, key: v})
        s = _sr()
        for key in ("status", "kind", "version", "attemptCount", "readyAtMs", "resultCode", "required"):
            if s[key] == v and type(s[key]) is type(v):
                continue
            raises("Invalid", STEP_RUN_INVALID, normalize_step_run, {**s, key: v})
        for key in DEMO_BINDING:
            if isinstance(v, str):
                continue
            raises("Invalid", TA_INVALID, normalize_binding, {**DEMO_BINDING, key: v})


def test_reference_vectors_agree_with_fixtures() -> None:
    """Sanity: the fixtures' independent §5 implementation reproduces a spec vector."""
    assert json_digest("qinglong/step-run-digest@v1", vector_step_run()) == STEP_RUN_VECTOR
    assert json_digest(DOMAIN_PLAN, json.loads(DEMO_CANONICAL)) == PD
