"""The published test vectors of records.md §8, as data copied from the spec, and their recomputation.

The expected values below are facts of the specification (records.md §8.1–§8.3); the recomputation
goes through the model. The gate's `spec-vectors` check and the unit tests both use them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qlwf.model import ids
from qlwf.model.admission import create_admission_bundle
from qlwf.model.attempts import build_task_attempt_admission
from qlwf.model.canonical import canonical_json
from qlwf.model.records import seal_step_run, sign_plan

PLAN_ID_PREFIX = "plugin-package:" + "3" * 64 + ":task:"


def demo_unsigned_plan() -> dict[str, Any]:
    """The plan of records.md §8.2."""
    def step(run_id: str, key: str, task: str, digest: str, needs: list[str]) -> dict[str, Any]:
        return {"stepRunId": run_id, "stepKey": key, "taskId": task, "taskDefinitionRef": PLAN_ID_PREFIX + task,
                "taskDefinitionDigest": digest * 64, "needs": needs,
                "initialStatus": "pending" if needs else "ready", "required": True}
    return {
        "schema": "qinglong/plugin-package-workflow-execution-plan@v1", "planId": "plan-0001", "runId": "run-0001",
        "target": {"projectId": "proj-1", "packageName": "demo-pkg", "installationId": "inst-1",
                   "lockDigest": "1" * 64, "generation": 1, "generationDigest": "2" * 64,
                   "materializedRevisionDigest": "3" * 64, "publicationDigest": "4" * 64, "workflowId": "nightly",
                   "workflowDefinitionDigest": "5" * 64},
        "steps": [step("sr-fetch", "fetch", "fetcher", "6", []),
                  step("sr-report", "report", "reporter", "7", ["fetch"])],
        "plannedAtMs": 1000,
    }


DEMO_BINDING = {
    "resourceTaskId": "fetcher", "taskReconciliationReceiptDigest": "8" * 64, "taskId": "pkg:demo-pkg:fetcher",
    "taskRevision": "qltd:v1:1:" + "9" * 64, "taskDefinitionDigest": "9" * 64, "executorType": "remote_worker",
    "executionDigest": "e" * 64,
}

# name → expected value (records.md §8)
EXPECTED: dict[str, Any] = {
    "8.1 frontier ready H": "d0f82064b1a59594de5e0fe69f88bd22b31920dd5dd0589281b6f4109991c703",
    "8.1 frontier skipped H": "b1f8252827685d229b2879f3012c743b3359a9a9438d014512e43e1d85708f22",
    "8.1 terminal succeeded v6": "wft:45188057510d46164553c0dc71789120",
    "8.1 terminal failed v6": "wft:a149dc221045f2b819105aabd42dcd27",
    "8.1 stepRunDigest": "0f62d538a9c0e5d3b2fadedc29bb7422276b237a464200e2e9c63b6667549410",
    "8.2 unsigned plan bytes": 1345,
    "8.2 signed plan bytes": 1425,
    "8.2 planDigest": "8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac3904300583c2d",
    "8.2 admission event id": "wfa:8f52bf506f9a5824edfd235258e2cace",
    "8.2 step 1 ids": ("wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:1",
                       "wfe:8f52bf506f9a5824edfd235258e:1"),
    "8.2 step 1 stepRunDigest": "d91b792cb73f66df294415695ad64f1b3412f434d6d91c2190923970f3003a10",
    "8.2 step 1 mutationDigest": "a8c562852ab2cfce632a3bce2c8585d33cc59793cf13c275a52b3ac9f52801b6",
    "8.2 step 2 ids": ("wfm:8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac39043:2",
                       "wfe:8f52bf506f9a5824edfd235258e:2"),
    "8.2 step 2 stepRunDigest": "84f68d0304ead8f7853ef0e4161bfee6165fc051240df096ca93e735e23db054",
    "8.2 step 2 mutationDigest": "99f4bedcc2f96c6a6eb62e7d982ecaef8c784072b9380360213fe5d008379bc4",
    "8.2 admission receiptDigest": "859d2325758e7c130cc6fe2c8b5ba472bb1e783ecda52bb832c2e8439e8a79a3",
    "8.3 attempt ids": ("wta:955364285ed507a7fdba9d43dbc8c10f", "wte:955364285ed507a7fdba9d43dbc8c10f"),
    "8.3 task receipt digest": "a850e847b992bdefd003c44f9877d33f1e5a894b7619c1d63c5b5b432ead624a",
    "8.3 frontier sr-report ids": ("workflow-frontier:cd617b8053e4bfa311a9fed8b58e40cc391813571eee3a955a8cd34eba3e2d5b",
                                   "wff:cd617b8053e4bfa311a9fed8b58e40cc"),
    "8.3 terminal v9 succeeded": "wft:99992160943748a7355fc32fe787485c",
    "8.3 recovery R unstarted": "06dbc6c81ff52dfe107e4ce28836a165",
    "8.3 recovery R not running": "f48fdd529a5040af98312ad5f7f103b4",
    "8.3 cancellation attempt": "wca:ce5025fa71c6615f2c2d8597cbed854b",
    "8.3 cancellation step": ("wcm:db59cdbd15559a88e05e26f040cbc105", "wcs:db59cdbd15559a88e05e26f040cbc105"),
    "8.3 cancellation run": "wcr:c006cd11050410f3cf8b2f1e0c90cceb",
    "8.3 cancel request": "wcq:970e0f7f06ad4e763057d38356ff0c07",
    "8.3 lease_claimed": "wxa:f70954cfca5dc439deb48588b67afb61",
    "8.3 lease_released": "wxa:8d5c683b961a1bc6d05803bf670ad81a",
    "8.3 attempt_starting": "wxa:f053b0e8ef12e2ef6b8cee4c3bab859f",
    "8.3 attempt_running": "wxa:a500ac76e492b8989f5557f091ff2afa",
    "8.3 attempt_terminal": "wxa:eee299897910eae285761b505731010d",
    "8.3 timeout_requested": "wxa:06973f311c632b8ad496e162907b5dc5",
    "8.3 step_running": ("wxm:b0a14f8f02d01327442341ba14232e7b", "wxe:b0a14f8f02d01327442341ba14232e7b"),
    "8.3 step_terminal": ("wxm:0fd10e14de6c751fdae498183082d9a7", "wxe:0fd10e14de6c751fdae498183082d9a7"),
}


def compute() -> dict[str, Any]:
    """Recompute every vector through the model."""
    a64 = "a" * 64
    s81 = seal_step_run({
        "schema": "qinglong/step-run@v1", "id": "wf-summary-x", "runId": "wf-run-x", "parentStepRunId": None,
        "stepKey": "summarize", "kind": "task", "definitionRef": "plugin-package:" + "b" * 64 + ":task:beta",
        "definitionDigest": "c" * 64, "required": True, "status": "pending", "version": 1, "attemptCount": 0,
        "inputRef": None, "outputRef": None, "approvalRequestId": None, "readyAtMs": None, "startedAtMs": None,
        "finishedAtMs": None, "resultCode": None, "errorSummary": None, "createdAtMs": 3000, "updatedAtMs": 3000,
        "lastMutationId": "wfm:" + "a" * 56 + ":2"})
    plan = sign_plan(demo_unsigned_plan())
    pd = plan["planDigest"]
    bundle = create_admission_bundle(plan)
    m1, m2 = bundle["stepMutations"]
    unsigned = {k: v for k, v in plan.items() if k != "planDigest"}
    attempt_id = ids.task_attempt_ids(pd, "sr-fetch", 1)[0]
    run4 = {**bundle["run"], "version": 3, "eventSequence": 3}
    receipt = build_task_attempt_admission({"plan": plan, "run": run4, "stepRun": m1["stepRun"],
                                            "binding": DEMO_BINDING, "attemptNumber": 1,
                                            "admittedAtMs": 2000})["receipt"]
    x: Callable[[str], str] = lambda kind: ids.task_execution_event_id("run-0001", attempt_id, 1, kind)  # noqa: E731
    xs: Callable[[str], tuple[str, str]] = lambda kind: ids.task_execution_step_ids(  # noqa: E731
        "run-0001", attempt_id, 1, kind)
    c = ids.cancellation_hash
    return {
        "8.1 frontier ready H": ids.frontier_step_hash(a64, "wf-summary-x", 1, "ready"),
        "8.1 frontier skipped H": ids.frontier_step_hash(a64, "wf-summary-x", 1, "skipped"),
        "8.1 terminal succeeded v6": ids.frontier_terminal_event_id(a64, 6, "succeeded"),
        "8.1 terminal failed v6": ids.frontier_terminal_event_id(a64, 6, "failed"),
        "8.1 stepRunDigest": s81["stepRunDigest"],
        "8.2 unsigned plan bytes": len(canonical_json(unsigned)),
        "8.2 signed plan bytes": len(canonical_json(plan)),
        "8.2 planDigest": pd,
        "8.2 admission event id": bundle["admissionEvent"]["id"],
        "8.2 step 1 ids": (m1["mutationId"], m1["event"]["id"]),
        "8.2 step 1 stepRunDigest": m1["stepRun"]["stepRunDigest"],
        "8.2 step 1 mutationDigest": m1["mutationDigest"],
        "8.2 step 2 ids": (m2["mutationId"], m2["event"]["id"]),
        "8.2 step 2 stepRunDigest": m2["stepRun"]["stepRunDigest"],
        "8.2 step 2 mutationDigest": m2["mutationDigest"],
        "8.2 admission receiptDigest": bundle["receipt"]["receiptDigest"],
        "8.3 attempt ids": ids.task_attempt_ids(pd, "sr-fetch", 1),
        "8.3 task receipt digest": receipt["receiptDigest"],
        "8.3 frontier sr-report ids": ids.frontier_step_ids(pd, "sr-report", 1, "ready"),
        "8.3 terminal v9 succeeded": ids.frontier_terminal_event_id(pd, 9, "succeeded"),
        "8.3 recovery R unstarted": ids.recovery_hash("run-0001", attempt_id, 0, "sr-fetch", 1,
                                                      "unstarted_claim_expired"),
        "8.3 recovery R not running": ids.recovery_hash("run-0001", attempt_id, 1, "sr-fetch", 2,
                                                        "execution_not_running"),
        "8.3 cancellation attempt": "wca:" + c("run-0001", 5000, "attempt", attempt_id, 0),
        "8.3 cancellation step": ("wcm:" + c("run-0001", 5000, "step", "sr-report", 1),
                                  "wcs:" + c("run-0001", 5000, "step", "sr-report", 1)),
        "8.3 cancellation run": "wcr:" + c("run-0001", 5000, "run", "run-0001", 7),
        "8.3 cancel request": ids.cancel_request_event_id("run-0001", 5000, "user"),
        **{f"8.3 {k}": x(k) for k in ids.TASK_EXECUTION_ATTEMPT_KINDS},
        **{f"8.3 {k}": xs(k) for k in ids.TASK_EXECUTION_STEP_KINDS},
    }


def mismatches() -> list[str]:
    got = compute()
    return [f"{k}: expected {v!r}, model gives {got.get(k)!r}" for k, v in EXPECTED.items() if got.get(k) != v]
