"""The DispatchLease (records.md §6.8): its keys and shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import tables as T
from .values import INT31_MAX, is_identifier, is_int31, is_int_in, is_object, is_portable_id, is_timestamp

LEASE_KEYS = (
    "attemptId", "runId", "status", "version", "leaseGeneration", "workerId", "acquiredAtMs", "renewedAtMs",
    "expiresAtMs", "releasedAtMs", "releaseReason", "completedAtMs", "updatedAtMs",
)
LEASE_OPTIONAL_KEYS = ("releasedAtMs", "releaseReason", "completedAtMs")
_LEASE_RULES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("attemptId", is_portable_id),
    ("runId", is_portable_id),
    ("status", lambda v: v in T.LEASE_STATUSES),
    ("version", is_int31),
    ("leaseGeneration", lambda v: is_int_in(v, 1, INT31_MAX)),
    ("workerId", is_identifier),
    ("acquiredAtMs", is_timestamp),
    ("renewedAtMs", is_timestamp),
    ("expiresAtMs", is_timestamp),
    ("releasedAtMs", is_timestamp),
    ("releaseReason", lambda v: v in T.RELEASE_REASONS),
    ("completedAtMs", is_timestamp),
    ("updatedAtMs", is_timestamp),
)


def lease_problem(x: Any) -> str | None:
    if not is_object(x):
        return "lease must be an object"
    required = tuple(k for k in LEASE_KEYS if k not in LEASE_OPTIONAL_KEYS)
    if any(k not in x for k in required) or set(x) - set(LEASE_KEYS):
        return "lease keys mismatch"
    for key, rule in _LEASE_RULES:
        if key in x and not rule(x[key]):
            return f"lease {key} is invalid"
    if x["renewedAtMs"] < x["acquiredAtMs"] or x["expiresAtMs"] <= x["renewedAtMs"]:
        return "lease times out of order"
    if x["updatedAtMs"] < x["acquiredAtMs"]:
        return "lease updatedAtMs precedes acquiredAtMs"
    released = "releasedAtMs" in x or "releaseReason" in x
    completed = "completedAtMs" in x
    if x["status"] == "leased" and (released or completed):
        return "leased lease carries release or completion keys"
    if x["status"] == "released" and not ("releasedAtMs" in x and "releaseReason" in x and not completed):
        return "released lease shape invalid"
    if x["status"] == "completed" and not (completed and not released):
        return "completed lease shape invalid"
    return None
