"""The workflow admission receipt (records.md §6.9): its keys, digest and normalizer."""

from __future__ import annotations

from typing import Any

from . import tables as T
from .canonical import canonical_json, json_digest
from .errors import InvalidRaiser
from .record_common import ADMISSION_RECEIPT_FAIL, Record, canonical, exact_keys
from .values import is_array, is_digest, is_identifier, is_int, is_portable_id, is_resource_id, is_timestamp

ADMISSION_RECEIPT_KEYS = (
    "schema", "planId", "planDigest", "runId", "publicationDigest", "workflowId", "steps",
    "finalRunVersion", "finalRunEventSequence", "admittedAtMs", "receiptDigest",
)
ADMISSION_RECEIPT_STEP_KEYS = ("stepKey", "stepRunId", "stepRunDigest", "mutationId", "eventId")


def admission_receipt_digest(receipt: Record) -> str:
    return json_digest(T.DOMAIN_ADMISSION_RECEIPT, {k: receipt[k] for k in ADMISSION_RECEIPT_KEYS[:-1]})


def normalize_admission_receipt(x: Any, fail: InvalidRaiser = ADMISSION_RECEIPT_FAIL) -> Record:
    exact_keys(x, ADMISSION_RECEIPT_KEYS, (), fail, "admission receipt")
    fail.check(x["schema"] == T.SCHEMA_ADMISSION_RECEIPT, "admission receipt schema mismatch")
    fail.check(is_identifier(x["planId"]), "planId invalid")
    fail.check(is_digest(x["planDigest"]), "planDigest invalid")
    fail.check(is_portable_id(x["runId"]), "runId invalid")
    fail.check(is_digest(x["publicationDigest"]), "publicationDigest invalid")
    fail.check(is_resource_id(x["workflowId"]), "workflowId invalid")
    steps_in = x["steps"]
    fail.check(is_array(steps_in) and 1 <= len(steps_in) <= T.MAX_WORKFLOW_STEPS, "steps must be 1..128 entries")
    steps = []
    for i, e in enumerate(steps_in):
        exact_keys(e, ADMISSION_RECEIPT_STEP_KEYS, (), fail, f"receipt step {i}")
        fail.check(is_resource_id(e["stepKey"]) and is_identifier(e["stepRunId"]) and is_digest(e["stepRunDigest"])
                   and is_identifier(e["mutationId"]) and is_portable_id(e["eventId"]),
                   f"receipt step {i} invalid")
        steps.append(canonical(e, ADMISSION_RECEIPT_STEP_KEYS))
    steps.sort(key=lambda e: e["stepKey"])
    for field in ADMISSION_RECEIPT_STEP_KEYS:
        if field != "stepRunDigest":
            fail.check(len({e[field] for e in steps}) == len(steps), f"receipt steps repeat a {field}")
    n = len(steps) + 1
    fail.check(is_int(x["finalRunVersion"]) and x["finalRunVersion"] == n, "finalRunVersion must be steps + 1")
    fail.check(is_int(x["finalRunEventSequence"]) and x["finalRunEventSequence"] == n,
               "finalRunEventSequence must be steps + 1")
    fail.check(is_timestamp(x["admittedAtMs"]), "admittedAtMs invalid")
    r = {**canonical(x, ADMISSION_RECEIPT_KEYS), "steps": steps}
    fail.check(is_digest(x["receiptDigest"]) and admission_receipt_digest(r) == x["receiptDigest"],
               "receiptDigest mismatch")
    fail.check(len(canonical_json(r)) <= T.MAX_ADMISSION_RECEIPT_BYTES, "receipt exceeds 262144 bytes")
    return r
