"""The workflow Run (records.md §6.2): its keys, in canonical order."""

from __future__ import annotations

RUN_KEYS = (
    "id", "projectId", "taskId", "taskRevision", "taskSnapshotRef", "triggerType", "executionOrigin",
    "executionOwner", "requestId", "status", "version", "eventSequence", "priority", "idempotencyKey",
    "createdAtMs", "startedAtMs", "cancelRequestedAtMs", "cancelReason", "finishedAtMs", "errorCode",
    "errorSummary",
)
