"""Integrity loads of commands.md §2.4 over stored rows (LOAD-RUN, LOAD-STEP(S), LOAD-ATTEMPT, clock floor).

Each load rebuilds records from rows, re-validates them with the model's normalizers and
cross-checks every JSON mirror against its columns (storage.md §3). Any mismatch is Unavailable
with the reason of the check that found it; nothing has been written at that point.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from qlwf.model import tables as T
from qlwf.model.admission import RUN_IDENTITY_KEYS, admission_run
from qlwf.model.canonical import canonical_text
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.records import (
    TASK_RECEIPT_KEYS,
    Record,
    attempt_problem,
    lease_problem,
    normalize_admission_receipt,
    normalize_plan,
    normalize_step_run,
    normalize_task_receipt,
)

from .columns import admission_columns, snake
from .store import Store, StoredStepRun


@functools.lru_cache(maxsize=256)
def _normalized_admission(plan_text: str, receipt_text: str) -> tuple[Record, Record, dict[str, Any]]:
    """Parse and normalize stored admission JSON, and derive the columns it implies. A pure function
    of the exact stored text, so it is memoized (admissions are append-only and every command
    re-reads its Run's plan); the records returned are shared and never mutated."""
    plan = normalize_plan(json.loads(plan_text))
    receipt = normalize_admission_receipt(json.loads(receipt_text))
    return plan, receipt, admission_columns(plan, receipt)


@dataclass
class LoadedRun:
    plan: Record
    receipt: Record  # the workflow admission receipt
    run: Record


@dataclass
class LoadedAttempt:
    loaded: LoadedRun
    attempt: Record
    receipt: Record  # the task attempt admission receipt
    step: Record
    lease: Record | None


class Loads:
    def __init__(self, store: Store, fail: CommandErrors) -> None:
        self.store = store
        self.fail = fail

    # ---- LOAD-RUN -------------------------------------------------------------------------------
    def run(self, run_id: str) -> LoadedRun:
        fail = self.fail
        run = self.store.run(run_id)
        if run is None:
            raise fail.conflict("run_missing", f"Run {run_id} does not exist")
        admissions = self.store.admissions_of_run(run_id)
        if len(admissions) != 1:
            raise fail.unavailable("admission_drift", f"Run {run_id} has {len(admissions)} admissions")
        plan, receipt = self.admission(admissions[0], "plan_drift")
        expected = admission_run(plan)
        problems = [k for k in (*RUN_IDENTITY_KEYS, "createdAtMs", "startedAtMs") if run.get(k) != expected[k]]
        if (problems or run["status"] not in T.RUN_STATUSES or run["version"] != run["eventSequence"]
                or ("finishedAtMs" in run) != (run["status"] in T.TERMINAL_RUN)
                or (run["status"] == "running" and ("errorCode" in run or "errorSummary" in run))
                or ("cancelRequestedAtMs" in run) != ("cancelReason" in run)):
            raise fail.unavailable("run_drift", f"Run {run_id} drifted from its admission ({problems})")
        return LoadedRun(plan, receipt, run)

    def admission(self, row: dict[str, Any], reason: str) -> tuple[Record, Record]:
        """Parse and normalize an admission row's plan and receipt; columns must mirror them byte for byte."""
        try:
            plan, receipt, expected = _normalized_admission(row["plan_json"], row["receipt_json"])
        except (QlwfError, ValueError, TypeError) as e:
            raise self.fail.unavailable(reason, f"stored admission does not normalize: {e}") from e
        if plan["planDigest"] != row["plan_digest"]:
            raise self.fail.unavailable(reason, "stored planDigest differs from the admission")
        drifted = [c for c, v in expected.items() if row[c] != v]
        if drifted:
            raise self.fail.unavailable(reason, f"admission columns disagree with plan/receipt: {drifted}")
        return plan, receipt

    # ---- LOAD-STEP / LOAD-STEPS -------------------------------------------------------------------
    def step(self, loaded: LoadedRun, step_run_id: str) -> Record:
        stored = self.store.step_run(step_run_id)
        if stored is None or stored.record["runId"] != loaded.run["id"]:
            raise self.fail.conflict("step_missing",
                                     f"StepRun {step_run_id} of Run {loaded.run['id']} does not exist")
        return self._checked_step(loaded, stored)

    def steps(self, loaded: LoadedRun) -> list[Record]:
        """Every StepRun of the Run in (stepKey, id) order, in bijection with the plan steps."""
        stored = self.store.step_runs_of_run(loaded.run["id"])
        if sorted(s.record["id"] for s in stored) != sorted(p["stepRunId"] for p in loaded.plan["steps"]):
            raise self.fail.unavailable("step_drift", "StepRuns are not in bijection with the plan steps")
        return [self._checked_step(loaded, s) for s in stored]

    def _checked_step(self, loaded: LoadedRun, stored: StoredStepRun) -> Record:
        s = stored.record
        try:
            normalize_step_run(s)
        except QlwfError as e:
            raise self.fail.unavailable("step_drift", e.message) from e
        if stored.json_text != canonical_text(s):
            raise self.fail.unavailable("step_drift", f"StepRun {s['id']} JSON mirror differs from its columns")
        plan = loaded.plan
        p = next((p for p in plan["steps"] if p["stepRunId"] == s["id"]), None)
        if p is None or not (
            s["stepKey"] == p["stepKey"] and s["definitionRef"] == p["taskDefinitionRef"]
            and s["definitionDigest"] == p["taskDefinitionDigest"] and s["kind"] == "task" and s["required"] is True
            and s["parentStepRunId"] is None and s["inputRef"] is None and s["createdAtMs"] == plan["plannedAtMs"]
        ):
            raise self.fail.unavailable("step_drift", f"StepRun {s['id']} does not match its plan step")
        return s

    # ---- LOAD-ATTEMPT -----------------------------------------------------------------------------
    def attempt(self, attempt_id: str) -> LoadedAttempt:
        attempt = self.store.attempt(attempt_id)
        if attempt is None:
            raise self.fail.conflict("attempt_missing", f"attempt {attempt_id} does not exist")
        receipt = self.receipt(attempt)
        loaded = self.run(attempt["runId"])
        step = self.step(loaded, attempt["stepRunId"])
        lease = self.store.lease(attempt_id)
        self.lease_mirror(attempt, lease)
        return LoadedAttempt(loaded, attempt, receipt, step, lease)

    def receipt(self, attempt: Record) -> Record:
        """The attempt's task receipt: normalizes, mirrors its columns and agrees with the attempt (INV-20)."""
        fail = self.fail
        row = self.store.receipt_row(attempt["id"])
        try:
            if row is None:
                raise ValueError("missing")
            r = normalize_task_receipt(json.loads(row["receipt_json"]))
        except (QlwfError, ValueError, TypeError) as e:
            raise fail.unavailable("receipt_drift", f"receipt of {attempt['id']}: {e}") from e
        if row["receipt_json"] != canonical_text(r) or any(row[snake(k)] != r[k] for k in TASK_RECEIPT_KEYS[1:]):
            raise fail.unavailable("receipt_drift", f"receipt of {attempt['id']} disagrees with its columns")
        if attempt_problem(attempt) or (r["attemptId"], r["runId"], r["stepRunId"], r["attemptNumber"],
                                        r["executorType"], r["admittedAtMs"]) != (
                attempt["id"], attempt["runId"], attempt["stepRunId"], attempt["attempt"], attempt["executorType"],
                attempt["createdAtMs"]):
            raise fail.unavailable("receipt_drift", f"receipt of {attempt['id']} disagrees with the attempt")
        return r

    def lease_mirror(self, attempt: Record, lease: Record | None) -> None:
        """records.md §6.8 lease shape and the attempt's lease mirror (INV-25)."""
        fail = self.fail
        if lease is not None and (lease_problem(lease) or lease["attemptId"] != attempt["id"]
                                  or lease["runId"] != attempt["runId"]):
            raise fail.unavailable("lease_drift", f"lease of {attempt['id']} is malformed")
        if "workerId" in attempt:
            if lease is None or any(attempt[k] != lease[lk] for k, lk in (
                ("workerId", "workerId"), ("leaseGeneration", "leaseGeneration"), ("leaseVersion", "version"),
                ("leaseExpiresAtMs", "expiresAtMs"),
            )):
                raise fail.unavailable("lease_drift", f"lease mirror of {attempt['id']} disagrees with its lease")
        elif lease is not None and not (lease["status"] == "released"
                                        and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS):
            raise fail.unavailable("lease_drift",
                                   f"attempt {attempt['id']} lost its lease keys without a worker release")

    # ---- Clock floor (S-14) -----------------------------------------------------------------------
    def clock_floor(self, run_id: str, leases: list[Record | None], now: int) -> None:
        last = self.store.last_event_time(run_id)
        floor = max([0 if last is None else last, *(lease["updatedAtMs"] for lease in leases if lease is not None)])
        if now < floor:
            raise self.fail.invalid("clock_regression", f"observation time {now} precedes {floor}")
