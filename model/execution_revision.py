"""ql3's Task execution revisions, local and cluster (task-attempts.md §3A).

An execution revision is what ql3 runs for one revision of a runtime Task: `local_process` on Edge
and Standalone, `remote_worker` on Cluster. The admission ladder (model/attempts_ql3.py) needs three
things of it: that it normalizes with its digest (check A5), its identity (projectId, taskId,
taskRevision) and its contentDigest, which becomes the binding's executionDigest.
`normalize_execution_revision` returns the revision in canonical order with createdAtMs and
contentDigest last; `seal_*` compute the digest of a revision a builder made.
"""

from __future__ import annotations

import re
from typing import Any

from . import tables as T
from .canonical import canonical_json, json_digest
from .errors import evidence_check
from .execution_parts import (
    is_absolute_path,
    is_bytes_text,
    normalize_command,
    normalize_environment,
    normalize_placement,
)
from .records import Record
from .values import is_digest, is_int_in, is_object, is_str, is_timestamp

_CONTEXT_REF_RE = re.compile(r"localctx:sha256:[0-9a-f]{64}", re.ASCII)

LOCAL_DIGEST_KEYS = ("projectId", "taskId", "taskRevision", "executorType", "command", "workingDirectory",
                     "timeoutMs", "contextRef")
LOCAL_REQUIRED_KEYS = ("projectId", "taskId", "taskRevision", "executorType", "command", "contextRef",
                       "createdAtMs", "contentDigest")
CLUSTER_DIGEST_KEYS = ("projectId", "taskId", "taskRevision", "sourceRevision", "sourceContentDigest",
                       "executorType", "planSchema", "command", "environment", "workingDirectory", "timeoutMs",
                       "placement")
CLUSTER_REQUIRED_KEYS = ("command", "createdAtMs", "environment", "executorType", "planSchema", "projectId",
                         "sourceContentDigest", "sourceRevision", "taskId", "taskRevision", "contentDigest")
CLUSTER_OPTIONAL_KEYS = ("placement", "timeoutMs", "workingDirectory")


def _optional_run_settings(x: Record, out: Record) -> None:
    """workingDirectory and timeoutMs: optional, and null is not absent (§3A)."""
    if "workingDirectory" in x:
        evidence_check(is_absolute_path(x["workingDirectory"]), "workingDirectory must be an absolute path")
        out["workingDirectory"] = x["workingDirectory"]
    if "timeoutMs" in x:
        evidence_check(is_int_in(x["timeoutMs"], 1, T.MAX_REVISION_TIMEOUT_MS), "timeoutMs must be 1..31536000000")
        out["timeoutMs"] = x["timeoutMs"]


def _unsigned_local(x: Any) -> Record:
    evidence_check(is_object(x), "execution revision must be an object")
    missing = [k for k in LOCAL_REQUIRED_KEYS if k not in x]
    evidence_check(not missing, f"local execution revision misses {missing}")  # other keys are ignored (§3A)
    for key in ("projectId", "taskId", "taskRevision"):
        evidence_check(is_bytes_text(x[key], 1, 255, no_controls=True), f"{key} must be 1..255 bytes of text")
    evidence_check(x["executorType"] == "local_process", "executorType must be local_process")
    out: Record = {"projectId": x["projectId"], "taskId": x["taskId"], "taskRevision": x["taskRevision"],
                   "executorType": "local_process", "command": normalize_command(x["command"])}
    _optional_run_settings(x, out)
    evidence_check(is_str(x["contextRef"]) and _CONTEXT_REF_RE.fullmatch(x["contextRef"]) is not None,
                   "contextRef must be localctx:sha256:<digest>")
    out["contextRef"] = x["contextRef"]
    evidence_check(is_timestamp(x["createdAtMs"]), "createdAtMs must be a TIMESTAMP")
    return out


def _unsigned_cluster(x: Any) -> Record:
    evidence_check(is_object(x), "execution revision must be an object")
    keys = set(x)
    evidence_check(set(CLUSTER_REQUIRED_KEYS) <= keys <= set(CLUSTER_REQUIRED_KEYS + CLUSTER_OPTIONAL_KEYS),
                   "cluster execution revision keys mismatch")
    for key in ("projectId", "taskId"):
        evidence_check(is_bytes_text(x[key], 1, 128, no_controls=True), f"{key} must be 1..128 bytes of text")
    evidence_check(is_int_in(x["sourceRevision"], 1, T.INT31_MAX), "sourceRevision must be 1..2147483647")
    evidence_check(is_digest(x["sourceContentDigest"]), "sourceContentDigest must be a DIGEST")
    evidence_check(is_str(x["taskRevision"])
                   and x["taskRevision"] == f"qltd:v1:{x['sourceRevision']}:{x['sourceContentDigest']}",
                   "taskRevision must be qltd:v1:<sourceRevision>:<sourceContentDigest>")
    evidence_check(x["executorType"] == "remote_worker", "executorType must be remote_worker")
    evidence_check(x["planSchema"] == T.SCHEMA_COMMAND_EXECUTION_PLAN and is_str(x["planSchema"]),
                   "planSchema mismatch")
    out: Record = {k: x[k] for k in CLUSTER_DIGEST_KEYS[:7]}
    out["command"] = normalize_command(x["command"])
    out["environment"] = normalize_environment(x["environment"], x["projectId"])
    _optional_run_settings(x, out)
    out["placement"] = normalize_placement(x.get("placement"))
    evidence_check(is_timestamp(x["createdAtMs"]), "createdAtMs must be a TIMESTAMP")
    return out


def _seal(unsigned: Record, created_at_ms: int, domain: str) -> Record:
    return {**unsigned, "createdAtMs": created_at_ms, "contentDigest": json_digest(domain, unsigned)}


def seal_local_revision(revision: Record) -> Record:
    """A local revision made by a builder, normalized and given its contentDigest."""
    return normalize_execution_revision(_seal(_unsigned_local({**revision, "contentDigest": ""}),
                                              revision["createdAtMs"], T.DOMAIN_LOCAL_EXECUTION_REVISION))


def seal_cluster_revision(revision: Record) -> Record:
    """A cluster revision made by a builder, normalized and given its contentDigest."""
    return normalize_execution_revision(_seal(_unsigned_cluster({**revision, "contentDigest": ""}),
                                              revision["createdAtMs"], T.DOMAIN_CLUSTER_EXECUTION_REVISION))


def normalize_execution_revision(x: Record) -> Record:
    """The revision of x["executorType"] (check A4 has chosen it), normalized; EvidenceProblem if not.

    The digest is over the normalized revision without createdAtMs; a cluster revision's canonical
    JSON, createdAtMs included, is at most 98,304 bytes."""
    if x["executorType"] == "local_process":
        unsigned, domain = _unsigned_local(x), T.DOMAIN_LOCAL_EXECUTION_REVISION
    else:
        unsigned, domain = _unsigned_cluster(x), T.DOMAIN_CLUSTER_EXECUTION_REVISION
        sized = {**{k: unsigned[k] for k in CLUSTER_DIGEST_KEYS if k in unsigned}, "createdAtMs": x["createdAtMs"]}
        evidence_check(len(canonical_json(sized)) <= T.MAX_CLUSTER_REVISION_BYTES,
                       "cluster execution revision exceeds 98304 bytes")
    evidence_check(is_digest(x["contentDigest"]) and json_digest(domain, unsigned) == x["contentDigest"],
                   "contentDigest mismatch")
    return {**unsigned, "createdAtMs": x["createdAtMs"], "contentDigest": x["contentDigest"]}
