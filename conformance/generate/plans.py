"""Plans and execution bindings for generated and golden traces (harness alphabet, records.md §3)."""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.attempts_ql3 import derive_binding
from qlwf.model.evidence import (
    build_cluster_execution_revision,
    build_local_execution_revision,
    build_task_reconciliation,
)
from qlwf.model.records import sign_plan, task_definition_ref

Record = dict[str, Any]
MATERIALIZED = "3" * 64
TASK_DIGEST = "6" * 64
PACKAGE = "demo-pkg"


def target(workflow_id: str = "nightly") -> Record:
    return {"projectId": "proj-1", "packageName": PACKAGE, "installationId": "inst-1", "lockDigest": "1" * 64,
            "generation": 1, "generationDigest": "2" * 64, "materializedRevisionDigest": MATERIALIZED,
            "publicationDigest": "4" * 64, "workflowId": workflow_id, "workflowDefinitionDigest": "5" * 64}


def make_plan(run_id: str, plan_id: str, needs: dict[str, list[str]], planned_at_ms: int,
              workflow_id: str = "nightly", step_ids: dict[str, str] | None = None) -> Record:
    """A signed plan whose step `k` (StepRun id `step_ids[k]`, default `<run_id>:<k>`) needs `needs[k]`."""
    ids = step_ids or {k: step_run_id(run_id, k) for k in needs}
    steps = [{"stepRunId": ids[k], "stepKey": k, "taskId": k,
              "taskDefinitionRef": task_definition_ref(MATERIALIZED, k), "taskDefinitionDigest": TASK_DIGEST,
              "needs": sorted(n), "initialStatus": "pending" if n else "ready", "required": True}
             for k, n in needs.items()]
    return sign_plan({"schema": T.SCHEMA_PLAN, "planId": plan_id, "runId": run_id, "target": target(workflow_id),
                      "steps": steps, "plannedAtMs": planned_at_ms})


def step_run_id(run_id: str, step_key: str) -> str:
    return f"{run_id}:{step_key}"


def admission(plan: Record, step_key: str, executor_type: str = "remote_worker", revision: int = 1,
              task_key: str | None = None) -> tuple[Record, Record]:
    """(binding, evidence) of a task-attempt admission of the plan step `step_key`: the ql3 evidence
    (the plan's Task reconciliation receipt, the step's Task at `revision`, and the execution revision
    of `task_key`'s Task, default the step's own, built by the model's evidence builders) and the
    binding task-attempts.md §3A derives from it. A `task_key` other than the step's gives the binding
    ql3 would derive from another Task's revision, which admission refuses."""
    task = task_key or step_key
    receipt = build_task_reconciliation(plan, revisions={task: revision} if revision != 1 else None)
    build = build_local_execution_revision if executor_type == "local_process" else build_cluster_execution_revision
    execution = build(plan, receipt, task)
    step = next(s for s in plan["steps"] if s["stepKey"] == step_key)
    return derive_binding(step, receipt, execution), {"taskReconciliation": receipt, "execution": execution}


def binding(step_key: str, executor_type: str = "remote_worker", revision: int = 1) -> Record:
    """An execution binding that agrees with the plan step of `make_plan` (records.md §6.10), without
    evidence behind it: for unit tests of a backend that takes the binding as given. Traces use
    `admission`, whose binding a content-addressed store can derive."""
    digest = "9" * 64
    return {"resourceTaskId": step_key, "taskReconciliationReceiptDigest": "8" * 64,
            "taskId": f"pkg:{PACKAGE}:{step_key}", "taskRevision": f"qltd:v1:{revision}:{digest}",
            "taskDefinitionDigest": digest, "executorType": executor_type, "executionDigest": "e" * 64}
