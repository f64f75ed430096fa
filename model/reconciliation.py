"""ql3's Task reconciliation receipt (`qinglong/plugin-package-task-reconciliation@v1`, task-attempts.md §3A).

The receipt records which runtime Tasks one package generation created, kept, updated or disabled,
each at a revision with its content digest. Task attempt admission reads the item of the step's
Task from it (check A16) and binds the attempt to the receipt's digest.
"""

from __future__ import annotations

from typing import Any

from . import collation
from . import tables as T
from .canonical import json_digest
from .errors import evidence_check
from .execution_parts import is_bytes_text
from .records import Record
from .values import SAFE_INT_MAX, is_array, is_digest, is_int, is_object, is_package_name, is_timestamp

RECEIPT_KEYS = ("schema", "projectId", "packageName", "generation", "generationDigest", "materializedRevisionDigest",
                "lockDigest", "previousLockDigest", "committedAtMs", "items", "receiptDigest")
ITEM_KEYS = ("taskId", "revision", "disposition", "contentDigest")


def reconciliation_receipt_digest(receipt: Record) -> str:
    """json_digest of keys 1-10 (everything but receiptDigest) in canonical order."""
    return json_digest(T.DOMAIN_TASK_RECONCILIATION_RECEIPT, {k: receipt[k] for k in RECEIPT_KEYS[:-1]})


def _item(x: Any) -> Record:
    evidence_check(is_object(x) and x.keys() == set(ITEM_KEYS), "reconciliation item keys mismatch")
    evidence_check(is_bytes_text(x["taskId"], 1, 128), "item taskId must be 1..128 bytes without U+0000")
    evidence_check(is_int(x["revision"]) and 1 <= x["revision"] <= SAFE_INT_MAX, "item revision must be an int >= 1")
    evidence_check(x["disposition"] in T.RECONCILIATION_DISPOSITIONS and type(x["disposition"]) is str,
                   "item disposition invalid")
    evidence_check(is_digest(x["contentDigest"]), "item contentDigest must be a DIGEST")
    return {k: x[k] for k in ITEM_KEYS}


def _unsigned(x: Any) -> Record:
    evidence_check(is_object(x) and x.keys() == set(RECEIPT_KEYS), "reconciliation receipt keys mismatch")
    evidence_check(x["schema"] == T.SCHEMA_TASK_RECONCILIATION, "reconciliation receipt schema mismatch")
    evidence_check(is_bytes_text(x["projectId"], 1, 128), "projectId must be 1..128 bytes without U+0000")
    evidence_check(is_package_name(x["packageName"]), "packageName must be a PACKAGE_NAME")
    evidence_check(is_int(x["generation"]) and x["generation"] >= 1, "generation must be an int >= 1")
    for key in ("generationDigest", "materializedRevisionDigest", "lockDigest"):
        evidence_check(is_digest(x[key]), f"{key} must be a DIGEST")
    evidence_check(x["previousLockDigest"] is None or is_digest(x["previousLockDigest"]),
                   "previousLockDigest must be null or a DIGEST")
    evidence_check(is_timestamp(x["committedAtMs"]), "committedAtMs must be a TIMESTAMP")
    items = x["items"]
    evidence_check(is_array(items) and len(items) <= T.MAX_RECONCILIATION_ITEMS, "items must be an array of <= 512")
    out = {k: x[k] for k in RECEIPT_KEYS[:-2]}
    out["items"] = [_item(i) for i in items]
    return out


def normalize_reconciliation_receipt(x: Any) -> Record:
    """The receipt in canonical order, or EvidenceProblem. Items must be strictly ascending by taskId in
    the ql3 collation; that order is checked last, so a receipt that is malformed anyway is Invalid
    even where the collation would have to answer Unavailable."""
    unsigned = _unsigned(x)
    evidence_check(is_digest(x["receiptDigest"]) and reconciliation_receipt_digest(unsigned) == x["receiptDigest"],
                   "receiptDigest mismatch")
    evidence_check(collation.strictly_ascending([i["taskId"] for i in unsigned["items"]]),
                   "items are not strictly ascending by taskId in the ql3 collation")
    return {**unsigned, "receiptDigest": x["receiptDigest"]}


def seal_reconciliation_receipt(unsigned: Record) -> Record:
    """A receipt a builder made (keys 1-10), with its items put in the ql3 collation and its digest."""
    body = {k: unsigned[k] for k in RECEIPT_KEYS[:-1]}
    body["items"] = sorted(([{k: i[k] for k in ITEM_KEYS} for i in body["items"]]),
                           key=lambda i: collation.sort_key(i["taskId"]))
    return normalize_reconciliation_receipt({**body, "receiptDigest": reconciliation_receipt_digest(body)})
