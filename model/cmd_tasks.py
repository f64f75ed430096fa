"""admit_task_attempt (commands.md §4.5).
"""

from __future__ import annotations

from typing import Any

from . import messages as M
from . import tables as T
from .arguments import check_arguments
from .attempts import build_loaded_task_attempt_admission
from .cmd_context import CommandContext, ceiling, put_attempt, put_run
from .cmd_loads import clock_floor, load_run, load_step
from .errors import QlwfError
from .records import Record, binding_plan_problem, normalize_binding
from .state import State, StateWriter


def admit_task_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    binding = normalize_binding(args["binding"], ctx.argument_raiser())
    loaded = load_run(state, ctx, args["runId"])
    run = loaded.run
    step = load_step(state, ctx, loaded, args["stepRunId"])
    existing = next((r for r in state.receipts.values() if (r["runId"], r["stepRunId"], r["stepRunVersion"])
                     == (run["id"], step["id"], step["version"])), None)
    if existing is not None:
        if existing["stepRunDigest"] != step["stepRunDigest"]:
            raise ctx.unavailable("receipt_drift", M.RECEIPT_EPOCH_DRIFT)
        if any(existing[k] != binding[k] for k in binding):
            raise ctx.conflict("binding_mismatch", M.BINDING_MISMATCH)
        ctx.fire(T.decision("task_admission.replay").id)
        return {"status": "existing", "receipt": existing, "attempt": state.attempts[existing["attemptId"]]}, state
    if step["status"] != "ready":
        raise ctx.conflict("step_not_ready", M.step_is(step["id"], step["status"]))
    plan_step = next(p for p in loaded.plan["steps"] if p["stepRunId"] == step["id"])
    problem = binding_plan_problem(binding, loaded.plan, plan_step)
    if problem:
        raise ctx.invalid("binding_inconsistent", problem)
    if run["status"] != "running":
        raise ctx.conflict("run_not_running", M.run_is(run["status"]))
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", M.CANCEL_INTENT)
    if step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise ctx.conflict("attempts_exhausted", M.ATTEMPTS_EXHAUSTED)
    n = 1 + max((a["attempt"] for a in state.attempts_of_run(run["id"])), default=0)
    if n > T.MAX_RUN_ATTEMPTS:
        raise ctx.conflict("attempt_numbers_exhausted", M.ATTEMPT_NUMBERS_EXHAUSTED)
    clock_floor(state, ctx, run["id"], [])
    try:
        b = build_loaded_task_attempt_admission({"plan": loaded.plan, "run": run, "stepRun": step,
                                                 "binding": binding, "attemptNumber": n, "admittedAtMs": ctx.now})
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    ceiling(ctx, b["run"]["version"])
    tx = StateWriter(state, ctx.now)
    put_run(tx, b["run"])
    put_attempt(tx, b["attempt"])
    tx.append_event(b["event"])
    tx.table("receipts")[b["attempt"]["id"]] = b["receipt"]
    ctx.fire(T.attempt_row("admit_task_attempt", None, "claimed").id)
    return {"status": "created", "receipt": b["receipt"], "attempt": b["attempt"]}, tx.commit()
