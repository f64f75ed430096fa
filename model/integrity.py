"""The integrity checks of commands.md §2.4 as pure functions of records (storage.md D-10).

The model's loads (model/cmd_loads.py) and every storage implementation's loads
(impl/commands/loads.py) call these same functions on the records they rebuilt, so a store and
the model cannot disagree on what counts as drift. Each returns None when the records are sound,
otherwise a `Problem`: the reason of the error the spec prescribes (`*_drift` reasons are
Unavailable, `clock_regression` is Invalid) and a message for humans. Reading the records (rows,
JSON mirrors, locks) stays with the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from . import tables as T
from .admission import RUN_IDENTITY_KEYS, admission_run
from .records import Record, attempt_problem, lease_problem


class Problem(NamedTuple):
    reason: str
    message: str


# The attempt keys that mirror its lease (INV-25), with the lease key each mirrors.
LEASE_MIRROR = (("workerId", "workerId"), ("leaseGeneration", "leaseGeneration"), ("leaseVersion", "version"),
                ("leaseExpiresAtMs", "expiresAtMs"))


def run_problem(run: Record, plan: Record) -> Problem | None:
    """LOAD-RUN: the Run keeps the identity its admission gave it and a consistent shape."""
    expected = admission_run(plan)
    problems = [k for k in (*RUN_IDENTITY_KEYS, "createdAtMs", "startedAtMs") if run.get(k) != expected[k]]
    if (problems or run["status"] not in T.RUN_STATUSES or run["version"] != run["eventSequence"]
            or ("finishedAtMs" in run) != (run["status"] in T.TERMINAL_RUN)
            or (run["status"] == "running" and ("errorCode" in run or "errorSummary" in run))
            or ("cancelRequestedAtMs" in run) != ("cancelReason" in run)):
        return Problem("run_drift", f"Run {run['id']} drifted from its admission ({problems})")
    return None


def plan_step_problem(step: Record, plan: Record) -> Problem | None:
    """LOAD-STEP: a (normalized) StepRun matches its plan step."""
    p = next((p for p in plan["steps"] if p["stepRunId"] == step["id"]), None)
    if p is None or not (
        step["stepKey"] == p["stepKey"] and step["definitionRef"] == p["taskDefinitionRef"]
        and step["definitionDigest"] == p["taskDefinitionDigest"] and step["kind"] == "task"
        and step["required"] is True and step["parentStepRunId"] is None and step["inputRef"] is None
        and step["createdAtMs"] == plan["plannedAtMs"]
    ):
        return Problem("step_drift", f"StepRun {step['id']} does not match its plan step")
    return None


def receipt_problem(attempt: Record, receipt: Record) -> Problem | None:
    """LOAD-ATTEMPT: a well-formed attempt agrees with its (normalized) task receipt (INV-20)."""
    if attempt_problem(attempt) or (
            receipt["attemptId"], receipt["runId"], receipt["stepRunId"], receipt["attemptNumber"],
            receipt["executorType"], receipt["admittedAtMs"]) != (
            attempt["id"], attempt["runId"], attempt["stepRunId"], attempt["attempt"], attempt["executorType"],
            attempt["createdAtMs"]):
        return Problem("receipt_drift", f"receipt of {attempt['id']} disagrees with the attempt")
    return None


def lease_mirror_problem(attempt: Record, lease: Record | None) -> Problem | None:
    """LOAD-ATTEMPT: the lease's shape (records.md §6.8) and the attempt's mirror of it (INV-25); an
    attempt without lease keys may only keep a lease its worker released."""
    if lease is not None and (lease_problem(lease) or lease["attemptId"] != attempt["id"]
                              or lease["runId"] != attempt["runId"]):
        return Problem("lease_drift", f"lease of {attempt['id']} is malformed")
    if "workerId" in attempt:
        if lease is None or any(attempt[k] != lease[lk] for k, lk in LEASE_MIRROR):
            return Problem("lease_drift", f"lease mirror of {attempt['id']} disagrees with its lease")
    elif lease is not None and not (lease["status"] == "released"
                                    and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS):
        return Problem("lease_drift", f"attempt {attempt['id']} lost its lease keys without a worker release")
    return None


def clock_problem(now: int, last_event_at_ms: int | None, leases: Iterable[Record | None]) -> Problem | None:
    """S-14: `now` must not precede the Run's last event or any loaded lease's updatedAtMs."""
    floor = max([0 if last_event_at_ms is None else last_event_at_ms,
                 *(lease["updatedAtMs"] for lease in leases if lease is not None)])
    if now < floor:
        return Problem("clock_regression", f"observation time {now} precedes {floor}")
    return None


def counters_overflow(*values: int) -> Problem | None:
    """commands.md §2.5: no write may push a counter past 2147483647."""
    if any(v > T.INT31_MAX for v in values):
        return Problem("counter_overflow", "a counter would exceed 2147483647")
    return None
