"""Integrity loads of commands.md §2.4 over the model's State (LOAD-RUN, LOAD-STEP(S), LOAD-ATTEMPT,
clock floor; mirrors impl/commands/loads.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import messages as M
from .cmd_context import CommandContext
from .errors import Invalid, QlwfError
from .integrity import clock_problem, lease_mirror_problem, plan_step_problem, receipt_problem, run_problem
from .memo import IdentityMemo
from .records import (
    Record,
    shared_admission_receipt,
    shared_plan,
    shared_step_run,
    shared_task_receipt,
)
from .state import State

# Within trusting_record_identity() (the explorer, the stateful machine): the integrity checks of the
# records a state shares with its predecessor are answered by their identity (model/memo.py).
_checked = IdentityMemo(65_536)


@dataclass
class Loaded:
    plan: Record
    admission: Record
    run: Record


def load_run(state: State, ctx: CommandContext, run_id: str) -> Loaded:
    run = state.runs.get(run_id)
    if run is None:
        raise ctx.conflict("run_missing", M.run_missing(run_id))
    admissions = state.admission_of_run(run_id)
    if len(admissions) != 1:
        raise ctx.unavailable("admission_drift", M.admission_count(run_id, len(admissions)))
    adm = admissions[0]
    try:
        plan = shared_plan(adm["plan"])
        shared_admission_receipt(adm["receipt"])
    except QlwfError as e:
        raise ctx.unavailable("plan_drift", e.message) from e
    if plan["planDigest"] != adm["planDigest"]:
        raise ctx.unavailable("plan_drift", M.PLAN_DIGEST_DRIFT)
    drift = _checked(run_problem, run, plan)
    if drift is not None:
        raise ctx.unavailable(*drift)
    return Loaded(plan, adm, run)


def load_step(state: State, ctx: CommandContext, loaded: Loaded, step_run_id: str) -> Record:
    s = state.step_runs.get(step_run_id)
    if s is None or s["runId"] != loaded.run["id"]:
        raise ctx.conflict("step_missing", M.step_missing(step_run_id, loaded.run["id"]))
    try:
        shared_step_run(s)
    except QlwfError as e:
        raise ctx.unavailable("step_drift", e.message) from e
    drift = _checked(plan_step_problem, s, loaded.plan)
    if drift is not None:
        raise ctx.unavailable(*drift)
    return s


def load_steps(state: State, ctx: CommandContext, loaded: Loaded) -> list[Record]:
    steps = state.steps_of_run(loaded.run["id"])
    if sorted(s["id"] for s in steps) != sorted(p["stepRunId"] for p in loaded.plan["steps"]):
        raise ctx.unavailable("step_drift", M.STEPS_NOT_PLAN)
    return [load_step(state, ctx, loaded, s["id"]) for s in sorted(steps, key=lambda s: (s["stepKey"], s["id"]))]


@dataclass
class LoadedAttempt:
    loaded: Loaded
    attempt: Record
    receipt: Record
    step: Record
    lease: Record | None


def check_lease_mirror(ctx: CommandContext, attempt: Record, lease: Record | None) -> None:
    drift = _checked(lease_mirror_problem, attempt, lease)
    if drift is not None:
        raise ctx.unavailable(*drift)


def check_receipt(ctx: CommandContext, attempt: Record, receipt: Record | None) -> Record:
    try:
        if receipt is None:
            raise Invalid("", "", "missing")
        r = shared_task_receipt(receipt)
    except QlwfError as e:
        raise ctx.unavailable("receipt_drift", M.receipt_problem(attempt["id"], e.message)) from e
    drift = _checked(receipt_problem, attempt, r)
    if drift is not None:
        raise ctx.unavailable(*drift)
    return r


def load_attempt(state: State, ctx: CommandContext, attempt_id: str) -> LoadedAttempt:
    attempt = state.attempts.get(attempt_id)
    if attempt is None:
        raise ctx.conflict("attempt_missing", M.attempt_missing(attempt_id))
    receipt = check_receipt(ctx, attempt, state.receipts.get(attempt_id))
    loaded = load_run(state, ctx, attempt["runId"])
    step = load_step(state, ctx, loaded, attempt["stepRunId"])
    lease = state.leases.get(attempt_id)
    check_lease_mirror(ctx, attempt, lease)
    return LoadedAttempt(loaded, attempt, receipt, step, lease)


def clock_floor(state: State, ctx: CommandContext, run_id: str, leases: list[Record | None]) -> None:
    """S-14: now must not precede the Run's last event or any loaded lease's updatedAtMs."""
    events = state.events_of(run_id)
    regression = clock_problem(ctx.now, events[-1]["createdAtMs"] if events else None, leases)
    if regression is not None:
        raise ctx.invalid(*regression)


def at_epoch(step: Record, receipt: Record) -> bool:
    return bool(step["status"] == "ready" and step["version"] == receipt["stepRunVersion"]
                and step["stepRunDigest"] == receipt["stepRunDigest"])


def at_running_epoch(step: Record, receipt: Record) -> bool:
    return bool(step["status"] == "running" and step["version"] == receipt["stepRunVersion"] + 1)
