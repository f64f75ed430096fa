"""The RunAttempt (records.md §6.7): the model subset's keys and shape, the generic record's further
keys, and the attempt fields a task receipt must agree with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import tables as T
from .record_common import Record
from .values import (
    INT31_MAX,
    is_bounded_string,
    is_identifier,
    is_int31,
    is_int_in,
    is_object,
    is_portable_id,
    is_timestamp,
)

ATTEMPT_KEYS = (
    "id", "runId", "stepRunId", "attempt", "status", "executorType", "workerId", "leaseGeneration",
    "leaseVersion", "leaseExpiresAtMs", "deadlineAtMs", "callbackSequence", "createdAtMs", "startedAtMs",
    "finishedAtMs", "exitCode", "errorCode", "errorSummary",
)
ATTEMPT_REQUIRED_KEYS = ("id", "runId", "stepRunId", "attempt", "status", "executorType", "callbackSequence",
                         "createdAtMs")
ATTEMPT_LEASE_KEYS = ("workerId", "leaseGeneration", "leaseVersion", "leaseExpiresAtMs")
_ATTEMPT_RULES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("id", is_portable_id),
    ("runId", is_portable_id),
    ("stepRunId", is_identifier),
    ("attempt", lambda v: is_int_in(v, 1, T.MAX_RUN_ATTEMPTS)),
    ("status", lambda v: v in T.ATTEMPT_STATUSES),
    ("executorType", lambda v: v in T.EXECUTOR_TYPES),
    ("workerId", is_identifier),
    ("leaseGeneration", lambda v: is_int_in(v, 1, INT31_MAX)),
    ("leaseVersion", is_int31),
    ("leaseExpiresAtMs", is_timestamp),
    ("deadlineAtMs", is_timestamp),
    ("callbackSequence", is_int31),
    ("createdAtMs", is_timestamp),
    ("startedAtMs", is_timestamp),
    ("finishedAtMs", is_timestamp),
    ("exitCode", lambda v: is_int_in(v, -2147483648, 2147483647)),
    ("errorCode", lambda v: is_bounded_string(v, 128) and v != ""),
    ("errorSummary", lambda v: is_bounded_string(v, 1024) and v != ""),
)


def attempt_problem(x: Any) -> str | None:
    """Type and shape problems of a stored model RunAttempt (the model subset), or None.

    For stored records only (integrity loads, INV-6): ql3 snapshots given to the pure functions
    are checked by their own lists (cancellation.md §3 item 8, task-attempts.md §8 item 4).
    """
    if not is_object(x):
        return "attempt must be an object"
    if any(k not in x for k in ATTEMPT_REQUIRED_KEYS) or set(x) - set(ATTEMPT_KEYS):
        return "attempt keys mismatch"
    for key, rule in _ATTEMPT_RULES:
        if key in x and not rule(x[key]):
            return f"attempt {key} is invalid"
    present = [k in x for k in ATTEMPT_LEASE_KEYS]
    if any(present) and not all(present):
        return "attempt lease keys must be all present or all absent"
    return None


# records.md §6.7: keys of the generic ql3 RunAttempt record outside the model subset (D-13). The
# model never stores them, but a ql3 snapshot handed to a pure function may carry any of them.
GENERIC_ATTEMPT_EXTRA_KEYS = (
    "workerSessionId", "workerGeneration", "executorHandle", "pid", "logArtifactId", "leaseToken",
    "leaseTokenDigest", "offerId", "callbackTokenHash",
)
GENERIC_ATTEMPT_KEYSET = frozenset((*ATTEMPT_KEYS, *GENERIC_ATTEMPT_EXTRA_KEYS))

# (attempt key, task receipt key) pairs that must agree for an attempt handed to a pure function
# (cancellation.md §3 item 8c, task-attempts.md §8 item 4: the same list in both).
ATTEMPT_RECEIPT_AGREEMENT = (
    ("id", "attemptId"), ("runId", "runId"), ("stepRunId", "stepRunId"), ("attempt", "attemptNumber"),
    ("executorType", "executorType"), ("createdAtMs", "admittedAtMs"),
)


def foreign_attempt_keys(x: Record) -> list[str]:
    """Keys of a snapshot attempt that the generic RunAttempt record does not have (records.md §6.7).

    This is the only shape check of an attempt given to a pure function: the exact model key set
    and "lease keys together" are invariants of stored model records, never input checks.
    """
    return sorted(k for k in x if k not in GENERIC_ATTEMPT_KEYSET)
