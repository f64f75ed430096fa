"""Integrity loads of commands.md §2.4 over stored rows (LOAD-RUN, LOAD-STEP(S), LOAD-ATTEMPT, clock floor).

Each load rebuilds records from rows, re-validates them with the model's normalizers and
cross-checks every JSON mirror against its columns (storage.md §3); the checks on the rebuilt
records are the model's own (model/integrity.py, storage.md D-10). Any mismatch is Unavailable
with the reason of the check that found it; nothing has been written at that point.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from qlwf.model import messages as M
from qlwf.model.canonical import canonical_text
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.integrity import clock_problem, lease_mirror_problem, plan_step_problem, receipt_problem, run_problem
from qlwf.model.records import (
    TASK_RECEIPT_KEYS,
    Record,
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


@functools.lru_cache(maxsize=1024)
def _normalized_task_receipt(text: str) -> tuple[Record, str]:
    """A stored task receipt's JSON parsed and normalized, with the normalized record's canonical
    text. A pure function of the exact stored text (receipts are append-only and every worker
    command re-reads its attempt's receipt), so it is memoized like `_normalized_admission`; the
    record is shared and never mutated (the commands only read it and never return it)."""
    receipt = normalize_task_receipt(json.loads(text))
    return receipt, canonical_text(receipt)


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
            raise fail.conflict("run_missing", M.run_missing(run_id))
        admissions = self.store.admissions_of_run(run_id)
        if len(admissions) != 1:
            raise fail.unavailable("admission_drift", M.admission_count(run_id, len(admissions)))
        plan, receipt = self.admission(admissions[0], "plan_drift")
        drift = run_problem(run, plan)
        if drift is not None:
            raise fail.unavailable(*drift)
        return LoadedRun(plan, receipt, run)

    def admission(self, row: dict[str, Any], reason: str) -> tuple[Record, Record]:
        """Parse and normalize an admission row's plan and receipt; columns must mirror them byte for byte."""
        try:
            plan, receipt, expected = _normalized_admission(row["plan_json"], row["receipt_json"])
        except (QlwfError, ValueError, TypeError) as e:
            raise self.fail.unavailable(reason, f"stored admission does not normalize: {e}") from e
        if plan["planDigest"] != row["plan_digest"]:
            raise self.fail.unavailable(reason, M.PLAN_DIGEST_DRIFT)
        drifted = [c for c, v in expected.items() if row[c] != v]
        if drifted:
            raise self.fail.unavailable(reason, f"admission columns disagree with plan/receipt: {drifted}")
        return plan, receipt

    # ---- LOAD-STEP / LOAD-STEPS -------------------------------------------------------------------
    def step(self, loaded: LoadedRun, step_run_id: str) -> Record:
        stored = self.store.step_run(step_run_id)
        if stored is None or stored.record["runId"] != loaded.run["id"]:
            raise self.fail.conflict("step_missing", M.step_missing(step_run_id, loaded.run["id"]))
        return self._checked_step(loaded, stored)

    def steps(self, loaded: LoadedRun) -> list[Record]:
        """Every StepRun of the Run in (stepKey, id) order, in bijection with the plan steps."""
        stored = self.store.step_runs_of_run(loaded.run["id"])
        if sorted(s.record["id"] for s in stored) != sorted(p["stepRunId"] for p in loaded.plan["steps"]):
            raise self.fail.unavailable("step_drift", M.STEPS_NOT_PLAN)
        return [self._checked_step(loaded, s) for s in stored]

    def _checked_step(self, loaded: LoadedRun, stored: StoredStepRun) -> Record:
        s = stored.record
        try:
            normalize_step_run(s)
        except QlwfError as e:
            raise self.fail.unavailable("step_drift", e.message) from e
        if stored.json_text != canonical_text(s):
            raise self.fail.unavailable("step_drift", f"StepRun {s['id']} JSON mirror differs from its columns")
        drift = plan_step_problem(s, loaded.plan)
        if drift is not None:
            raise self.fail.unavailable(*drift)
        return s

    # ---- LOAD-ATTEMPT -----------------------------------------------------------------------------
    def attempt(self, attempt_id: str) -> LoadedAttempt:
        attempt = self.store.attempt(attempt_id)
        if attempt is None:
            raise self.fail.conflict("attempt_missing", M.attempt_missing(attempt_id))
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
            r, text = _normalized_task_receipt(row["receipt_json"])
        except (QlwfError, ValueError, TypeError) as e:
            raise fail.unavailable("receipt_drift", M.receipt_problem(attempt["id"], str(e))) from e
        if row["receipt_json"] != text or any(row[snake(k)] != r[k] for k in TASK_RECEIPT_KEYS[1:]):
            raise fail.unavailable("receipt_drift", f"receipt of {attempt['id']} disagrees with its columns")
        drift = receipt_problem(attempt, r)
        if drift is not None:
            raise fail.unavailable(*drift)
        return r

    def lease_mirror(self, attempt: Record, lease: Record | None) -> None:
        """records.md §6.8 lease shape and the attempt's lease mirror (INV-25)."""
        drift = lease_mirror_problem(attempt, lease)
        if drift is not None:
            raise self.fail.unavailable(*drift)

    # ---- Clock floor (S-14) -----------------------------------------------------------------------
    def clock_floor(self, run_id: str, leases: list[Record | None], now: int) -> None:
        regression = clock_problem(now, self.store.last_event_time(run_id), leases)
        if regression is not None:
            raise self.fail.invalid(*regression)
