"""Regenerate the example snapshots from scenarios driven through the model (run from the repo root).

The files are INPUTS for `qlwf oracle`; each is a ql3 snapshot taken from a model state, so it is
consistent by construction. tests/app/oracle/test_oracle_cli.py checks that they are up to date.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qlwf.model import evidence
from qlwf.model.invariants import consistent_binding
from qlwf.model.records import Record, sign_plan
from qlwf.model.system import Outcome, WorkflowSystem

HERE = Path(__file__).parent
D = {c: c * 64 for c in "123456789abcdef"}


def demo_plan(run_id: str, plan_id: str, steps: list[tuple[str, list[str]]], planned_at: int = 1000) -> dict[str, Any]:
    rev = D["3"]
    return sign_plan({
        "schema": "qinglong/plugin-package-workflow-execution-plan@v1", "planId": plan_id, "runId": run_id,
        "target": {"projectId": "proj-1", "packageName": "demo-pkg", "installationId": "inst-1",
                   "lockDigest": D["1"], "generation": 1, "generationDigest": D["2"],
                   "materializedRevisionDigest": rev, "publicationDigest": D["4"], "workflowId": "nightly",
                   "workflowDefinitionDigest": D["5"]},
        "steps": [{"stepRunId": f"sr-{key}", "stepKey": key, "taskId": key,
                   "taskDefinitionRef": f"plugin-package:{rev}:task:{key}", "taskDefinitionDigest": D["6"],
                   "needs": needs, "initialStatus": "pending" if needs else "ready", "required": True}
                  for key, needs in steps],
        "plannedAtMs": planned_at,
    })


def ok(out: Outcome) -> Record:
    """The result of a step the scenario needs to commit; a refusal stops the build. Not an `assert`:
    `python -O` would drop the command with it (decisions Q-112)."""
    if not out.ok or out.result is None:
        raise RuntimeError(f"an example scenario's step was refused: {out.error}")
    return out.result


DIAMOND = [("fetch", []), ("left", ["fetch"]), ("right", ["fetch"]), ("report", ["left", "right"])]
CHAIN = [("extract", []), ("transform", ["extract"]), ("load", ["transform"]), ("notify", ["load"])]


def run_attempt(w: WorkflowSystem, run_id: str, step_id: str, *, until: str, exit_code: int = 0,
                worker: str = "worker-1") -> str:
    """Drive one attempt of `step_id` to `until` ∈ {claimed, leased, starting, running, done, failed_start}."""
    adm = w.state.admission_of_run(run_id)[0]
    step = next(s for s in adm["plan"]["steps"] if s["stepRunId"] == step_id)
    admitted = ok(w.apply("admit_task_attempt", runId=run_id, stepRunId=step_id,
                          binding=consistent_binding(adm["plan"], step)))
    aid: str = admitted["attempt"]["id"]
    plan_order = ["claimed", "leased", "starting", "running", "done"]
    fence: dict[str, Any] = {"attemptId": aid, "workerId": worker, "leaseGeneration": 1}
    steps = {
        "leased": lambda: w.apply("claim_lease", attemptId=aid, workerId=worker, durationMs=30000),
        "starting": lambda: w.apply("start_attempt", **fence, timeoutMs=None),
        "running": lambda: w.apply("record_running", **fence),
        "done": lambda: w.apply("complete_attempt", **fence, exitCode=exit_code),
    }
    if until == "failed_start":
        for stage in ("leased", "starting"):
            ok(steps[stage]())
        ok(w.apply("fail_start", **fence))
        return aid
    for stage in plan_order[1: plan_order.index(until) + 1]:
        ok(steps[stage]())
    return aid


def frontier_snapshot(w: WorkflowSystem, run_id: str) -> dict[str, Any]:
    adm = w.state.admission_of_run(run_id)[0]
    return {"plan": adm["plan"], "run": w.state.runs[run_id], "stepRuns": w.state.steps_of_run(run_id),
            "observedAtMs": w.state.clock}


def cancel_snapshot(w: WorkflowSystem, run_id: str) -> dict[str, Any]:
    active = []
    for a in sorted(w.state.attempts_of_run(run_id), key=lambda a: a["id"]):
        if a["status"] in ("claimed", "starting", "running"):
            lease = w.state.leases.get(a["id"])
            active.append({"admission": w.state.receipts[a["id"]], "attempt": a,
                           "leaseStatus": lease["status"] if lease else None})
    return {"run": w.state.runs[run_id], "stepRuns": w.state.steps_of_run(run_id), "activeTaskAttempts": active,
            "observedAtMs": w.state.clock}


def build() -> dict[str, Any]:
    files: dict[str, Any] = {}
    plan = demo_plan("run-diamond", "plan-diamond", DIAMOND)
    files["admit-workflow-diamond.json"] = plan
    w = WorkflowSystem(clock=1000)
    ok(w.apply("admit_workflow", plan=plan))
    w.advance(1000)
    run_attempt(w, "run-diamond", "sr-fetch", until="done")
    w.advance(500)
    files["frontier-diamond-root-succeeded.json"] = frontier_snapshot(w, "run-diamond")

    chain = demo_plan("run-chain", "plan-chain", CHAIN)
    w2 = WorkflowSystem(clock=1000)
    ok(w2.apply("admit_workflow", plan=chain))
    w2.advance(1000)
    run_attempt(w2, "run-chain", "sr-extract", until="done", exit_code=3)
    w2.advance(500)
    files["frontier-chain-root-failed.json"] = frontier_snapshot(w2, "run-chain")

    w3 = WorkflowSystem(clock=1000)
    ok(w3.apply("admit_workflow", plan=demo_plan("run-cancel", "plan-cancel", DIAMOND)))
    w3.advance(1000)
    run_attempt(w3, "run-cancel", "sr-fetch", until="done")
    ok(w3.apply("advance_frontier", runId="run-cancel"))
    run_attempt(w3, "run-cancel", "sr-left", until="running")
    adm = w3.state.admission_of_run("run-cancel")[0]
    right = next(s for s in adm["plan"]["steps"] if s["stepKey"] == "right")
    ok(w3.apply("admit_task_attempt", runId="run-cancel", stepRunId="sr-right",
                    binding=consistent_binding(adm["plan"], right)))
    w3.advance(1000)
    ok(w3.apply("request_cancel", runId="run-cancel", reason="user", actor={"type": "user", "id": "alice"}))
    w3.advance(100)
    files["cancel-running-sibling-blocks.json"] = cancel_snapshot(w3, "run-cancel")

    w4 = WorkflowSystem(clock=1000)
    ok(w4.apply("admit_workflow", plan=demo_plan("run-timeout", "plan-timeout", CHAIN)))
    w4.advance(1000)
    run_attempt(w4, "run-timeout", "sr-extract", until="leased")
    ok(w4.apply("request_cancel", runId="run-timeout", reason="timeout", actor={"type": "scheduler"}))
    w4.advance(60000)
    files["cancel-timeout-expired-lease.json"] = cancel_snapshot(w4, "run-timeout")
    attempt = next(iter(w4.state.attempts.values()))
    files["recover-unstarted-claim.json"] = {
        "admission": w4.state.receipts[attempt["id"]], "run": w4.state.runs["run-timeout"], "attempt": attempt,
        "stepRun": w4.state.step_runs[attempt["stepRunId"]], "reason": "unstarted_claim_expired",
        "observedAtMs": w4.state.clock}

    w5 = WorkflowSystem(clock=1000)
    ok(w5.apply("admit_workflow", plan=demo_plan("run-admit", "plan-admit", DIAMOND)))
    w5.advance(2000)
    step = next(s for s in w5.state.admission_of_run("run-admit")[0]["plan"]["steps"] if s["stepKey"] == "fetch")
    files["admit-attempt-fetch.json"] = {
        "plan": w5.state.admission_of_run("run-admit")[0]["plan"], "run": w5.state.runs["run-admit"],
        "stepRun": w5.state.step_runs["sr-fetch"], "binding": consistent_binding(
            w5.state.admission_of_run("run-admit")[0]["plan"], step), "attemptNumber": 1, "admittedAtMs": 3000}
    # The same ready StepRun as ql3 hands it to admission: the reconciliation receipt of the plan's
    # generation and the Task's execution revision (task-attempts.md §3A), made by the model's builders.
    admit_plan = w5.state.admission_of_run("run-admit")[0]["plan"]
    receipt = evidence.build_task_reconciliation(admit_plan, committed_at_ms=900, revisions={"fetch": 7})
    for executor, build in (("local", evidence.build_local_execution_revision),
                            ("cluster", evidence.build_cluster_execution_revision)):
        files[f"admit-attempt-ql3-{executor}.json"] = evidence.build_ql3_admission_input(
            admit_plan, w5.state.runs["run-admit"], w5.state.step_runs["sr-fetch"], receipt,
            build(admit_plan, receipt, "fetch", created_at_ms=950), attempt_number=1, admitted_at_ms=3000)
    files["batch.jsonl"] = [
        {"fn": "frontier", "input": files["frontier-diamond-root-succeeded.json"]},
        {"fn": "cancel", "input": files["cancel-running-sibling-blocks.json"]},
        {"fn": "admit-attempt", "input": files["admit-attempt-ql3-cluster.json"]},
        {"fn": "frontier", "input": {"plan": plan}},
    ]
    return files


def render(name: str, content: Any) -> str:
    if name.endswith(".jsonl"):
        return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in content)
    return json.dumps(content, indent=2) + "\n"


def main() -> None:
    for name, content in build().items():
        (HERE / name).write_text(render(name, content), encoding="utf-8")


if __name__ == "__main__":
    main()
