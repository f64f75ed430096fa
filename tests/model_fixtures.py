"""Builders shared by the model unit tests (tests/test_model_*.py).

The helpers only build INPUTS. Expected values in the tests come from the spec (vectors and
tables). To keep a wrong model recipe from making a wrong test pass, canonical JSON, JSON digests
and identifier hashes are recomputed here independently from records.md §5, and the schema and
domain strings are copied from records.md §2 rather than imported from the model.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from qlwf.model.errors import QlwfError
from qlwf.model.invariants import check_invariants, consistent_binding
from qlwf.model.records import sign_plan
from qlwf.model.state import State
from qlwf.model.system import Outcome, apply

Record = dict[str, Any]

# --------------------------------------------------------------------------------------------------
# records.md §2.1, §2.2, §2.5 (copied from the spec text)
SCHEMA_PLAN = "qinglong/plugin-package-workflow-execution-plan@v1"
SCHEMA_ADMISSION_RECEIPT = "qinglong/plugin-package-workflow-admission-receipt@v1"
SCHEMA_FRONTIER = "qinglong/plugin-package-workflow-frontier@v1"
SCHEMA_STEP_RUN = "qinglong/step-run@v1"
SCHEMA_STEP_RUN_MUTATION = "qinglong/step-run-mutation@v1"
SCHEMA_TASK_RECEIPT = "qinglong/plugin-package-workflow-task-attempt-admission@v1"
SCHEMA_TASK_RECOVERY = "qinglong/plugin-package-workflow-task-recovery@v1"
SCHEMA_CANCELLATION = "qinglong/plugin-package-workflow-cancellation-convergence@v1"

DOMAIN_PLAN = "qinglong/plugin-package-workflow-execution-plan-digest@v1"
DOMAIN_ADMISSION_RECEIPT = "qinglong/plugin-package-workflow-admission-receipt-digest@v1"
DOMAIN_FRONTIER_ID = "qinglong/plugin-package-workflow-frontier-id@v1"
DOMAIN_STEP_RUN = "qinglong/step-run-digest@v1"
DOMAIN_STEP_RUN_MUTATION = "qinglong/step-run-mutation-digest@v1"
DOMAIN_TASK_ATTEMPT_ID = "qinglong/plugin-package-workflow-task-attempt-id@v1"
DOMAIN_TASK_RECEIPT = "qinglong/plugin-package-workflow-task-attempt-receipt@v1"
DOMAIN_TASK_RECOVERY_ID = "qinglong/plugin-package-workflow-task-recovery-id@v1"
DOMAIN_CANCELLATION_ID = "qinglong/plugin-package-workflow-cancellation-convergence-id@v1"
DOMAIN_CANCEL_REQUEST_ID = "qinglong/plugin-package-workflow-cancel-request-id@v1"
DOMAIN_TASK_EXECUTION_ID = "qinglong/plugin-package-workflow-task-execution-id@v1"

TEXT = {
    "EXECUTION_CANCELLED": "Execution was cancelled",
    "EXECUTION_TIMED_OUT": "Execution exceeded its configured timeout",
    "EXECUTION_FAILED": "Execution completed without success",
    "EXECUTOR_START_FAILED": "The Workflow Task Attempt failed before the executor started",
    "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED": "The Workflow Task Attempt claim expired before execution started",
    "CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING":
        "Trusted execution evidence proved that the Workflow Task Attempt is not running",
}

# commands.md §2.3 error codes
PLAN_INVALID = "PLUGIN_PACKAGE_WORKFLOW_EXECUTION_PLAN_INVALID"
STEP_RUN_INVALID = "STEP_RUN_INVALID"
STEP_RUN_FENCE_CONFLICT = "STEP_RUN_FENCE_CONFLICT"
STEP_RUN_STATE_CONFLICT = "STEP_RUN_STATE_CONFLICT"
STEP_RUN_MUTATION_CONFLICT = "STEP_RUN_MUTATION_CONFLICT"
ADMISSION_RECEIPT_INVALID = "PLUGIN_PACKAGE_WORKFLOW_ADMISSION_RECEIPT_INVALID"


def family(stem: str) -> tuple[str, str, str]:
    return f"{stem}_INVALID", f"{stem}_CONFLICT", f"{stem}_UNAVAILABLE"


ADMISSION = family("PLUGIN_PACKAGE_WORKFLOW_ADMISSION")
FRONTIER = family("PLUGIN_PACKAGE_WORKFLOW_FRONTIER")
TASK_ADMISSION = family("PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION")
TASK_EXECUTION = family("PLUGIN_PACKAGE_WORKFLOW_TASK_EXECUTION")
TASK_RECOVERY = family("PLUGIN_PACKAGE_WORKFLOW_TASK_RECOVERY")
CANCEL_REQUEST = family("PLUGIN_PACKAGE_WORKFLOW_CANCEL_REQUEST")
CANCELLATION = family("PLUGIN_PACKAGE_WORKFLOW_CANCELLATION_CONVERGENCE")
PAGE_INVALID = "CLUSTER_RUN_CANCELLATION_CONVERGENCE_INVALID"
PAGE_UNAVAILABLE = "CLUSTER_RUN_CANCELLATION_CONVERGENCE_UNAVAILABLE"

TERMINAL_STEP = ("succeeded", "failed", "skipped", "cancelled", "timed_out")
BLOCKING_STEP = ("failed", "skipped", "cancelled", "timed_out")
STEP_STATUSES = ("pending", "ready", "waiting_approval", "running", "lost", *TERMINAL_STEP)
CANCEL_REASONS = ("user", "policy", "shutdown", "reconcile", "timeout")
INT31_MAX = 2147483647


def D(c: str) -> str:
    """A 64-character DIGEST made of one repeated hex character."""
    return c * 64


# --------------------------------------------------------------------------------------------------
# Independent records.md §5 implementations
def canonical_bytes(x: Any) -> bytes:
    """records.md §5.1 (the Python equivalent given by the spec)."""
    return json.dumps(x, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def json_digest(domain: str, x: Any) -> str:
    """records.md §5.2."""
    return hashlib.sha256(domain.encode() + b"\x00" + canonical_bytes(x)).hexdigest()


def id_hash(domain: str, *fields: str | int) -> str:
    """records.md §5.3: NUL-separated fields, integers in decimal, no trailing NUL."""
    parts = [domain.encode()] + [str(f).encode() for f in fields]
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()


# --------------------------------------------------------------------------------------------------
# Key orders (records.md §6)
STEP_RUN_KEYS = (
    "schema", "id", "runId", "parentStepRunId", "stepKey", "kind", "definitionRef", "definitionDigest",
    "required", "status", "version", "attemptCount", "inputRef", "outputRef", "approvalRequestId",
    "readyAtMs", "startedAtMs", "finishedAtMs", "resultCode", "errorSummary", "createdAtMs",
    "updatedAtMs", "lastMutationId", "stepRunDigest",
)
MUTATION_KEYS = (
    "schema", "mutationId", "runId", "expectedRunVersion", "expectedRunEventSequence",
    "expectedStepRunVersion", "expectedStepRunDigest", "previousStatus", "stepRun", "event", "mutationDigest",
)
RUN_KEYS = (
    "id", "projectId", "taskId", "taskRevision", "taskSnapshotRef", "triggerType", "executionOrigin",
    "executionOwner", "requestId", "status", "version", "eventSequence", "priority", "idempotencyKey",
    "createdAtMs", "startedAtMs", "cancelRequestedAtMs", "cancelReason", "finishedAtMs", "errorCode",
    "errorSummary",
)
BINDING_KEYS = (
    "resourceTaskId", "taskReconciliationReceiptDigest", "taskId", "taskRevision", "taskDefinitionDigest",
    "executorType", "executionDigest",
)
TASK_RECEIPT_KEYS = (
    "schema", "attemptId", "planDigest", "runId", "stepRunId", "stepRunVersion", "stepRunDigest",
    *BINDING_KEYS, "attemptNumber", "eventId", "runVersion", "runEventSequence", "admittedAtMs", "receiptDigest",
)
ATTEMPT_KEYS = (
    "id", "runId", "stepRunId", "attempt", "status", "executorType", "workerId", "leaseGeneration",
    "leaseVersion", "leaseExpiresAtMs", "deadlineAtMs", "callbackSequence", "createdAtMs", "startedAtMs",
    "finishedAtMs", "exitCode", "errorCode", "errorSummary",
)
LEASE_KEYS = (
    "attemptId", "runId", "status", "version", "leaseGeneration", "workerId", "acquiredAtMs", "renewedAtMs",
    "expiresAtMs", "releasedAtMs", "releaseReason", "completedAtMs", "updatedAtMs",
)


def ordered(x: Record, keys: tuple[str, ...]) -> Record:
    return {k: x[k] for k in keys if k in x}


def reversed_keys(x: Any) -> Any:
    """The same JSON value with every object's key order reversed (recursively)."""
    if isinstance(x, dict):
        return {k: reversed_keys(x[k]) for k in reversed(list(x))}
    if isinstance(x, list):
        return [reversed_keys(v) for v in x]
    return x


def seal_step_run(s: Record) -> Record:
    """Canonical order and a freshly computed stepRunDigest (records.md §6.3, keys 1–23)."""
    body = {k: s[k] for k in STEP_RUN_KEYS[:-1]}
    return {**body, "stepRunDigest": json_digest(DOMAIN_STEP_RUN, body)}


def seal_mutation(m: Record) -> Record:
    body = {k: m[k] for k in MUTATION_KEYS[:-1]}
    return {**body, "mutationDigest": json_digest(DOMAIN_STEP_RUN_MUTATION, body)}


def seal_task_receipt(r: Record) -> Record:
    body = {k: r[k] for k in TASK_RECEIPT_KEYS[:-1]}
    return {**body, "receiptDigest": json_digest(DOMAIN_TASK_RECEIPT, body)}


# --------------------------------------------------------------------------------------------------
# Plans (records.md §6.1; harness alphabet of §3)
TARGET: Record = {
    "projectId": "proj-1", "packageName": "demo-pkg", "installationId": "inst-1", "lockDigest": D("1"),
    "generation": 1, "generationDigest": D("2"), "materializedRevisionDigest": D("3"),
    "publicationDigest": D("4"), "workflowId": "nightly", "workflowDefinitionDigest": D("5"),
}


def plan_step(key: str, needs: list[str] | tuple[str, ...] = (), *, task_id: str | None = None,
              step_run_id: str | None = None, task_definition_digest: str = D("6"),
              materialized: str = D("3")) -> Record:
    task = task_id or key
    return {
        "stepRunId": step_run_id or f"sr-{key}", "stepKey": key, "taskId": task,
        "taskDefinitionRef": f"plugin-package:{materialized}:task:{task}",
        "taskDefinitionDigest": task_definition_digest, "needs": sorted(needs),
        "initialStatus": "pending" if needs else "ready", "required": True,
    }


def unsigned_plan(steps: list[Record] | None = None, *, run_id: str = "run-0001", plan_id: str = "plan-0001",
                  planned_at: int = 1000, target: Record | None = None) -> Record:
    if steps is None:
        steps = [plan_step("fetch"), plan_step("report", ["fetch"])]
    return {"schema": SCHEMA_PLAN, "planId": plan_id, "runId": run_id, "target": copy.deepcopy(target or TARGET),
            "steps": copy.deepcopy(steps), "plannedAtMs": planned_at}


def raw_sign(unsigned: Record) -> Record:
    """Attach a planDigest computed over the plan exactly as given (no sorting, no validation)."""
    return {**unsigned, "planDigest": json_digest(DOMAIN_PLAN, unsigned)}


def make_plan(dag: dict[str, list[str]] | None = None, *, prefix: str = "sr-", **kw: Any) -> Record:
    """A signed, normalized plan from {stepKey: needs}; StepRun ids are `prefix` + stepKey."""
    steps = None if dag is None else [plan_step(k, n, step_run_id=prefix + k) for k, n in dag.items()]
    return sign_plan(unsigned_plan(steps, **kw))


DEMO_UNSIGNED: Record = {
    "schema": SCHEMA_PLAN, "planId": "plan-0001", "runId": "run-0001", "target": TARGET,
    "steps": [
        plan_step("fetch", task_id="fetcher", task_definition_digest=D("6")),
        plan_step("report", ["fetch"], task_id="reporter", task_definition_digest=D("7")),
    ],
    "plannedAtMs": 1000,
}
DEMO_PLAN_DIGEST = "8f52bf506f9a5824edfd235258e2cace9690fd2e977670145ac3904300583c2d"
DEMO_ATTEMPT_ID = "wta:955364285ed507a7fdba9d43dbc8c10f"

# records.md §8.3 binding of sr-fetch
DEMO_BINDING: Record = {
    "resourceTaskId": "fetcher", "taskReconciliationReceiptDigest": D("8"), "taskId": "pkg:demo-pkg:fetcher",
    "taskRevision": "qltd:v1:1:" + D("9"), "taskDefinitionDigest": D("9"), "executorType": "remote_worker",
    "executionDigest": D("e"),
}


def demo_plan() -> Record:
    return sign_plan(copy.deepcopy(DEMO_UNSIGNED))


def binding_for(plan: Record, step_key: str, executor_type: str = "remote_worker") -> Record:
    step = next(s for s in plan["steps"] if s["stepKey"] == step_key)
    return consistent_binding(plan, step, executor_type)


def plan_step_of(plan: Record, step_key: str) -> Record:
    return next(s for s in plan["steps"] if s["stepKey"] == step_key)


# --------------------------------------------------------------------------------------------------
# Hand-built records
def make_run(plan: Record, *, version: int | None = None, event_sequence: int | None = None,
             **extra: Any) -> Record:
    """A workflow Run per records.md §6.2 / frontier.md §2 item 1 (optional keys via `extra`)."""
    t = plan["target"]
    n = len(plan["steps"])
    v = n + 1 if version is None else version
    run = {
        "id": plan["runId"], "projectId": t["projectId"], "taskId": t["workflowId"],
        "taskRevision": t["publicationDigest"],
        "taskSnapshotRef": f"plugin-package:{t['publicationDigest']}:workflow:{t['workflowId']}",
        "triggerType": "plugin_package_workflow", "executionOrigin": "system", "executionOwner": "runtime",
        "requestId": plan["planId"], "status": "running", "version": v,
        "eventSequence": v if event_sequence is None else event_sequence, "priority": 0,
        "idempotencyKey": f"plugin-package-workflow:{plan['planId']}", "createdAtMs": plan["plannedAtMs"],
        "startedAtMs": plan["plannedAtMs"],
    }
    run.update(extra)
    return ordered(run, RUN_KEYS)


def cancelling_run(plan: Record, reason: str = "user", at: int = 5000, **kw: Any) -> Record:
    return make_run(plan, cancelRequestedAtMs=at, cancelReason=reason, **kw)


RESULT_CODE_FOR = {
    "lost": "cluster_recovery_execution_not_running", "failed": "execution_failed",
    "skipped": "dependency_not_succeeded", "cancelled": "workflow_cancelled", "timed_out": "workflow_timed_out",
}


def step_run_for(plan: Record, key: str, status: str = "pending", *, t: int | None = None,
                 version: int | None = None, **overrides: Any) -> Record:
    """A valid StepRun of plan step `key` in `status` (records.md §6.3 shape rules), sealed.

    Times: createdAtMs = plannedAtMs; every other timestamp = `t` (default plannedAtMs + 100).
    """
    p = plan_step_of(plan, key)
    created = plan["plannedAtMs"]
    at = created + 100 if t is None else t
    ready = at if status not in ("pending", "skipped", "cancelled") else None
    started = at if status in ("running", "lost", "succeeded", "failed") else None
    finished = at if status in TERMINAL_STEP else None
    s: Record = {
        "schema": SCHEMA_STEP_RUN, "id": p["stepRunId"], "runId": plan["runId"], "parentStepRunId": None,
        "stepKey": key, "kind": "task", "definitionRef": p["taskDefinitionRef"],
        "definitionDigest": p["taskDefinitionDigest"], "required": True, "status": status,
        "version": (1 if status == "pending" else 2) if version is None else version,
        "attemptCount": 1 if started is not None else 0, "inputRef": None, "outputRef": None,
        "approvalRequestId": "apr-1" if status == "waiting_approval" else None,
        "readyAtMs": ready, "startedAtMs": started, "finishedAtMs": finished,
        "resultCode": RESULT_CODE_FOR.get(status), "errorSummary": None,
        "createdAtMs": created, "updatedAtMs": created if status == "pending" else at,
        "lastMutationId": f"mut-{key}-{status}",
    }
    s.update(overrides)
    return seal_step_run(s)


def step_runs_for(plan: Record, statuses: dict[str, str], t: int | None = None) -> list[Record]:
    return [step_run_for(plan, p["stepKey"], statuses.get(p["stepKey"], "pending"), t=t) for p in plan["steps"]]


def make_receipt(plan: Record, step_run: Record, *, binding: Record | None = None, attempt_number: int = 1,
                 run_version: int = 4, admitted_at: int | None = None, attempt_id: str | None = None) -> Record:
    """A task attempt receipt (records.md §6.10) for the current epoch of `step_run`, sealed."""
    b = binding or binding_for(plan, step_run["stepKey"])
    a = id_hash(DOMAIN_TASK_ATTEMPT_ID, plan["planDigest"], step_run["id"], step_run["version"])
    r = {"schema": SCHEMA_TASK_RECEIPT, "attemptId": attempt_id or f"wta:{a[:32]}", "planDigest": plan["planDigest"],
         "runId": plan["runId"], "stepRunId": step_run["id"], "stepRunVersion": step_run["version"],
         "stepRunDigest": step_run["stepRunDigest"], **{k: b[k] for k in BINDING_KEYS},
         "attemptNumber": attempt_number, "eventId": f"wte:{a[:32]}", "runVersion": run_version,
         "runEventSequence": run_version,
         "admittedAtMs": step_run["updatedAtMs"] if admitted_at is None else admitted_at}
    return seal_task_receipt(r)


def make_attempt(receipt: Record, status: str = "claimed", **extra: Any) -> Record:
    a = {"id": receipt["attemptId"], "runId": receipt["runId"], "stepRunId": receipt["stepRunId"],
         "attempt": receipt["attemptNumber"], "status": status, "executorType": receipt["executorType"],
         "callbackSequence": 1 if status == "running" else 0, "createdAtMs": receipt["admittedAtMs"]}
    a.update(extra)
    return ordered(a, ATTEMPT_KEYS)


# --------------------------------------------------------------------------------------------------
# Errors
def assert_error(err: BaseException | None, cls: str, code: str, reason: str | None = None) -> QlwfError:
    assert isinstance(err, QlwfError), f"expected {cls} {code} {reason}, got {err!r}"
    assert err.error_class == cls, err.with_message()
    assert err.code == code, err.with_message()
    if reason is not None:
        assert err.reason == reason, err.with_message()
    return err


def raises(cls: str, code: str, fn: Any, *args: Any, reason: str | None = None, **kw: Any) -> QlwfError:
    """Call fn and require a typed model error (never another exception, never success)."""
    try:
        out = fn(*args, **kw)
    except QlwfError as e:
        return assert_error(e, cls, code, reason)
    pytest.fail(f"expected {cls} {code} {reason}, got result {str(out)[:300]}")


# --------------------------------------------------------------------------------------------------
# Whole-system driver
class Sim:
    """A mutable handle on a model State; asserts INV-1..31 after every step unless tampered."""

    def __init__(self, state: State | None = None, clock: int = 1000) -> None:
        self.state = state if state is not None else State(clock=clock)
        self.check = True

    def apply(self, name: str, at: int | None = None, /, **args: Any) -> Outcome:
        before = self.state
        out = apply(self.state, {"name": name, "args": args}, at)
        if out.error is not None:
            assert out.state.snapshot() == before.snapshot(), f"{name} failed but changed the state"
        self.state = out.state
        if self.check:
            violations = check_invariants(self.state)
            assert not violations, f"after {name}: " + "; ".join(map(str, violations))
        return out

    def do(self, name: str, at: int | None = None, /, **args: Any) -> Record:
        out = self.apply(name, at, **args)
        assert out.error is None, f"{name} failed: {out.error.with_message() if out.error else ''}"
        assert out.result is not None
        return out.result

    def refuse(self, name: str, cls: str, code: str, reason: str, at: int | None = None, /,
               **args: Any) -> QlwfError:
        before = self.state.snapshot()
        out = self.apply(name, at, **args)
        err = assert_error(out.error, cls, code, reason)
        assert self.state.snapshot() == before
        return err

    def tick(self, ms: int) -> None:
        self.state = self.state.with_clock(self.state.clock + ms)

    def at(self, t: int) -> None:
        assert t >= self.state.clock
        self.state = self.state.with_clock(t)

    def rewind(self, t: int) -> None:
        """Move the State clock backwards (a regressed storage clock, S-14); disables invariant checks."""
        self.state = self.state.with_clock(t)
        self.check = False

    def tamper(self, **fields: Any) -> None:
        """Replace whole State tables (drift injection); invariants are no longer asserted."""
        self.state = replace(self.state, **fields)
        self.check = False

    def put(self, table: str, key: Any, record: Record | None) -> None:
        t = dict(getattr(self.state, table))
        if record is None:
            t.pop(key, None)
        else:
            t[key] = record
        self.tamper(**{table: t})

    # lookups
    def run(self, run_id: str = "run-0001") -> Record:
        return self.state.runs[run_id]

    def step(self, step_run_id: str) -> Record:
        return self.state.step_runs[step_run_id]

    def attempt(self, attempt_id: str) -> Record:
        return self.state.attempts[attempt_id]

    def lease(self, attempt_id: str) -> Record | None:
        return self.state.leases.get(attempt_id)

    def held_lease(self, attempt_id: str) -> Record:
        """The lease the test knows `attempt_id` has."""
        return self.state.leases[attempt_id]

    def events(self, run_id: str = "run-0001") -> tuple[Record, ...]:
        return self.state.events_of(run_id)


# Stage times of `situation` (observation times; the plan is admitted at plannedAtMs 1000).
T_ADMIT, T_CLAIM, T_LEASE, T_START, T_RUNNING, T_CANCEL = 1000, 2000, 3000, 4000, 5000, 6000
LEASE_MS = 10000
STAGES = ("admitted", "claimed", "leased", "starting", "running")


@dataclass
class Scenario:
    sim: Sim
    plan: Record
    run_id: str
    attempt_id: str = ""
    step_run_id: str = "sr-fetch"
    worker: str = "w1"
    generation: int = 1

    def fence(self, **over: Any) -> dict[str, Any]:
        """Arguments of a worker command holding this scenario's lease."""
        return {"attemptId": self.attempt_id, "workerId": self.worker, "leaseGeneration": self.generation, **over}


def situation(stage: str = "admitted", *, plan: Record | None = None, timeout_ms: int | None = None,
              cancel: str | None = None, lease_ms: int = LEASE_MS) -> Scenario:
    """Drive a fresh system to `stage` for the first root step of `plan` (default: the §8.2 demo).

    admitted (t=1000) → claimed (attempt admitted, t=2000) → leased (w1, t=3000) → starting
    (t=4000, optional timeoutMs) → running (t=5000); `cancel` then records cancel intent at t=6000.
    """
    assert stage in STAGES
    plan = plan or demo_plan()
    sim = Sim(clock=plan["plannedAtMs"])
    sim.do("admit_workflow", plan=plan)
    root = next(p for p in plan["steps"] if not p["needs"])
    sc = Scenario(sim, plan, plan["runId"], step_run_id=root["stepRunId"])
    order = STAGES.index(stage)
    if order >= 1:
        b = DEMO_BINDING if plan["planDigest"] == DEMO_PLAN_DIGEST else binding_for(plan, root["stepKey"])
        res = sim.do("admit_task_attempt", T_CLAIM, runId=sc.run_id, stepRunId=root["stepRunId"], binding=b)
        sc.attempt_id = res["attempt"]["id"]
    if order >= 2:
        sim.do("claim_lease", T_LEASE, attemptId=sc.attempt_id, workerId="w1", durationMs=lease_ms)
    if order >= 3:
        sim.do("start_attempt", T_START, **sc.fence(timeoutMs=timeout_ms))
    if order >= 4:
        sim.do("record_running", T_RUNNING, **sc.fence())
    if cancel is not None:
        sim.do("request_cancel", max(T_CANCEL, sim.state.clock), runId=sc.run_id, reason=cancel,
               actor={"type": "user", "id": "alice"})
    return sc


def readied(*, cancel: str | None = None) -> Scenario:
    """The demo workflow after `fetch` succeeded (t=2000) and the frontier readied `report` (t=2500);
    `cancel` then records intent at t=3000. The scenario's attempt is the completed `fetch` attempt."""
    sc = situation("admitted")
    sc.attempt_id = finish_step(sc.sim, sc.run_id, sc.plan, "fetch", at=2000)
    sc.sim.do("advance_frontier", 2500, runId=sc.run_id)
    if cancel is not None:
        sc.sim.do("request_cancel", 3000, runId=sc.run_id, reason=cancel, actor={"type": "user", "id": "alice"})
    return sc


def finish_step(sim: Sim, run_id: str, plan: Record, step_key: str, exit_code: int = 0, at: int | None = None,
                worker: str = "w1") -> str:
    """Admit, lease, start, run and complete the ready StepRun of `step_key`; returns the attempt id."""
    t = sim.state.clock if at is None else at
    step = plan_step_of(plan, step_key)
    b = binding_for(plan, step_key)
    aid: str = sim.do("admit_task_attempt", t, runId=run_id, stepRunId=step["stepRunId"], binding=b)["attempt"]["id"]
    gen = sim.do("claim_lease", t, attemptId=aid, workerId=worker, durationMs=LEASE_MS)["lease"]["leaseGeneration"]
    fence = {"attemptId": aid, "workerId": worker, "leaseGeneration": gen}
    sim.do("start_attempt", t, timeoutMs=None, **fence)
    sim.do("record_running", t, **fence)
    sim.do("complete_attempt", t, exitCode=exit_code, **fence)
    return aid


# --------------------------------------------------------------------------------------------------
# Drift injection on a Sim (unreachable situations that exercise later numbered checks)
def tamper_run_terminal(sim: Sim, run_id: str = "run-0001", status: str = "failed") -> None:
    run = {**sim.run(run_id), "status": status, "finishedAtMs": sim.state.clock}
    if status != "succeeded":
        run["errorCode"] = "workflow_step_failed"
    sim.put("runs", run_id, ordered(run, RUN_KEYS))


def tamper_step_epoch(sim: Sim, step_run_id: str) -> None:
    """Move a ready StepRun to a new epoch (ready → ready refresh) without touching its attempt."""
    s = sim.step(step_run_id)
    sim.put("step_runs", step_run_id, seal_step_run({**s, "version": s["version"] + 1,
                                                     "lastMutationId": f"tamper-{s['version'] + 1}"}))


def tamper_step_exhausted(sim: Sim, attempt_id: str) -> None:
    """attemptCount = 64 on the attempt's StepRun, keeping the receipt's epoch digest in step."""
    a = sim.attempt(attempt_id)
    s = seal_step_run({**sim.step(a["stepRunId"]), "attemptCount": 64})
    sim.put("step_runs", s["id"], s)
    r = sim.state.receipts[attempt_id]
    sim.put("receipts", attempt_id, seal_task_receipt({**r, "stepRunDigest": s["stepRunDigest"]}))


def cancel_input_of(state: State, run_id: str) -> Record:
    """The `cancel` oracle input of one Run of a model state: its Run, StepRuns and active attempts
    (each with its receipt and lease status, by attempt id), at the state's clock; a deep copy."""
    active = []
    for a in sorted(state.attempts_of_run(run_id), key=lambda a: a["id"]):
        if a["status"] in ("claimed", "starting", "running"):
            lease = state.leases.get(a["id"])
            active.append({"admission": state.receipts[a["id"]], "attempt": a,
                           "leaseStatus": lease["status"] if lease else None})
    return copy.deepcopy({"run": state.runs[run_id], "stepRuns": state.steps_of_run(run_id),
                          "activeTaskAttempts": active, "observedAtMs": state.clock})
