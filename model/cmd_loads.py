"""Integrity loads of commands.md §2.4 over the model's State (LOAD-RUN, LOAD-STEP(S), LOAD-ATTEMPT,
clock floor; mirrors impl/commands/loads.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import tables as T
from .admission import RUN_IDENTITY_KEYS, admission_run
from .cmd_context import CommandContext
from .errors import Invalid, QlwfError
from .records import (
    Record,
    attempt_problem,
    lease_problem,
    shared_admission_receipt,
    shared_plan,
    shared_step_run,
    shared_task_receipt,
)
from .state import State


# ------------------------------------------------------------------------------------------------
# Integrity loads (commands.md §2.4)
@dataclass
class Loaded:
    plan: Record
    admission: Record
    run: Record


def load_run(state: State, ctx: CommandContext, run_id: str) -> Loaded:
    run = state.runs.get(run_id)
    if run is None:
        raise ctx.conflict("run_missing", f"Run {run_id} does not exist")
    admissions = state.admission_of_run(run_id)
    if len(admissions) != 1:
        raise ctx.unavailable("admission_drift", f"Run {run_id} has {len(admissions)} admissions")
    adm = admissions[0]
    try:
        plan = shared_plan(adm["plan"])
        shared_admission_receipt(adm["receipt"])
    except QlwfError as e:
        raise ctx.unavailable("plan_drift", e.message) from e
    if plan["planDigest"] != adm["planDigest"]:
        raise ctx.unavailable("plan_drift", "stored planDigest differs from the admission")
    expected = admission_run(plan)
    problems = [k for k in (*RUN_IDENTITY_KEYS, "createdAtMs", "startedAtMs") if run.get(k) != expected[k]]
    if (problems or run["status"] not in T.RUN_STATUSES or run["version"] != run["eventSequence"]
            or ("finishedAtMs" in run) != (run["status"] in T.TERMINAL_RUN)
            or (run["status"] == "running" and ("errorCode" in run or "errorSummary" in run))
            or ("cancelRequestedAtMs" in run) != ("cancelReason" in run)):
        raise ctx.unavailable("run_drift", f"Run {run_id} drifted from its admission ({problems})")
    return Loaded(plan, adm, run)


def load_step(state: State, ctx: CommandContext, loaded: Loaded, step_run_id: str) -> Record:
    s = state.step_runs.get(step_run_id)
    if s is None or s["runId"] != loaded.run["id"]:
        raise ctx.conflict("step_missing", f"StepRun {step_run_id} of Run {loaded.run['id']} does not exist")
    try:
        shared_step_run(s)
    except QlwfError as e:
        raise ctx.unavailable("step_drift", e.message) from e
    p = next((p for p in loaded.plan["steps"] if p["stepRunId"] == s["id"]), None)
    if p is None or not (
        s["stepKey"] == p["stepKey"] and s["definitionRef"] == p["taskDefinitionRef"]
        and s["definitionDigest"] == p["taskDefinitionDigest"] and s["kind"] == "task" and s["required"] is True
        and s["parentStepRunId"] is None and s["inputRef"] is None
        and s["createdAtMs"] == loaded.plan["plannedAtMs"]
    ):
        raise ctx.unavailable("step_drift", f"StepRun {s['id']} does not match its plan step")
    return s


def load_steps(state: State, ctx: CommandContext, loaded: Loaded) -> list[Record]:
    steps = state.steps_of_run(loaded.run["id"])
    if sorted(s["id"] for s in steps) != sorted(p["stepRunId"] for p in loaded.plan["steps"]):
        raise ctx.unavailable("step_drift", "StepRuns are not in bijection with the plan steps")
    return [load_step(state, ctx, loaded, s["id"]) for s in sorted(steps, key=lambda s: (s["stepKey"], s["id"]))]


@dataclass
class LoadedAttempt:
    loaded: Loaded
    attempt: Record
    receipt: Record
    step: Record
    lease: Record | None


def check_lease_mirror(ctx: CommandContext, attempt: Record, lease: Record | None) -> None:
    if lease is not None and (lease_problem(lease) or lease["attemptId"] != attempt["id"]
                              or lease["runId"] != attempt["runId"]):
        raise ctx.unavailable("lease_drift", f"lease of {attempt['id']} is malformed")
    if "workerId" in attempt:
        if lease is None or any(attempt[k] != lease[lk] for k, lk in (
            ("workerId", "workerId"), ("leaseGeneration", "leaseGeneration"), ("leaseVersion", "version"),
            ("leaseExpiresAtMs", "expiresAtMs"),
        )):
            raise ctx.unavailable("lease_drift", f"lease mirror of {attempt['id']} disagrees with its lease")
    elif lease is not None and not (lease["status"] == "released"
                                    and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS):
        raise ctx.unavailable("lease_drift", f"attempt {attempt['id']} lost its lease keys without a worker release")


def check_receipt(ctx: CommandContext, attempt: Record, receipt: Record | None) -> Record:
    try:
        if receipt is None:
            raise Invalid("", "", "missing")
        r = shared_task_receipt(receipt)
    except QlwfError as e:
        raise ctx.unavailable("receipt_drift", f"receipt of {attempt['id']}: {e.message}") from e
    if attempt_problem(attempt) or (r["attemptId"], r["runId"], r["stepRunId"], r["attemptNumber"], r["executorType"],
                                    r["admittedAtMs"]) != (attempt["id"], attempt["runId"], attempt["stepRunId"],
                                                           attempt["attempt"], attempt["executorType"],
                                                           attempt["createdAtMs"]):
        raise ctx.unavailable("receipt_drift", f"receipt of {attempt['id']} disagrees with the attempt")
    return r


def load_attempt(state: State, ctx: CommandContext, attempt_id: str) -> LoadedAttempt:
    attempt = state.attempts.get(attempt_id)
    if attempt is None:
        raise ctx.conflict("attempt_missing", f"attempt {attempt_id} does not exist")
    receipt = check_receipt(ctx, attempt, state.receipts.get(attempt_id))
    loaded = load_run(state, ctx, attempt["runId"])
    step = load_step(state, ctx, loaded, attempt["stepRunId"])
    lease = state.leases.get(attempt_id)
    check_lease_mirror(ctx, attempt, lease)
    return LoadedAttempt(loaded, attempt, receipt, step, lease)


def clock_floor(state: State, ctx: CommandContext, run_id: str, leases: list[Record | None]) -> None:
    """S-14: now must not precede the Run's last event or any loaded lease's updatedAtMs."""
    events = state.events_of(run_id)
    floor = max([events[-1]["createdAtMs"] if events else 0,
                 *(lease["updatedAtMs"] for lease in leases if lease is not None)])
    if ctx.now < floor:
        raise ctx.invalid("clock_regression", f"observation time {ctx.now} precedes {floor}")


def at_epoch(step: Record, receipt: Record) -> bool:
    return bool(step["status"] == "ready" and step["version"] == receipt["stepRunVersion"]
                and step["stepRunDigest"] == receipt["stepRunDigest"])


def at_running_epoch(step: Record, receipt: Record) -> bool:
    return bool(step["status"] == "running" and step["version"] == receipt["stepRunVersion"] + 1)
