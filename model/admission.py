"""Workflow admission bundle (frontier.md §2)."""

from __future__ import annotations

from typing import Any

from . import ids
from . import tables as T
from .records import (
    ADMISSION_RECEIPT_KEYS,
    PLAN_FAIL,
    Record,
    admission_receipt_digest,
    make_event,
    normalize_plan,
)
from .steprun import create_step_run_mutation, ledger_entry

SYSTEM_ACTOR: Record = {"type": "system"}


def admission_run(plan: Record) -> Record:
    """The Run born by admission (records.md §6.2), keys 1–16 in canonical order."""
    t = plan["target"]
    n = len(plan["steps"])
    return {
        "id": plan["runId"], "projectId": t["projectId"], "taskId": t["workflowId"],
        "taskRevision": t["publicationDigest"],
        "taskSnapshotRef": f"plugin-package:{t['publicationDigest']}:workflow:{t['workflowId']}",
        "triggerType": T.TRIGGER_TYPE, "executionOrigin": T.EXECUTION_ORIGIN,
        "executionOwner": T.EXECUTION_OWNER, "requestId": plan["planId"], "status": "running",
        "version": n + 1, "eventSequence": n + 1, "priority": 0,
        "idempotencyKey": f"plugin-package-workflow:{plan['planId']}",
        "createdAtMs": plan["plannedAtMs"], "startedAtMs": plan["plannedAtMs"],
    }


RUN_IDENTITY_KEYS = ("id", "projectId", "taskId", "taskRevision", "taskSnapshotRef", "triggerType",
                     "executionOrigin", "executionOwner", "requestId", "priority", "idempotencyKey")


def create_admission_bundle(plan_in: Any) -> Record:
    return normalized_plan_bundle(normalize_plan(plan_in))


def normalized_plan_bundle(plan: Record) -> Record:
    """create_admission_bundle of a plan normalize_plan returned and nobody changed since (a
    command's own normalized argument): the same answer, without normalizing the plan again."""
    pd = plan["planDigest"]
    t = plan["plannedAtMs"]
    n = len(plan["steps"])
    event = make_event(
        event_id=ids.admission_event_id(pd), run_id=plan["runId"], sequence=1, type_="workflow.admitted",
        actor=SYSTEM_ACTOR, created_at_ms=t,
        payload={"planId": plan["planId"], "planDigest": pd,
                 "publicationDigest": plan["target"]["publicationDigest"],
                 "workflowId": plan["target"]["workflowId"],
                 "workflowDefinitionDigest": plan["target"]["workflowDefinitionDigest"], "stepCount": n},
    )
    mutations = []
    receipt_steps = []
    for i, step in enumerate(plan["steps"], start=1):
        event_id = ids.admission_step_event_id(pd, i)
        mutation_id = ids.admission_step_mutation_id(pd, i)
        m = create_step_run_mutation(
            {"id": step["stepRunId"], "runId": plan["runId"], "stepKey": step["stepKey"], "kind": "task",
             "definitionRef": step["taskDefinitionRef"], "definitionDigest": step["taskDefinitionDigest"],
             "required": True, "initialStatus": step["initialStatus"], "createdAtMs": t},
            mutation_id,
            {"expectedRunVersion": i, "expectedRunEventSequence": i, "eventId": event_id, "dedupeKey": event_id,
             "actor": SYSTEM_ACTOR},
        )
        mutations.append(m)
        receipt_steps.append({"stepKey": step["stepKey"], "stepRunId": step["stepRunId"],
                              "stepRunDigest": m["stepRun"]["stepRunDigest"], "mutationId": mutation_id,
                              "eventId": event_id})
    receipt: Record = {
        "schema": T.SCHEMA_ADMISSION_RECEIPT, "planId": plan["planId"], "planDigest": pd, "runId": plan["runId"],
        "publicationDigest": plan["target"]["publicationDigest"], "workflowId": plan["target"]["workflowId"],
        "steps": receipt_steps, "finalRunVersion": n + 1, "finalRunEventSequence": n + 1, "admittedAtMs": t,
    }
    receipt["receiptDigest"] = admission_receipt_digest(receipt)
    PLAN_FAIL.check(list(receipt) == list(ADMISSION_RECEIPT_KEYS), "receipt key order")
    return {"plan": plan, "run": admission_run(plan), "admissionEvent": event, "stepMutations": mutations,
            "receipt": receipt}


def admission_ledger(bundle: Record) -> list[Record]:
    t = bundle["plan"]["plannedAtMs"]
    return [ledger_entry(m, t) for m in bundle["stepMutations"]]


def admission_step_entries(plan: Record, bundle: Record) -> list[Record]:
    """records.md §6.9 admission step ledger entries (storage form), in canonical step order."""
    out = []
    for step, entry in zip(plan["steps"], bundle["receipt"]["steps"], strict=True):
        out.append({
            "planDigest": plan["planDigest"], "runId": plan["runId"], "stepKey": step["stepKey"],
            "stepRunId": step["stepRunId"], "taskId": step["taskId"], "taskDefinitionRef": step["taskDefinitionRef"],
            "taskDefinitionDigest": step["taskDefinitionDigest"], "needs": list(step["needs"]),
            "initialStatus": step["initialStatus"], "mutationId": entry["mutationId"], "eventId": entry["eventId"],
        })
    return out
