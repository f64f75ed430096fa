"""admit_task_attempt (commands.md §4.5, task-attempts.md §3)."""

from __future__ import annotations

import json
from typing import Any

from qlwf.model import messages as M
from qlwf.model import tables as T
from qlwf.model.attempts import build_loaded_task_attempt_admission
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.records import Record, binding_plan_problem

from . import arguments, locks
from .context import StoreTx
from .store import Store

Prepared = tuple[dict[str, Any], Record]


def prepare(fail: CommandErrors, args: Any) -> Prepared:
    return arguments.task_admission(fail, args)


def lock(store: Store, fail: CommandErrors, prepared: Prepared) -> None:
    args, _ = prepared
    locks.run_scope(store, args["runId"], [args["stepRunId"]])


def run(tx: StoreTx, prepared: Prepared) -> Record:
    args, binding = prepared
    store, fail, now = tx.store, tx.fail, tx.now
    loaded = tx.loads.run(args["runId"])
    run = loaded.run
    step = tx.loads.step(loaded, args["stepRunId"])
    row = store.receipt_for_epoch(run["id"], step["id"], step["version"])
    if row is not None:
        try:
            existing = json.loads(row["receipt_json"])
        except ValueError as e:
            raise fail.unavailable("receipt_drift", "stored receipt is not JSON") from e
        if existing.get("stepRunDigest") != step["stepRunDigest"]:
            raise fail.unavailable("receipt_drift", M.RECEIPT_EPOCH_DRIFT)
        if any(existing.get(k) != binding[k] for k in binding):
            raise fail.conflict("binding_mismatch", M.BINDING_MISMATCH)
        return {"status": "existing", "receipt": existing, "attempt": store.attempt(existing["attemptId"])}
    if step["status"] != "ready":
        raise fail.conflict("step_not_ready", M.step_is(step["id"], step["status"]))
    plan_step = next(p for p in loaded.plan["steps"] if p["stepRunId"] == step["id"])
    problem = binding_plan_problem(binding, loaded.plan, plan_step)
    if problem:
        raise fail.invalid("binding_inconsistent", problem)
    if run["status"] != "running":
        raise fail.conflict("run_not_running", M.run_is(run["status"]))
    if "cancelRequestedAtMs" in run:
        raise fail.conflict("cancellation_requested", M.CANCEL_INTENT)
    if step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise fail.conflict("attempts_exhausted", M.ATTEMPTS_EXHAUSTED)
    n = 1 + store.max_attempt_number(run["id"])
    if n > T.MAX_RUN_ATTEMPTS:
        raise fail.conflict("attempt_numbers_exhausted", M.ATTEMPT_NUMBERS_EXHAUSTED)
    tx.loads.clock_floor(run["id"], [], now)
    try:
        b = build_loaded_task_attempt_admission({"plan": loaded.plan, "run": run, "stepRun": step,
                                                 "binding": binding, "attemptNumber": n, "admittedAtMs": now})
    except QlwfError as e:
        raise fail.unavailable("resolution_failed", e.message) from e
    tx.ceiling(b["run"]["version"])
    # storage.md §4: Run CAS; attempt; event; receipt. The StepRun is not changed.
    store.cas_run("counters", run, b["run"])
    store.insert_attempt(b["attempt"])
    store.insert_event(b["event"])
    store.insert_receipt(b["receipt"], loaded.plan)
    return {"status": "created", "receipt": b["receipt"], "attempt": b["attempt"]}
