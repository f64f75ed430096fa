"""The whole-system model: every command of commands.md as one atomic step.

`apply(state, command, at_ms)` is a pure function: it returns an Outcome holding either the result
and the new State, or the typed error and the unchanged State, plus the names of the rule-table
rows that fired (for explanations and coverage witnesses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from . import ids
from . import tables as T
from .admission import (
    RUN_IDENTITY_KEYS,
    admission_ledger,
    admission_run,
    admission_step_entries,
    create_admission_bundle,
)
from .attempts import (
    build_task_attempt_admission,
    completion_status,
    fence_problem,
    lease_is_expired,
    lease_is_live,
)
from .cancellation import (
    RULE_STEP_BLOCKED_ATTEMPT,
    accumulate_page,
    check_page_result,
    page_outcome,
    resolve_cancellation,
)
from .errors import CommandErrors, Conflict, Invalid, InvalidRaiser, QlwfError
from .frontier import is_frontier_candidate, resolve_frontier
from .records import (
    ATTEMPT_KEYS,
    ATTEMPT_LEASE_KEYS,
    LEASE_KEYS,
    RUN_KEYS,
    Record,
    actor_problem,
    attempt_problem,
    canonical,
    exact_keys,
    lease_problem,
    make_event,
    normalize_binding,
    normalize_plan,
    shared_admission_receipt,
    shared_plan,
    shared_step_run,
    shared_task_receipt,
)
from .recovery import build_task_recovery
from .rules import require
from .state import State, StateWriter
from .steprun import ledger_entry, transition_step_run_mutation
from .values import (
    INT31_MAX,
    SAFE_INT_MAX,
    is_digest,
    is_identifier,
    is_int_in,
    is_object,
    is_portable_id,
    is_timestamp,
)


class Outcome(NamedTuple):
    result: Record | None
    error: QlwfError | None
    state: State
    rules: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class CommandContext(CommandErrors):
    """One command's run in the model: its typed errors, the observation time and the fired rules."""

    now: int
    rules: list[str]

    def fire(self, rule_id: str) -> None:
        """Record that the row `rule_id` of a rule table decided this command (UnknownRule if none has it)."""
        self.rules.append(require(rule_id))


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


def _check_lease_mirror(ctx: CommandContext, attempt: Record, lease: Record | None) -> None:
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


def _check_receipt(ctx: CommandContext, attempt: Record, receipt: Record | None) -> Record:
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
    receipt = _check_receipt(ctx, attempt, state.receipts.get(attempt_id))
    loaded = load_run(state, ctx, attempt["runId"])
    step = load_step(state, ctx, loaded, attempt["stepRunId"])
    lease = state.leases.get(attempt_id)
    _check_lease_mirror(ctx, attempt, lease)
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


# ------------------------------------------------------------------------------------------------
# Writing helpers (commands.md §2.5)
def _ceiling(ctx: CommandContext, *values: int) -> None:
    if any(v > INT31_MAX for v in values):
        raise ctx.unavailable("counter_overflow", "a counter would exceed 2147483647")


def bump_run(tx: StateWriter, run: Record, k: int) -> Record:
    new = dict(run)
    new["version"] = run["version"] + k
    new["eventSequence"] = run["eventSequence"] + k
    return new


def put_run(tx: StateWriter, run: Record) -> None:
    tx.table("runs")[run["id"]] = canonical(run, RUN_KEYS)


def put_mutation(tx: StateWriter, mutation: Record) -> None:
    tx.table("step_runs")[mutation["stepRun"]["id"]] = mutation["stepRun"]
    tx.append_event(mutation["event"])
    tx.table("mutations")[mutation["mutationId"]] = ledger_entry(mutation, tx.now)


def put_attempt(tx: StateWriter, attempt: Record) -> None:
    tx.table("attempts")[attempt["id"]] = canonical(attempt, ATTEMPT_KEYS)


def put_lease(tx: StateWriter, lease: Record) -> None:
    tx.table("leases")[lease["attemptId"]] = canonical(lease, LEASE_KEYS)


class RunCounter:
    """In-memory Run counters for one command: APPEND and MUTATE advance them (commands.md §2.5)."""

    def __init__(self, run: Record) -> None:
        self.run = run
        self.version = run["version"]
        self.sequence = run["eventSequence"]

    def next(self) -> tuple[int, int]:
        self.version += 1
        self.sequence += 1
        return self.version, self.sequence

    def context(self, event_id: str, actor: Record) -> Record:
        return {"expectedRunVersion": self.version, "expectedRunEventSequence": self.sequence, "eventId": event_id,
                "dedupeKey": event_id, "actor": actor}


def worker_actor(worker_id: str) -> Record:
    return {"type": "worker", "id": worker_id}




# ------------------------------------------------------------------------------------------------
# Argument checks
def _args(ctx: CommandContext, args: Any, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    exact_keys(args, required, optional, ctx.argument_raiser(), f"{ctx.command} arguments")
    return cast(dict[str, Any], args)


def _worker_args(ctx: CommandContext, args: dict[str, Any], extra: tuple[str, ...] = ()) -> None:
    ctx.require(is_portable_id(args["attemptId"]), "attemptId must be a PORTABLE_ID")
    ctx.require(is_identifier(args["workerId"]), "workerId must be an IDENTIFIER")
    if "leaseGeneration" in args:
        ctx.require(is_int_in(args["leaseGeneration"], 1, INT31_MAX), "leaseGeneration must be 1..2147483647")
    if "durationMs" in args:
        ctx.require(is_int_in(args["durationMs"], T.LEASE_DURATION_MIN_MS, T.LEASE_DURATION_MAX_MS),
                 "durationMs must be 5000..600000")
        ctx.require(ctx.now + args["durationMs"] <= SAFE_INT_MAX, "lease expiry exceeds the timestamp range")


# ------------------------------------------------------------------------------------------------
# admit_workflow (commands.md §4.1, frontier.md §2–§3)
def _verify_frozen_evidence(state: State, ctx: CommandContext, bundle: Record) -> None:
    plan = bundle["plan"]
    pd = plan["planDigest"]
    run_id = plan["runId"]
    adm = state.admissions[pd]
    n = len(plan["steps"])
    problems: list[str] = []
    if adm["plan"] != plan or adm["receipt"] != bundle["receipt"]:
        problems.append("stored plan or receipt differs")
    events = state.events_of(run_id)
    expected_events = [bundle["admissionEvent"], *(m["event"] for m in bundle["stepMutations"])]
    if list(events[: n + 1]) != expected_events:
        problems.append("admission events differ")
    entries = admission_step_entries(plan, bundle)
    if any(state.admission_steps.get((pd, e["stepKey"])) != e for e in entries):
        problems.append("admission step entries differ")
    for entry in admission_ledger(bundle):
        ledger = state.ledger_of_step(entry["stepRunId"])
        if not ledger or ledger[0] != entry:
            problems.append(f"first ledger entry of {entry['stepRunId']} differs")
    run = state.runs.get(run_id)
    expected_run = bundle["run"]
    if (run is None or any(run.get(k) != expected_run[k] for k in (*RUN_IDENTITY_KEYS, "createdAtMs", "startedAtMs"))
            or run["status"] not in T.RUN_STATUSES or run["version"] != run["eventSequence"]
            or run["version"] < n + 1):
        problems.append("Run identity or counters drifted")
    for m in bundle["stepMutations"]:
        s = state.step_runs.get(m["stepRun"]["id"])
        created = m["stepRun"]
        if s is None or any(s[k] != created[k] for k in ("id", "runId", "stepKey", "kind", "definitionRef",
                                                           "definitionDigest", "required", "parentStepRunId",
                                                           "inputRef", "createdAtMs")) or s["version"] < 1:
            problems.append(f"StepRun {created['id']} identity drifted")
    if problems:
        raise ctx.unavailable("admission_drift", "; ".join(problems))


def admit_workflow(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("plan",))
    try:
        plan = normalize_plan(args["plan"])
    except QlwfError as e:
        raise Invalid(T.FAMILIES["plan"].invalid or "", "plan_invalid", e.message) from e
    bundle = create_admission_bundle(plan)
    if plan["plannedAtMs"] > ctx.now:
        raise ctx.invalid("planned_in_future", "plannedAtMs is after the observation time")
    same_id = [a for a in state.admissions.values() if a["plan"]["planId"] == plan["planId"]]
    if same_id:
        if same_id[0]["planDigest"] == plan["planDigest"]:
            _verify_frozen_evidence(state, ctx, bundle)
            ctx.fire(T.decision("admit.replay").id)
            return {"status": "existing", "receipt": same_id[0]["receipt"]}, state
        raise ctx.conflict("plan_id_conflict", f"planId {plan['planId']} is admitted with another digest")
    if plan["runId"] in state.runs or state.admission_of_run(plan["runId"]):
        raise ctx.conflict("run_id_conflict", f"Run {plan['runId']} already exists")
    if any(s["stepRunId"] in state.step_runs for s in plan["steps"]):
        raise ctx.conflict("step_run_id_conflict", "a StepRun id of the plan already exists")
    tx = StateWriter(state, ctx.now)
    put_run(tx, bundle["run"])
    tx.append_event(bundle["admissionEvent"])
    for m, entry in zip(bundle["stepMutations"], admission_ledger(bundle), strict=True):
        tx.table("step_runs")[m["stepRun"]["id"]] = m["stepRun"]
        tx.append_event(m["event"])
        tx.table("mutations")[m["mutationId"]] = entry
        ctx.fire(T.step_row("admit_workflow", None, m["stepRun"]["status"]).id)
    tx.table("admissions")[plan["planDigest"]] = {"planDigest": plan["planDigest"], "plan": plan,
                                                  "receipt": bundle["receipt"]}
    for step_entry in admission_step_entries(plan, bundle):
        tx.table("admission_steps")[(step_entry["planDigest"], step_entry["stepKey"])] = step_entry
    ctx.fire(T.run_row("admit_workflow", None, "running").id)
    return {"status": "created", "receipt": bundle["receipt"]}, tx.commit()


# ------------------------------------------------------------------------------------------------
# advance_frontier (commands.md §4.3)
def advance_frontier(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("runId",))
    ctx.require(is_portable_id(args["runId"]), "runId must be a PORTABLE_ID")
    loaded = load_run(state, ctx, args["runId"])
    run = loaded.run
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", "the Run has cancel intent")
    steps = load_steps(state, ctx, loaded)
    clock_floor(state, ctx, run["id"], [])
    try:
        res = resolve_frontier({"plan": loaded.plan, "run": {**run, "status": "running"}, "stepRuns": steps,
                                "observedAtMs": ctx.now})
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    base = {"runId": run["id"], "planDigest": loaded.plan["planDigest"]}
    mutations = res["stepMutations"]
    if run["status"] != "running":
        if mutations or res["terminalStatus"] != run["status"]:
            raise ctx.unavailable("terminal_drift", "terminal Run does not recompute to its status")
        ctx.fire(T.decision("frontier.settled").id)
        return {"status": "settled", **base, "stepMutationCount": 0, "readyStepRunIds": [],
                "terminalStatus": run["status"], "runVersion": run["version"],
                "runEventSequence": run["eventSequence"], "observedAtMs": ctx.now}, state
    terminal = res["terminalTransition"]
    increment = len(mutations) + (1 if terminal else 0)
    if increment == 0:
        ctx.fire(T.decision("frontier.unchanged").id)
        return {"status": "unchanged", **base, "stepMutationCount": 0, "readyStepRunIds": res["readyStepRunIds"],
                "terminalStatus": None, "runVersion": run["version"], "runEventSequence": run["eventSequence"],
                "observedAtMs": ctx.now}, state
    _ceiling(ctx, run["version"] + increment)
    tx = StateWriter(state, ctx.now)
    for m in mutations:
        put_mutation(tx, m)
        ctx.fire(T.step_row("advance_frontier", m["previousStatus"], m["stepRun"]["status"]).id)
    new_run = bump_run(tx, run, increment)
    if terminal:
        new_run["status"] = terminal["status"]
        new_run["finishedAtMs"] = ctx.now
        if terminal["errorCode"] is not None:
            new_run["errorCode"] = terminal["errorCode"]
        tx.append_event(terminal["event"])
        ctx.fire(T.run_row("advance_frontier", "running", terminal["status"]).id)
    put_run(tx, new_run)
    status = "terminal" if terminal else "advanced"
    return {"status": status, **base, "stepMutationCount": len(mutations),
            "readyStepRunIds": [] if terminal else res["readyStepRunIds"],
            "terminalStatus": terminal["status"] if terminal else None, "runVersion": new_run["version"],
            "runEventSequence": new_run["eventSequence"], "observedAtMs": ctx.now}, tx.commit()


# ------------------------------------------------------------------------------------------------
# admit_task_attempt (commands.md §4.5)
def admit_task_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("runId", "stepRunId", "binding"))
    ctx.require(is_portable_id(args["runId"]) and is_identifier(args["stepRunId"]), "runId/stepRunId invalid")
    binding = normalize_binding(args["binding"], InvalidRaiser(ctx.family.invalid or "", "argument_invalid"))
    loaded = load_run(state, ctx, args["runId"])
    run = loaded.run
    step = load_step(state, ctx, loaded, args["stepRunId"])
    existing = next((r for r in state.receipts.values() if (r["runId"], r["stepRunId"], r["stepRunVersion"])
                     == (run["id"], step["id"], step["version"])), None)
    if existing is not None:
        if existing["stepRunDigest"] != step["stepRunDigest"]:
            raise ctx.unavailable("receipt_drift", "receipt epoch digest differs from the StepRun")
        if any(existing[k] != binding[k] for k in binding):
            raise ctx.conflict("binding_mismatch", "this epoch was admitted with another binding")
        ctx.fire(T.decision("task_admission.replay").id)
        return {"status": "existing", "receipt": existing, "attempt": state.attempts[existing["attemptId"]]}, state
    if step["status"] != "ready":
        raise ctx.conflict("step_not_ready", f"StepRun {step['id']} is {step['status']}")
    plan_step = next(p for p in loaded.plan["steps"] if p["stepRunId"] == step["id"])
    from .records import binding_plan_problem  # local: keeps the import list of this module short

    problem = binding_plan_problem(binding, loaded.plan, plan_step)
    if problem:
        raise ctx.invalid("binding_inconsistent", problem)
    if run["status"] != "running":
        raise ctx.conflict("run_not_running", f"Run is {run['status']}")
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", "the Run has cancel intent")
    if step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise ctx.conflict("attempts_exhausted", "StepRun attemptCount reached 64")
    n = 1 + max((a["attempt"] for a in state.attempts_of_run(run["id"])), default=0)
    if n > T.MAX_RUN_ATTEMPTS:
        raise ctx.conflict("attempt_numbers_exhausted", "the Run used all 8192 attempt numbers")
    clock_floor(state, ctx, run["id"], [])
    try:
        b = build_task_attempt_admission({"plan": loaded.plan, "run": run, "stepRun": step, "binding": binding,
                                          "attemptNumber": n, "admittedAtMs": ctx.now})
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    _ceiling(ctx, b["run"]["version"])
    tx = StateWriter(state, ctx.now)
    put_run(tx, b["run"])
    put_attempt(tx, b["attempt"])
    tx.append_event(b["event"])
    tx.table("receipts")[b["attempt"]["id"]] = b["receipt"]
    ctx.fire(T.attempt_row("admit_task_attempt", None, "claimed").id)
    return {"status": "created", "receipt": b["receipt"], "attempt": b["attempt"]}, tx.commit()


# ------------------------------------------------------------------------------------------------
# Worker commands (commands.md §4.6–§4.12)
def _attempt_event(la: LoadedAttempt, counter: RunCounter, kind: str, generation: int, type_: str,
                   actor: Record, payload_fn: Callable[[int], Record], now: int) -> Record:
    v, seq = counter.next()
    a = la.attempt
    return make_event(event_id=ids.task_execution_event_id(a["runId"], a["id"], generation, kind),
                      run_id=a["runId"], sequence=seq, type_=type_, actor=actor, attempt_id=a["id"],
                      step_run_id=a["stepRunId"], payload=payload_fn(v), created_at_ms=now)


def _mutate(ctx: CommandContext, tx: StateWriter, counter: RunCounter, step: Record, to: str, actor: Record,
            ids_: tuple[str, str], result_code: str | None = None, error_summary: str | None = None) -> Record:
    command: Record = {"expectedVersion": step["version"], "expectedDigest": step["stepRunDigest"],
                       "mutationId": ids_[0], "to": to, "atMs": ctx.now}
    if result_code is not None:
        command["resultCode"] = result_code
    if error_summary is not None:
        command["errorSummary"] = error_summary
    try:
        m = transition_step_run_mutation(step, command, counter.context(ids_[1], actor))
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    counter.next()
    put_mutation(tx, m)
    return cast(Record, m["stepRun"])


def claim_lease(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "workerId", "durationMs"))
    _worker_args(ctx, args)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run, lease = la.attempt, la.loaded.run, la.lease

    def answer(status: str, reason: str | None = None) -> tuple[Record, State]:
        ctx.fire(T.decision(f"claim.{status}").id)
        return {"status": status, "reason": reason, "lease": lease}, state

    if a["status"] != "claimed":
        return answer("not_eligible", "attempt_state_mismatch")
    if run["status"] != "running":
        return answer("not_eligible", "run_state_mismatch")
    if "cancelRequestedAtMs" in run:
        return answer("not_eligible", "cancellation_requested")
    if not at_epoch(la.step, la.receipt):
        return answer("not_eligible", "stale_execution_authority")
    if lease is not None and lease["status"] == "completed":
        return answer("not_eligible", "lease_completed")
    if lease_is_live(lease, ctx.now):
        assert lease is not None
        return answer("idempotent" if lease["workerId"] == args["workerId"] else "leased")
    now, worker = ctx.now, args["workerId"]
    if lease is None:
        new_lease = {"attemptId": a["id"], "runId": a["runId"], "status": "leased", "version": 0,
                     "leaseGeneration": 1, "workerId": worker}
        ctx.fire(T.lease_row("claim_lease", None, "leased").id)
    else:
        new_lease = {k: lease[k] for k in ("attemptId", "runId")} | {
            "status": "leased", "version": lease["version"] + 1, "leaseGeneration": lease["leaseGeneration"] + 1,
            "workerId": worker}
        ctx.fire(T.lease_row("claim_lease", lease["status"], "leased").id)
    new_lease |= {"acquiredAtMs": now, "renewedAtMs": now, "expiresAtMs": now + args["durationMs"],
                  "updatedAtMs": now}
    _ceiling(ctx, run["version"] + 1, new_lease["version"], new_lease["leaseGeneration"])
    tx = StateWriter(state, now)
    counter = RunCounter(run)
    put_lease(tx, new_lease)
    put_attempt(tx, a | {"workerId": worker, "leaseGeneration": new_lease["leaseGeneration"],
                         "leaseVersion": new_lease["version"], "leaseExpiresAtMs": new_lease["expiresAtMs"]})
    gen = new_lease["leaseGeneration"]
    tx.append_event(_attempt_event(
        la, counter, "lease_claimed", gen, "workflow.task_dispatch_leased", worker_actor(worker),
        lambda _v: {"attempt_id": a["id"], "lease_generation": gen, "execution_scope": T.EXECUTION_SCOPE,
                    "from_status": "ready", "to_status": "ready"}, now))
    put_run(tx, bump_run(tx, run, 1))
    ctx.fire(T.attempt_row("claim_lease", "claimed", "claimed").id)
    return {"status": "claimed", "reason": None, "lease": canonical(new_lease, LEASE_KEYS)}, tx.commit()


def _fence(ctx: CommandContext, la: LoadedAttempt, args: dict[str, Any]) -> None:
    problem = fence_problem(la.lease, args["workerId"], args["leaseGeneration"], ctx.now)
    if problem:
        raise ctx.conflict(problem, f"lease fence failed for {la.attempt['id']}")


def _same_holder(lease: Record | None, args: dict[str, Any]) -> bool:
    return (lease is not None and lease["workerId"] == args["workerId"]
            and lease["leaseGeneration"] == args["leaseGeneration"])


def _timeout_requested(state: State, attempt: Record) -> bool:
    return any(e["type"] == "workflow.task_timeout_requested" and e.get("attemptId") == attempt["id"]
               for e in state.events_of(attempt["runId"]))


def renew_lease(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "workerId", "leaseGeneration", "durationMs"))
    _worker_args(ctx, args)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    _fence(ctx, la, args)
    a, run, lease = la.attempt, la.loaded.run, la.lease
    assert lease is not None
    if a["status"] not in T.ACTIVE_ATTEMPT:
        raise ctx.conflict("attempt_state_mismatch", f"attempt is {a['status']}")
    now = ctx.now
    new_lease = lease | {"version": lease["version"] + 1, "renewedAtMs": now,
                         "expiresAtMs": now + args["durationMs"], "updatedAtMs": now}
    deadline = a.get("deadlineAtMs")
    writes_request = ("cancelRequestedAtMs" not in run and deadline is not None and deadline <= now
                      and not _timeout_requested(state, a))
    _ceiling(ctx, new_lease["version"], *((run["version"] + 1,) if writes_request else ()))
    tx = StateWriter(state, now)
    put_lease(tx, new_lease)
    new_attempt = a | {"leaseVersion": new_lease["version"], "leaseExpiresAtMs": new_lease["expiresAtMs"]}
    put_attempt(tx, new_attempt)
    ctx.fire(T.lease_row("renew_lease", "leased", "leased").id)
    ctx.fire(T.attempt_row("renew_lease", a["status"], a["status"]).id)
    if "cancelRequestedAtMs" in run:
        status, reason = "stop_requested", run["cancelReason"]
        ctx.fire(T.decision("renew.stop.intent").id)
    elif writes_request:
        counter = RunCounter(run)
        tx.append_event(_attempt_event(
            la, counter, "timeout_requested", lease["leaseGeneration"], "workflow.task_timeout_requested",
            worker_actor(args["workerId"]),
            lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                       "lease_generation": lease["leaseGeneration"], "deadline_at_ms": deadline, "version": v}, now))
        put_run(tx, bump_run(tx, run, 1))
        status, reason = "stop_requested", "timeout"
        ctx.fire(T.decision("renew.stop.timeout_written").id)
    elif deadline is not None and deadline <= now:
        status, reason = "stop_requested", "timeout"
        ctx.fire(T.decision("renew.stop.timeout_repeat").id)
    else:
        status, reason = "renewed", None
        ctx.fire(T.decision("renew.renewed").id)
    return {"status": status, "reason": reason, "lease": canonical(new_lease, LEASE_KEYS)}, tx.commit()


def release_lease(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "workerId", "leaseGeneration", "reason"))
    _worker_args(ctx, args)
    ctx.require(args["reason"] in T.WORKER_RELEASE_REASONS, "reason must be a worker release reason")
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run, lease = la.attempt, la.loaded.run, la.lease
    if lease is not None and lease["status"] == "released" and _same_holder(lease, args):
        if lease["releaseReason"] == args["reason"]:
            ctx.fire(T.decision("release.replay").id)
            return {"status": "already_released", "lease": lease}, state
        raise ctx.conflict("replay_mismatch", "the lease was released with another reason")
    _fence(ctx, la, args)
    assert lease is not None
    if a["status"] != "claimed":
        raise ctx.conflict("attempt_state_mismatch", f"attempt is {a['status']}")
    now = ctx.now
    new_lease = lease | {"status": "released", "version": lease["version"] + 1, "releasedAtMs": now,
                         "releaseReason": args["reason"],
                         "updatedAtMs": now}
    _ceiling(ctx, new_lease["version"], run["version"] + 1)
    tx = StateWriter(state, now)
    put_lease(tx, new_lease)
    put_attempt(tx, {k: v for k, v in a.items() if k not in ATTEMPT_LEASE_KEYS})
    gen = lease["leaseGeneration"]
    tx.append_event(_attempt_event(
        la, RunCounter(run), "lease_released", gen, "workflow.task_dispatch_released", worker_actor(args["workerId"]),
        lambda _v: {"attempt_id": a["id"], "lease_generation": gen, "execution_scope": T.EXECUTION_SCOPE,
                    "from_status": "ready", "to_status": "ready", "release_reason": args["reason"]}, now))
    put_run(tx, bump_run(tx, run, 1))
    ctx.fire(T.lease_row("release_lease", "leased", "released").id)
    ctx.fire(T.attempt_row("release_lease", "claimed", "claimed").id)
    return {"status": "released", "lease": canonical(new_lease, LEASE_KEYS)}, tx.commit()


def start_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "workerId", "leaseGeneration", "timeoutMs"))
    _worker_args(ctx, args)
    timeout = args["timeoutMs"]
    ctx.require(timeout is None or is_int_in(timeout, 1, INT31_MAX), "timeoutMs must be null or 1..2147483647")
    ctx.require(timeout is None or ctx.now + timeout <= SAFE_INT_MAX, "deadline exceeds the timestamp range")
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run = la.attempt, la.loaded.run
    if a["status"] in ("starting", "running") and _same_holder(la.lease, args):
        ctx.fire(T.decision(f"start.replay.{a['status']}").id)
        return {"status": f"already_{a['status']}", "attempt": a}, state
    _fence(ctx, la, args)
    if a["status"] != "claimed":
        raise ctx.conflict("attempt_state_mismatch", f"attempt is {a['status']}")
    if run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", f"Run is {run['status']}")
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", "the Run has cancel intent")
    if not at_epoch(la.step, la.receipt):
        raise ctx.conflict("stale_execution_authority", "StepRun left the admitted epoch")
    _ceiling(ctx, run["version"] + 1)
    now = ctx.now
    new_attempt = a | {"status": "starting"}
    if timeout is not None:
        new_attempt["deadlineAtMs"] = now + timeout
    tx = StateWriter(state, now)
    put_attempt(tx, new_attempt)
    gen = args["leaseGeneration"]
    tx.append_event(_attempt_event(
        la, RunCounter(run), "attempt_starting", gen, "workflow.task_attempt.starting", worker_actor(args["workerId"]),
        lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                   "from_status": "claimed", "to_status": "starting", "lease_generation": gen,
                   "deadline_at_ms": new_attempt.get("deadlineAtMs"), "version": v}, now))
    put_run(tx, bump_run(tx, run, 1))
    ctx.fire(T.attempt_row("start_attempt", "claimed", "starting").id)
    return {"status": "starting", "attempt": canonical(new_attempt, ATTEMPT_KEYS)}, tx.commit()


def record_running(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "workerId", "leaseGeneration"))
    _worker_args(ctx, args)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run, step = la.attempt, la.loaded.run, la.step
    if a["status"] == "running" and _same_holder(la.lease, args):
        ctx.fire(T.decision("running.replay").id)
        return {"status": "already_running", "attempt": a}, state
    _fence(ctx, la, args)
    if a["status"] != "starting":
        raise ctx.conflict("attempt_state_mismatch", f"attempt is {a['status']}")
    if run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", f"Run is {run['status']}")
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", "the Run has cancel intent")
    if not at_epoch(step, la.receipt):
        raise ctx.conflict("stale_execution_authority", "StepRun left the admitted epoch")
    if step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise ctx.conflict("attempts_exhausted", "StepRun attemptCount reached 64")
    _ceiling(ctx, run["version"] + 2, a["callbackSequence"] + 1)
    now, gen, actor = ctx.now, args["leaseGeneration"], worker_actor(args["workerId"])
    tx = StateWriter(state, now)
    counter = RunCounter(run)
    new_attempt = a | {"status": "running", "startedAtMs": now, "callbackSequence": a["callbackSequence"] + 1}
    put_attempt(tx, new_attempt)
    tx.append_event(_attempt_event(
        la, counter, "attempt_running", gen, "workflow.task_attempt.running", actor,
        lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                   "from_status": "starting", "to_status": "running", "lease_generation": gen, "version": v}, now))
    _mutate(ctx, tx, counter, step, "running", actor,
            ids.task_execution_step_ids(a["runId"], a["id"], gen, "step_running"))
    put_run(tx, bump_run(tx, run, 2))
    ctx.fire(T.attempt_row("record_running", "starting", "running").id)
    ctx.fire(T.step_row("record_running", "ready", "running").id)
    return {"status": "running", "attempt": canonical(new_attempt, ATTEMPT_KEYS)}, tx.commit()


def _finish(state: State, ctx: CommandContext, la: LoadedAttempt, args: dict[str, Any], command: str,
            exit_code: int | None) -> tuple[Record, State]:
    """Shared effects of fail_start and complete_attempt (task-attempts.md §7)."""
    a, run, step, lease = la.attempt, la.loaded.run, la.step, la.lease
    assert lease is not None
    rule = completion_status(command, run, a, ctx.now, exit_code)
    target = rule.status
    codes = T.WORKER_PATH_CODES[(command, target)]
    from_starting = a["status"] == "starting"
    k = 2 if command == "fail_start" or not from_starting else 3
    callbacks = 1 if command == "fail_start" or from_starting else 0  # the attempt's callbackSequence + this
    _ceiling(ctx, run["version"] + k, lease["version"] + 1, a["callbackSequence"] + callbacks)
    now, gen, actor = ctx.now, args["leaseGeneration"], worker_actor(args["workerId"])
    tx = StateWriter(state, now)
    counter = RunCounter(run)
    new_attempt = dict(a)
    if command == "complete_attempt" and from_starting:
        step = _mutate(ctx, tx, counter, step, "running", actor,
                       ids.task_execution_step_ids(a["runId"], a["id"], gen, "step_running"))
        new_attempt |= {"startedAtMs": now, "callbackSequence": a["callbackSequence"] + 1}
        ctx.fire(T.step_row("complete_attempt", "ready", "running").id)
    elif command == "fail_start":
        new_attempt["callbackSequence"] = a["callbackSequence"] + 1
    new_lease = lease | {"status": "completed", "version": lease["version"] + 1, "completedAtMs": now,
                         "updatedAtMs": now}
    put_lease(tx, new_lease)
    new_attempt |= {"status": target, "finishedAtMs": now, "leaseVersion": new_lease["version"]}
    if exit_code is not None:
        new_attempt["exitCode"] = exit_code
    if codes.attempt_error_code is not None:
        new_attempt["errorCode"] = codes.attempt_error_code
        new_attempt["errorSummary"] = codes.attempt_error_summary
    put_attempt(tx, new_attempt)
    tx.append_event(_attempt_event(
        la, counter, "attempt_terminal", gen, f"workflow.task_attempt.{target}", actor,
        lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                   "from_status": a["status"], "to_status": target, "lease_generation": gen, "exit_code": exit_code,
                   "error_code": codes.attempt_error_code, "version": v}, now))
    _mutate(ctx, tx, counter, step, target, actor,
            ids.task_execution_step_ids(a["runId"], a["id"], gen, "step_terminal"),
            codes.step_result_code, codes.step_error_summary)
    put_run(tx, bump_run(tx, run, k))
    ctx.fire(rule.id)
    ctx.fire(T.lease_row(command, "leased", "completed").id)
    if command == "fail_start":
        ctx.fire(T.attempt_row(command, "starting", target).id)
        ctx.fire(T.step_row(command, "ready", target).id)
    else:
        ctx.fire(T.attempt_row(command, a["status"], target).id)
        ctx.fire(T.step_row(command, "running", target).id)
    result = {"status": "start_failed" if command == "fail_start" else "completed", "attemptStatus": target,
              "attempt": canonical(new_attempt, ATTEMPT_KEYS)}
    return result, tx.commit()


def _terminal_replay(ctx: CommandContext, la: LoadedAttempt, args: dict[str, Any]) -> Record | None:
    a, lease = la.attempt, la.lease
    if a["status"] in T.TERMINAL_ATTEMPT and lease is not None and lease["status"] == "completed" \
            and _same_holder(lease, args):
        ctx.fire(T.decision("finish.replay").id)
        return {"status": "already_terminal", "attemptStatus": a["status"], "attempt": a}
    return None


def fail_start(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "workerId", "leaseGeneration"))
    _worker_args(ctx, args)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    replay = _terminal_replay(ctx, la, args)
    if replay:
        return replay, state
    _fence(ctx, la, args)
    if la.attempt["status"] != "starting":
        raise ctx.conflict("attempt_state_mismatch", f"attempt is {la.attempt['status']}")
    if la.loaded.run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", f"Run is {la.loaded.run['status']}")
    if not at_epoch(la.step, la.receipt):
        raise ctx.conflict("stale_execution_authority", "StepRun left the admitted epoch")
    return _finish(state, ctx, la, args, "fail_start", None)


def complete_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "workerId", "leaseGeneration", "exitCode"))
    _worker_args(ctx, args)
    ctx.require(is_int_in(args["exitCode"], -2147483648, 2147483647), "exitCode must be a 32-bit integer")
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    replay = _terminal_replay(ctx, la, args)
    if replay:
        return replay, state
    _fence(ctx, la, args)
    a = la.attempt
    if a["status"] not in ("starting", "running"):
        raise ctx.conflict("attempt_state_mismatch", f"attempt is {a['status']}")
    if la.loaded.run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", f"Run is {la.loaded.run['status']}")
    if (a["status"] == "starting" and not at_epoch(la.step, la.receipt)) or (
            a["status"] == "running" and not at_running_epoch(la.step, la.receipt)):
        raise ctx.conflict("stale_execution_authority", "StepRun left the attempt's epoch")
    if a["status"] == "starting" and la.step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise ctx.conflict("attempts_exhausted", "StepRun attemptCount reached 64")
    return _finish(state, ctx, la, args, "complete_attempt", args["exitCode"])


# ------------------------------------------------------------------------------------------------
# recover_attempt (commands.md §4.14)
def recover_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("attemptId", "evidence"))
    ctx.require(is_portable_id(args["attemptId"]), "attemptId must be a PORTABLE_ID")
    ctx.require(args["evidence"] in T.RECOVERY_EVIDENCE, "evidence must be not_running, running or unknown")
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, lease, run = la.attempt, la.lease, la.loaded.run
    if a["status"] not in T.ACTIVE_ATTEMPT:
        raise ctx.conflict("attempt_state_mismatch", f"attempt is {a['status']}")
    if lease is None or lease["status"] != "leased":
        raise ctx.conflict("not_leased", "the attempt holds no leased lease")
    if lease["expiresAtMs"] > ctx.now:
        raise ctx.conflict("lease_live", "the lease has not expired")
    if a["status"] == "claimed":
        reason = "unstarted_claim_expired"
    elif args["evidence"] == "running":
        ctx.fire(T.decision("recover.retry").id)
        return {"status": "retry", "attempt": a}, state
    elif args["evidence"] == "unknown":
        ctx.fire(T.decision("recover.manual").id)
        return {"status": "manual", "attempt": a}, state
    else:
        reason = "execution_not_running"
    try:
        b = build_task_recovery({"admission": la.receipt, "run": run, "attempt": a, "stepRun": la.step,
                                 "reason": reason, "observedAtMs": ctx.now})
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    now = ctx.now
    new_lease = lease | {"status": "released", "version": lease["version"] + 1, "releasedAtMs": now,
                         "releaseReason": "lease_expired",
                         "updatedAtMs": now}
    _ceiling(ctx, new_lease["version"], b["run"]["version"])
    tx = StateWriter(state, now)
    put_lease(tx, new_lease)
    new_attempt = b["attempt"] | {"leaseVersion": new_lease["version"]}
    put_attempt(tx, new_attempt)
    tx.append_event(b["attemptEvent"])
    for m in b["stepMutations"]:
        put_mutation(tx, m)
    put_run(tx, b["run"])
    ctx.fire(T.lease_row("recover_attempt", "leased", "released").id)
    ctx.fire(T.attempt_row("recover_attempt", a["status"], "lost").id)
    if reason == "unstarted_claim_expired":
        ctx.fire(T.step_row("recover_attempt", "ready", "ready").id)
    elif a["status"] == "starting":
        ctx.fire(T.step_row("recover_attempt", "ready", "failed").id)
    else:
        ctx.fire(T.step_row("recover_attempt", "running", "lost").id)
        ctx.fire(T.step_row("recover_attempt", "lost", "failed").id)
    return {"status": b["disposition"], "attempt": canonical(new_attempt, ATTEMPT_KEYS)}, tx.commit()


# ------------------------------------------------------------------------------------------------
# request_cancel (commands.md §4.15)
def request_cancel(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("runId", "reason", "actor"))
    ctx.require(is_portable_id(args["runId"]), "runId must be a PORTABLE_ID")
    ctx.require(args["reason"] in T.CANCEL_REASONS, "reason must be a cancel reason")
    problem = actor_problem(args["actor"])
    ctx.require(problem is None, problem or "")
    loaded = load_run(state, ctx, args["runId"])
    run = loaded.run
    clock_floor(state, ctx, run["id"], [])

    def answer(status: str, r: Record) -> Record:
        return {"status": status, "runId": r["id"], "cancelRequestedAtMs": r["cancelRequestedAtMs"],
                "cancelReason": r["cancelReason"], "runVersion": r["version"]}

    if "cancelRequestedAtMs" in run:
        ctx.fire(T.decision("cancel_request.existing").id)
        return answer("existing", run), state
    if run["status"] != "running":
        raise ctx.conflict("run_terminal", f"Run is {run['status']}")
    _ceiling(ctx, run["version"] + 1)
    now = ctx.now
    tx = StateWriter(state, now)
    new_run = bump_run(tx, run, 1) | {"cancelRequestedAtMs": now, "cancelReason": args["reason"]}
    tx.append_event(make_event(
        event_id=ids.cancel_request_event_id(run["id"], now, args["reason"]), run_id=run["id"],
        sequence=new_run["eventSequence"], type_="workflow.cancel_requested", actor=args["actor"],
        payload={"cancel_reason": args["reason"], "cancel_requested_at_ms": now, "version": new_run["version"]},
        created_at_ms=now))
    put_run(tx, new_run)
    ctx.fire(T.run_row("request_cancel", "running", "running").id)
    return answer("requested", canonical(new_run, RUN_KEYS)), tx.commit()


# ------------------------------------------------------------------------------------------------
# converge_cancellation (commands.md §4.17, cancellation.md §7)
def _converge(state: State, ctx: CommandContext, run_id: str) -> tuple[Record, State]:
    loaded = load_run(state, ctx, run_id)
    run = loaded.run
    if "cancelRequestedAtMs" not in run:
        raise ctx.conflict("not_cancelling", "the Run has no cancel intent")
    if run["status"] != "running":
        if run["status"] != T.CANCEL_REASON_TARGET[run["cancelReason"]].status:
            raise ctx.unavailable("terminal_drift", "terminal status disagrees with the cancel reason")
        ctx.fire(T.decision("converge.settled").id)
        return {"status": "settled", "runId": run["id"], "settledAttempts": 0, "stepMutationCount": 0,
                "blockedAttemptIds": [], "blockedStepRunIds": [], "terminalStatus": run["status"],
                "runVersion": run["version"], "runEventSequence": run["eventSequence"],
                "observedAtMs": ctx.now}, state
    steps = load_steps(state, ctx, loaded)
    active: list[Record] = []
    leases = []
    for a in sorted(state.attempts_of_run(run["id"]), key=lambda a: a["id"]):
        if a["status"] not in T.ACTIVE_ATTEMPT:
            continue
        receipt = _check_receipt(ctx, a, state.receipts.get(a["id"]))
        lease = state.leases.get(a["id"])
        _check_lease_mirror(ctx, a, lease)
        leases.append(lease)
        active.append({"admission": receipt, "attempt": a, "leaseStatus": lease["status"] if lease else None})
    clock_floor(state, ctx, run["id"], leases)
    explain: dict[str, str] = {}
    try:
        res = resolve_cancellation({"run": run, "stepRuns": steps, "activeTaskAttempts": active,
                                    "observedAtMs": ctx.now}, explain=explain)
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    for active_entry in active:
        fired = active_entry["attempt"]
        ctx.fire(T.cancel_attempt_id(fired["status"], active_entry["leaseStatus"]))
    timeout = run["cancelReason"] == "timeout"
    for s in steps:  # a StepRun held by a blocked attempt is decided before the table is read (§5)
        held = explain[s["id"]] == RULE_STEP_BLOCKED_ATTEMPT
        ctx.fire(T.decision("converge.step_held").id if held else T.cancel_step_id(s["status"], timeout))
    tx = StateWriter(state, ctx.now)
    for t in res["attemptTransitions"]:
        put_attempt(tx, t["attempt"])
        tx.append_event(t["event"])
        ctx.fire(T.attempt_row("converge_cancellation", "claimed", t["attempt"]["status"]).id)
    for m in res["stepMutations"]:
        put_mutation(tx, m)
        ctx.fire(T.step_row("converge_cancellation", m["previousStatus"], m["stepRun"]["status"]).id)
    terminal = res["terminalTransition"]
    if terminal:
        tx.append_event(terminal["event"])
        ctx.fire(T.run_row("converge_cancellation", "running", terminal["status"]).id)
    if res["run"]["version"] != run["version"] or res["run"]["status"] != run["status"]:
        put_run(tx, res["run"])
    status = "terminal" if terminal else "blocked"
    result = {"status": status, "runId": run["id"], "settledAttempts": len(res["attemptTransitions"]),
              "stepMutationCount": len(res["stepMutations"]), "blockedAttemptIds": res["blockedAttemptIds"],
              "blockedStepRunIds": res["blockedStepRunIds"],
              "terminalStatus": terminal["status"] if terminal else None, "runVersion": res["run"]["version"],
              "runEventSequence": res["run"]["eventSequence"], "observedAtMs": ctx.now}
    return result, tx.commit()


def converge_cancellation(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    _args(ctx, args, ("runId",))
    ctx.require(is_portable_id(args["runId"]), "runId must be a PORTABLE_ID")
    return _converge(state, ctx, args["runId"])


def _cancellation_candidates(state: State) -> list[tuple[tuple[Any, ...], Record]]:
    rows = [((r["cancelRequestedAtMs"], r["id"]), {"runId": r["id"], "cancelRequestedAtMs": r["cancelRequestedAtMs"]})
            for r in state.runs.values()
            if r["triggerType"] == T.TRIGGER_TYPE and r["executionOwner"] == T.EXECUTION_OWNER
            and r["status"] == "running" and "cancelRequestedAtMs" in r]
    return sorted(rows, key=lambda kv: kv[0])


def _page_args(ctx: CommandContext, args: Any, query: str) -> tuple[int, tuple[Any, ...] | None]:
    limit_max, cursor_keys = T.QUERY_PAGES[query]
    fail = InvalidRaiser(ctx.family.invalid or "", "page_invalid")
    exact_keys(args, ("limit",), ("after",), fail, "page")
    fail.check(is_int_in(args["limit"], 1, limit_max), f"limit must be 1..{limit_max}")
    if "after" not in args:
        return args["limit"], None
    after = args["after"]
    exact_keys(after, tuple(k for k, _ in cursor_keys), (), fail, "cursor")
    shape = {"timestamp": is_timestamp, "digest": is_digest, "identifier": is_identifier,
             "portable_id": is_portable_id}
    for key, kind in cursor_keys:
        fail.check(shape[kind](after[key]), f"cursor {key} invalid")
    return args["limit"], tuple(after[k] for k, _ in cursor_keys)


def converge_cancellation_page(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    limit, after = _page_args(ctx, args, "cancellation_candidates")
    rows = [row for key, row in _cancellation_candidates(state) if after is None or key > after][: limit + 1]
    outcomes = []
    current = state
    for row in rows[:limit]:
        sub = CommandContext("converge_cancellation", ctx.now, ctx.rules)
        try:
            result, current = _converge(current, sub, row["runId"])
        except QlwfError as e:
            if isinstance(e, Conflict) and e.reason == "run_missing":
                outcomes.append(page_outcome(row["runId"], "raced"))
            else:
                outcomes.append(page_outcome(row["runId"], "failed", error=e.to_json()))
            continue
        status = "raced" if result["status"] == "settled" else result["status"]
        outcomes.append(page_outcome(row["runId"], status, result))
    scanned, runs, attempts, blocked = accumulate_page(outcomes)
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = {"cancelRequestedAtMs": last["cancelRequestedAtMs"], "runId": last["runId"]}
    result = {"scanned": scanned, "settledRuns": runs, "settledAttempts": attempts, "blocked": blocked,
              "hasMore": bool(_cancellation_candidates(current)), "next": next_cursor, "outcomes": outcomes}
    check_page_result(limit, result)
    ctx.fire(T.decision("page").id)
    return result, current


# ------------------------------------------------------------------------------------------------
# Queries (commands.md §2.6, §4.2, §4.4, §4.13, §4.16)
def frontier_candidate_rows(state: State) -> list[tuple[tuple[Any, ...], Record]]:
    rows = []
    for adm in state.admissions.values():
        run = state.runs.get(adm["plan"]["runId"])
        if run is None:
            continue
        status_by_key = {s["stepKey"]: s["status"] for s in state.steps_of_run(run["id"])}
        if is_frontier_candidate(run, adm["plan"], status_by_key):
            at = adm["receipt"]["admittedAtMs"]
            rows.append(((at, adm["planDigest"]), {"runId": run["id"], "planDigest": adm["planDigest"],
                                                    "admittedAtMs": at}))
    return sorted(rows, key=lambda kv: kv[0])


def task_candidate_rows(state: State) -> list[tuple[tuple[Any, ...], Record]]:
    epochs = {(r["runId"], r["stepRunId"], r["stepRunVersion"]) for r in state.receipts.values()}
    rows = []
    for s in state.step_runs.values():
        run = state.runs.get(s["runId"])
        if (run is None or run["status"] != "running" or "cancelRequestedAtMs" in run or s["kind"] != "task"
                or s["status"] != "ready" or s["readyAtMs"] is None
                or s["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS or (s["runId"], s["id"], s["version"]) in epochs):
            continue
        adm = state.admission_of_run(run["id"])
        rows.append(((s["readyAtMs"], s["id"]), {"runId": run["id"], "stepRunId": s["id"],
                                                 "readyAtMs": s["readyAtMs"],
                                                 "planDigest": adm[0]["planDigest"] if adm else None}))
    return sorted(rows, key=lambda kv: kv[0])


def recovery_candidate_rows(state: State, now: int) -> list[tuple[tuple[Any, ...], Record]]:
    rows = []
    for a in state.attempts.values():
        lease = state.leases.get(a["id"])
        if a["status"] in T.ACTIVE_ATTEMPT and lease_is_expired(lease, now):
            assert lease is not None
            rows.append(((lease["expiresAtMs"], a["id"]), {"attemptId": a["id"], "runId": a["runId"],
                                                           "stepRunId": a["stepRunId"], "status": a["status"],
                                                           "leaseExpiresAtMs": lease["expiresAtMs"]}))
    return sorted(rows, key=lambda kv: kv[0])


Rows = list[tuple[tuple[Any, ...], Record]]


def _query(rows_fn: Callable[[State, CommandContext], Rows]) -> Callable[..., tuple[Record, State]]:
    def run(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
        limit, after = _page_args(ctx, args, ctx.command)
        rows = [row for key, row in rows_fn(state, ctx) if after is None or key > after]
        page = rows[:limit]
        result: Record = {"candidates": page, "truncated": len(rows) > limit}
        if len(rows) > limit:
            _, cursor_keys = T.QUERY_PAGES[ctx.command]
            result["next"] = {k: page[-1][k] for k, _ in cursor_keys}
        ctx.fire(T.decision(f"query.{ctx.command}").id)
        return result, state
    return run


COMMANDS: dict[str, Callable[[State, CommandContext, Any], tuple[Record, State]]] = {
    "admit_workflow": admit_workflow,
    "frontier_candidates": _query(lambda s, _c: frontier_candidate_rows(s)),
    "advance_frontier": advance_frontier,
    "task_candidates": _query(lambda s, _c: task_candidate_rows(s)),
    "admit_task_attempt": admit_task_attempt,
    "claim_lease": claim_lease,
    "renew_lease": renew_lease,
    "release_lease": release_lease,
    "start_attempt": start_attempt,
    "record_running": record_running,
    "fail_start": fail_start,
    "complete_attempt": complete_attempt,
    "recovery_candidates": _query(lambda s, c: recovery_candidate_rows(s, c.now)),
    "recover_attempt": recover_attempt,
    "request_cancel": request_cancel,
    "cancellation_candidates": _query(lambda s, _c: _cancellation_candidates(s)),
    "converge_cancellation": converge_cancellation,
    "converge_cancellation_page": converge_cancellation_page,
}
assert set(COMMANDS) == set(T.COMMAND_OUTCOMES)


def apply(state: State, command: Any, at_ms: int | None = None) -> Outcome:
    """Execute one command at observation time `at_ms` (default: the state's clock).

    `command` is {"name": <command>, "args": {...}}. Time never moves backwards: at_ms below the
    state's clock is a programming error of the caller (ValueError), not a model outcome.
    """
    now = state.clock if at_ms is None else at_ms
    if not is_timestamp(now) or now < state.clock:
        raise ValueError(f"observation time {now!r} precedes the state clock {state.clock}")
    if not is_object(command) or set(command) != {"name", "args"} or command["name"] not in COMMANDS:
        raise ValueError(f"not a command: {command!r}")
    ctx = CommandContext(command["name"], now, [])
    try:
        result, new_state = COMMANDS[command["name"]](state, ctx, command["args"])
    except QlwfError as e:
        return Outcome(None, e, state, tuple(ctx.rules))
    if new_state is not state:
        new_state = new_state.with_clock(now)
    elif now != state.clock:
        new_state = state.with_clock(now)
    return Outcome(result, None, new_state, tuple(ctx.rules))


def advance_time(state: State, delta_ms: int) -> State:
    if type(delta_ms) is not int or delta_ms < 0:
        raise ValueError("deltaMs must be an int >= 0")
    return state.with_clock(state.clock + delta_ms)


class WorkflowSystem:
    """A mutable handle on the current State for interactive use; `apply` stays pure underneath."""

    def __init__(self, state: State | None = None, clock: int = 0) -> None:
        self.state = state if state is not None else State(clock=clock)

    def apply(self, name: str, at_ms: int | None = None, **args: Any) -> Outcome:
        out = apply(self.state, {"name": name, "args": args}, at_ms)
        self.state = out.state
        return out

    def advance(self, delta_ms: int) -> None:
        self.state = advance_time(self.state, delta_ms)

    def snapshot(self) -> dict[str, list[Record]]:
        return self.state.snapshot()
