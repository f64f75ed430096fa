"""The execution binding and the task attempt receipt (records.md §6.10): keys, shape, agreement with
the plan step, digest and normalizer."""

from __future__ import annotations

from typing import Any

from . import tables as T
from .canonical import canonical_json, json_digest
from .errors import InvalidRaiser
from .record_common import BINDING_FAIL, TASK_RECEIPT_FAIL, Record, canonical, exact_keys
from .values import (
    INT31_MAX,
    is_digest,
    is_identifier,
    is_int,
    is_int_in,
    is_portable_id,
    is_resource_id,
    is_runtime_task_id,
    is_timestamp,
    task_revision_digest,
)

BINDING_KEYS = (
    "resourceTaskId", "taskReconciliationReceiptDigest", "taskId", "taskRevision", "taskDefinitionDigest",
    "executorType", "executionDigest",
)
TASK_RECEIPT_KEYS = (
    "schema", "attemptId", "planDigest", "runId", "stepRunId", "stepRunVersion", "stepRunDigest",
    *BINDING_KEYS, "attemptNumber", "eventId", "runVersion", "runEventSequence", "admittedAtMs",
    "receiptDigest",
)


def _binding_shape_problem(x: Record) -> str | None:
    if not is_resource_id(x["resourceTaskId"]):
        return "resourceTaskId invalid"
    if not is_digest(x["taskReconciliationReceiptDigest"]):
        return "taskReconciliationReceiptDigest invalid"
    if not is_runtime_task_id(x["taskId"]):
        return "taskId invalid"
    if not is_digest(x["taskDefinitionDigest"]):
        return "taskDefinitionDigest invalid"
    suffix = task_revision_digest(x["taskRevision"])
    if suffix is None or suffix != x["taskDefinitionDigest"]:
        return "taskRevision invalid or its digest differs from taskDefinitionDigest"
    if x["executorType"] not in T.EXECUTOR_TYPES:
        return "executorType invalid"
    if not is_digest(x["executionDigest"]):
        return "executionDigest invalid"
    return None


def normalize_binding(x: Any, fail: InvalidRaiser = BINDING_FAIL) -> Record:
    exact_keys(x, BINDING_KEYS, (), fail, "execution binding")
    problem = _binding_shape_problem(x)
    if problem:
        fail(f"execution binding {problem}")
    return canonical(x, BINDING_KEYS)


def binding_plan_problem(binding: Record, plan: Record, step: Record) -> str | None:
    """Agreement of a binding with its plan step (records.md §6.10), or the disagreement."""
    if binding["resourceTaskId"] != step["taskId"]:
        return "resourceTaskId differs from the plan step taskId"
    if binding["taskId"] != f"pkg:{plan['target']['packageName']}:{step['taskId']}":
        return "taskId differs from pkg:<packageName>:<taskId>"
    if task_revision_digest(binding["taskRevision"]) != binding["taskDefinitionDigest"]:
        return "taskRevision digest differs from taskDefinitionDigest"
    return None


def task_receipt_digest(receipt: Record) -> str:
    return json_digest(T.DOMAIN_TASK_RECEIPT, {k: receipt[k] for k in TASK_RECEIPT_KEYS[:-1]})


def normalize_task_receipt(x: Any, fail: InvalidRaiser = TASK_RECEIPT_FAIL) -> Record:
    exact_keys(x, TASK_RECEIPT_KEYS, (), fail, "task attempt receipt")
    fail.check(x["schema"] == T.SCHEMA_TASK_RECEIPT, "task attempt receipt schema mismatch")
    fail.check(is_portable_id(x["attemptId"]), "attemptId invalid")
    fail.check(is_digest(x["planDigest"]), "planDigest invalid")
    fail.check(is_portable_id(x["runId"]), "runId invalid")
    fail.check(is_identifier(x["stepRunId"]), "stepRunId invalid")
    fail.check(is_int_in(x["stepRunVersion"], 1, INT31_MAX), "stepRunVersion invalid")
    fail.check(is_digest(x["stepRunDigest"]), "stepRunDigest invalid")
    problem = _binding_shape_problem(x)
    if problem:
        fail(f"task attempt receipt {problem}")
    fail.check(is_int_in(x["attemptNumber"], 1, T.MAX_RUN_ATTEMPTS), "attemptNumber invalid")
    fail.check(is_portable_id(x["eventId"]), "eventId invalid")
    fail.check(is_int_in(x["runVersion"], 1, INT31_MAX), "runVersion invalid")
    fail.check(x["runEventSequence"] == x["runVersion"] and is_int(x["runEventSequence"]),
               "runEventSequence must equal runVersion")
    fail.check(is_timestamp(x["admittedAtMs"]), "admittedAtMs invalid")
    r = canonical(x, TASK_RECEIPT_KEYS)
    fail.check(is_digest(x["receiptDigest"]) and task_receipt_digest(r) == x["receiptDigest"],
               "receiptDigest mismatch")
    fail.check(len(canonical_json(r)) <= T.MAX_TASK_RECEIPT_BYTES, "receipt exceeds 16384 bytes")
    return r
