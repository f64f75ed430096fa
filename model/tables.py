"""Constants, status sets and every rule table of the spec, as data.

This module is the single source the model functions, the Z3 encodings, the documentation
generator and the coverage witnesses read. Sections refer to ../shared/spec/.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

# --- records.md §2.1 schema strings -----------------------------------------------------------
SCHEMA_PLAN: Final = "qinglong/plugin-package-workflow-execution-plan@v1"
SCHEMA_ADMISSION_RECEIPT: Final = "qinglong/plugin-package-workflow-admission-receipt@v1"
SCHEMA_FRONTIER: Final = "qinglong/plugin-package-workflow-frontier@v1"
SCHEMA_STEP_RUN: Final = "qinglong/step-run@v1"
SCHEMA_STEP_RUN_MUTATION: Final = "qinglong/step-run-mutation@v1"
SCHEMA_TASK_RECEIPT: Final = "qinglong/plugin-package-workflow-task-attempt-admission@v1"
SCHEMA_TASK_RECOVERY: Final = "qinglong/plugin-package-workflow-task-recovery@v1"
SCHEMA_CANCELLATION: Final = "qinglong/plugin-package-workflow-cancellation-convergence@v1"

# --- records.md §2.2 domains ---------------------------------------------------------------------
DOMAIN_PLAN: Final = "qinglong/plugin-package-workflow-execution-plan-digest@v1"
DOMAIN_DEFINITION: Final = "qinglong/plugin-package-workflow-definition-digest@v1"
DOMAIN_ADMISSION_RECEIPT: Final = "qinglong/plugin-package-workflow-admission-receipt-digest@v1"
DOMAIN_FRONTIER_ID: Final = "qinglong/plugin-package-workflow-frontier-id@v1"
DOMAIN_STEP_RUN: Final = "qinglong/step-run-digest@v1"
DOMAIN_STEP_RUN_MUTATION: Final = "qinglong/step-run-mutation-digest@v1"
DOMAIN_TASK_ATTEMPT_ID: Final = "qinglong/plugin-package-workflow-task-attempt-id@v1"
DOMAIN_TASK_RECEIPT: Final = "qinglong/plugin-package-workflow-task-attempt-receipt@v1"
DOMAIN_TASK_RECOVERY_ID: Final = "qinglong/plugin-package-workflow-task-recovery-id@v1"
DOMAIN_CANCELLATION_ID: Final = "qinglong/plugin-package-workflow-cancellation-convergence-id@v1"
DOMAIN_CANCEL_REQUEST_ID: Final = "qinglong/plugin-package-workflow-cancel-request-id@v1"
DOMAIN_TASK_EXECUTION_ID: Final = "qinglong/plugin-package-workflow-task-execution-id@v1"

# --- records.md §2.3 numeric limits --------------------------------------------------------------
MAX_WORKFLOW_STEPS: Final = 128
MAX_STEP_RUNS_PER_RUN: Final = 128
MAX_STEP_RUN_ATTEMPTS: Final = 64
MAX_RUN_ATTEMPTS: Final = 8192
MAX_PLAN_BYTES: Final = 262144
MAX_ADMISSION_RECEIPT_BYTES: Final = 262144
MAX_TASK_RECEIPT_BYTES: Final = 16384
MAX_STEP_RUN_JSON_BYTES: Final = 16384
MAX_EVENT_PAYLOAD_BYTES: Final = 16384
MAX_FRONTIER_PAGE: Final = 64
MAX_TASK_ATTEMPT_PAGE: Final = 64
MAX_CANCELLATION_PAGE: Final = 128
MAX_CANCELLATION_PAGES_PER_CYCLE: Final = 64
CANCELLATION_CYCLE_DEFAULT_PAGE_SIZE: Final = 32
CANCELLATION_CYCLE_DEFAULT_MAX_PAGES: Final = 4
LEASE_DURATION_MIN_MS: Final = 5000
LEASE_DURATION_MAX_MS: Final = 600000
INT31_MAX: Final = 2147483647
RECOVERY_RUN_VERSION_MAX: Final = 2147483644
PG_TRANSACTION_TRIES: Final = 3
PG_STATEMENT_TIMEOUT_MS: Final = 5000
PG_LOCK_TIMEOUT_MS: Final = 1000
PG_IDLE_IN_TRANSACTION_TIMEOUT_MS: Final = 10000
SQLITE_MAX_PENDING_OPERATIONS: Final = 256

# --- records.md §2.4 enumerations ----------------------------------------------------------------
RUN_STATUSES_ALL: Final = (
    "created", "queued", "dispatching", "running", "waiting_approval", "retry_wait", "lost",
    "succeeded", "failed", "cancelled", "timed_out",
)
RUN_STATUSES: Final = ("running", "succeeded", "failed", "cancelled", "timed_out")
CANCEL_REASONS: Final = ("user", "policy", "shutdown", "reconcile", "timeout")
STEP_STATUSES: Final = (
    "pending", "ready", "waiting_approval", "running", "lost",
    "succeeded", "failed", "skipped", "cancelled", "timed_out",
)
STEP_KINDS: Final = ("task", "tool", "model", "agent", "condition", "approval", "subworkflow")
ATTEMPT_STATUSES: Final = (
    "claimed", "starting", "running", "succeeded", "failed", "cancelled", "timed_out", "lost",
)
LEASE_STATUSES: Final = ("leased", "released", "completed")
WORKER_RELEASE_REASONS: Final = ("declined", "shutdown", "start_failed", "capacity_changed")
RELEASE_REASONS: Final = (*WORKER_RELEASE_REASONS, "lease_expired")
ACTOR_TYPES: Final = (
    "user", "api_app", "trigger", "agent", "mcp_client", "worker", "executor", "system",
    "legacy_shell", "scheduler", "reconciler", "compatibility",
)
EXECUTOR_TYPES: Final = ("local_process", "remote_worker")
EXECUTION_ORIGINS: Final = (
    "manual", "scheduled_system", "scheduled_node", "once", "boot", "grpc", "subscription",
    "system", "script", "legacy_import",
)
EXECUTION_OWNERS: Final = ("legacy", "runtime")
RECOVERY_REASONS: Final = ("unstarted_claim_expired", "execution_not_running")
RECOVERY_EVIDENCE: Final = ("not_running", "running", "unknown")

TRIGGER_TYPE: Final = "plugin_package_workflow"
EXECUTION_ORIGIN: Final = "system"
EXECUTION_OWNER: Final = "runtime"
EXECUTION_SCOPE: Final = "workflow_task"
CANCELLATION_ACTOR: Final = {"type": "reconciler", "id": "runtime:cancellation"}

# --- derived sets (records.md §2.4, state-machines.md §1) ---------------------------------------
TERMINAL_RUN: Final = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
TERMINAL_STEP: Final = frozenset({"succeeded", "failed", "skipped", "cancelled", "timed_out"})
BLOCKING_STEP: Final = frozenset({"failed", "skipped", "cancelled", "timed_out"})
ACTIVE_ATTEMPT: Final = frozenset({"claimed", "starting", "running"})
TERMINAL_ATTEMPT: Final = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})
# ACTIVE_ATTEMPT in the order of ATTEMPT_STATUSES, for storage queries that list it (SQL IN-lists).
ACTIVE_ATTEMPT_STATUSES: Final = tuple(s for s in ATTEMPT_STATUSES if s in ACTIVE_ATTEMPT)

# --- records.md §2.5 fixed codes and texts -------------------------------------------------------
CODE_TEXTS: Final = {
    "EXECUTION_CANCELLED": "Execution was cancelled",
    "EXECUTION_TIMED_OUT": "Execution exceeded its configured timeout",
    "EXECUTION_FAILED": "Execution completed without success",
    "EXECUTOR_START_FAILED": "The Workflow Task Attempt failed before the executor started",
    "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED":
        "The Workflow Task Attempt claim expired before execution started",
    "CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING":
        "Trusted execution evidence proved that the Workflow Task Attempt is not running",
}

# --- state-machines.md §1 AGG precedence: first matching member wins -----------------------------
AGG_PRECEDENCE: Final = (
    (frozenset({"failed", "skipped"}), "failed"),
    (frozenset({"timed_out"}), "timed_out"),
    (frozenset({"cancelled"}), "cancelled"),
)


def aggregate(statuses: list[str] | tuple[str, ...]) -> str | None:
    """AGG (state-machines.md §1): None while any status is open, else the precedence winner."""
    if any(s not in TERMINAL_STEP for s in statuses):
        return None
    for members, result in AGG_PRECEDENCE:
        if any(s in members for s in statuses):
            return result
    return "succeeded"


# --- rule ids ------------------------------------------------------------------------------------
class UnknownRule(LookupError):
    """A rule id, or a row key, that no table below has: a bug at a fire site or in a registry, never input."""


def _by_move(rows: tuple[Any, ...], command: str, source: str | None, target: str) -> Any:
    """The row of `rows` for (command, source, target): the model fires rows, found by the move they make."""
    for row in rows:
        if row.command == command and row.source == source and row.target == target:
            return row
    raise UnknownRule(f"no row for {command}: {source} -> {target}")


# --- state-machines.md §2 Run transitions ------------------------------------------------------
class RunTransition(NamedTuple):
    rule: str
    source: str | None
    target: str
    command: str
    guard: str

    @property
    def id(self) -> str:
        """The row's stable rule id, as the model reports it in `Outcome.rules`."""
        return f"run:{self.rule}"


RUN_TRANSITIONS: Final = (
    RunTransition("admit", None, "running", "admit_workflow", "valid plan, planId and runId unused"),
    RunTransition("request_cancel", "running", "running", "request_cancel", "no intent yet (intent recorded)"),
    *(RunTransition(f"frontier.{t}", "running", t, "advance_frontier", "no intent; every StepRun terminal")
      for t in ("succeeded", "failed", "timed_out", "cancelled")),
    RunTransition("converge.cancelled", "running", "cancelled", "converge_cancellation", "intent, reason != timeout"),
    RunTransition("converge.timed_out", "running", "timed_out", "converge_cancellation", "intent, reason = timeout"),
)


def run_row(command: str, source: str | None, target: str) -> RunTransition:
    row: RunTransition = _by_move(RUN_TRANSITIONS, command, source, target)
    return row


# --- state-machines.md §3.1 StepRun transitions --------------------------------------------------
# The graph as §3.1 draws it; STEP_TRANSITIONS (below STEP_PERFORMERS) adds every move a v1 performer
# makes, so a performer row changed by an ADR is never refused by transition check 5.
_STEP_GRAPH: Final = {
    "pending": frozenset({"ready", "skipped", "cancelled"}),
    "ready": frozenset({"ready", "waiting_approval", "running", "failed", "skipped", "cancelled", "timed_out"}),
    "waiting_approval": frozenset({"ready", "running", "cancelled", "timed_out"}),
    "running": frozenset({"lost", "succeeded", "failed", "cancelled", "timed_out"}),
    "lost": frozenset({"ready", "failed", "cancelled"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "skipped": frozenset(),
    "cancelled": frozenset(),
    "timed_out": frozenset(),
}

# records.md §6.3: status -> (readyAtMs set?, startedAtMs set?, finishedAtMs set?); None = free.
STEP_TIMESTAMP_SHAPE: Final = {
    "pending": (False, False, False),
    "ready": (True, False, False),
    "waiting_approval": (True, False, False),
    "running": (True, True, False),
    "lost": (True, True, False),
    **{s: (None, None, True) for s in TERMINAL_STEP},
}


class FieldEffect(NamedTuple):
    """One effect of §3.2's field-effects table: how a transition to a target sets `field`.

    effect: "at" (= atMs), "null", "kept_or_at" (current value if set, else atMs), "increment",
    "supplied" (the command's value, required by check 7), "supplied_or_null", "supplied_if_given"
    (the command's value if it has one, else the field carries over)."""

    field: str
    effect: str


# Fields every transition nulls unless the target's row sets them (§3.2 "every target").
STEP_FIELDS_RESET: Final = ("outputRef", "resultCode", "errorSummary")
_TERMINAL_EFFECTS: Final = (FieldEffect("finishedAtMs", "at"), FieldEffect("outputRef", "supplied_or_null"),
                            FieldEffect("resultCode", "supplied_or_null"),
                            FieldEffect("errorSummary", "supplied_or_null"))
STEP_FIELD_EFFECTS: Final = {
    "ready": (FieldEffect("readyAtMs", "kept_or_at"), FieldEffect("startedAtMs", "null"),
              FieldEffect("finishedAtMs", "null"), FieldEffect("approvalRequestId", "null")),
    "waiting_approval": (FieldEffect("approvalRequestId", "supplied"),),
    "running": (FieldEffect("startedAtMs", "at"), FieldEffect("finishedAtMs", "null"),
                FieldEffect("attemptCount", "increment"), FieldEffect("approvalRequestId", "supplied_if_given")),
    "lost": (FieldEffect("resultCode", "supplied"), FieldEffect("errorSummary", "supplied_or_null")),
    **{s: _TERMINAL_EFFECTS for s in sorted(TERMINAL_STEP)},
}

# Shape rules of transition check 7 as data: which optional keys each target requires / allows.
STEP_RESULT_CODE_REQUIRED: Final = frozenset({"failed", "skipped", "cancelled", "timed_out", "lost"})
STEP_ERROR_SUMMARY_ALLOWED: Final = frozenset({"failed", "timed_out", "lost"})


# --- state-machines.md §4 Attempt transitions ----------------------------------------------------
class AttemptTransition(NamedTuple):
    rule: str
    source: str | None
    target: str
    command: str
    run_delta: str

    @property
    def id(self) -> str:
        """The row's stable rule id, as the model reports it in `Outcome.rules`."""
        return f"attempt:{self.rule}"


ATTEMPT_TRANSITIONS: Final = (
    AttemptTransition("admit", None, "claimed", "admit_task_attempt", "+1"),
    AttemptTransition("claim", "claimed", "claimed", "claim_lease", "+1"),
    AttemptTransition("renew.claimed", "claimed", "claimed", "renew_lease", "0 or +1"),
    AttemptTransition("renew.starting", "starting", "starting", "renew_lease", "0 or +1"),
    AttemptTransition("renew.running", "running", "running", "renew_lease", "0 or +1"),
    AttemptTransition("release", "claimed", "claimed", "release_lease", "+1"),
    AttemptTransition("start", "claimed", "starting", "start_attempt", "+1"),
    AttemptTransition("running", "starting", "running", "record_running", "+2"),
    *(AttemptTransition(f"fail_start.{t}", "starting", t, "fail_start", "+2")
      for t in ("failed", "cancelled", "timed_out")),
    *(AttemptTransition(f"complete_from_starting.{t}", "starting", t, "complete_attempt", "+3")
      for t in ("succeeded", "failed", "cancelled", "timed_out")),
    *(AttemptTransition(f"complete_from_running.{t}", "running", t, "complete_attempt", "+2")
      for t in ("succeeded", "failed", "cancelled", "timed_out")),
    AttemptTransition("recover.claimed", "claimed", "lost", "recover_attempt", "+2"),
    AttemptTransition("recover.starting", "starting", "lost", "recover_attempt", "+2"),
    AttemptTransition("recover.running", "running", "lost", "recover_attempt", "+3"),
    AttemptTransition("converge.cancelled", "claimed", "cancelled", "converge_cancellation", "+1"),
    AttemptTransition("converge.timed_out", "claimed", "timed_out", "converge_cancellation", "+1"),
)


def attempt_row(command: str, source: str | None, target: str) -> AttemptTransition:
    row: AttemptTransition = _by_move(ATTEMPT_TRANSITIONS, command, source, target)
    return row


# --- state-machines.md §5 lease transitions ------------------------------------------------------
class LeaseTransition(NamedTuple):
    rule: str
    source: str | None
    target: str
    command: str

    @property
    def id(self) -> str:
        """The row's stable rule id, as the model reports it in `Outcome.rules`."""
        return f"lease:{self.rule}"


LEASE_TRANSITIONS: Final = (
    LeaseTransition("claim.new", None, "leased", "claim_lease"),
    LeaseTransition("claim.released", "released", "leased", "claim_lease"),
    LeaseTransition("claim.expired", "leased", "leased", "claim_lease"),
    LeaseTransition("renew", "leased", "leased", "renew_lease"),
    LeaseTransition("release", "leased", "released", "release_lease"),
    LeaseTransition("recover", "leased", "released", "recover_attempt"),
    LeaseTransition("complete.fail_start", "leased", "completed", "fail_start"),
    LeaseTransition("complete.completion", "leased", "completed", "complete_attempt"),
)

def lease_row(command: str, source: str | None, target: str) -> LeaseTransition:
    row: LeaseTransition = _by_move(LEASE_TRANSITIONS, command, source, target)
    return row


# --- cancellation.md §4 reason mapping -----------------------------------------------------------
class ReasonTarget(NamedTuple):
    status: str
    error_code: str
    error_summary: str


CANCEL_REASON_TARGET: Final = {
    "timeout": ReasonTarget("timed_out", "EXECUTION_TIMED_OUT", CODE_TEXTS["EXECUTION_TIMED_OUT"]),
    **{r: ReasonTarget("cancelled", "EXECUTION_CANCELLED", CODE_TEXTS["EXECUTION_CANCELLED"])
       for r in ("user", "policy", "shutdown", "reconcile")},
}


class StepDecision(NamedTuple):
    """Outcome of the convergence StepRun table for one (status, timeout?) pair."""

    action: str  # "mutate" | "blocked" | "skip"
    target: str | None
    result_code: str | None
    error_summary: str | None


_CANCELLED = StepDecision("mutate", "cancelled", "workflow_cancelled", None)
_TIMED_OUT = StepDecision("mutate", "timed_out", "workflow_timed_out", CODE_TEXTS["EXECUTION_TIMED_OUT"])
_BLOCKED = StepDecision("blocked", None, None, None)
_SKIP = StepDecision("skip", None, None, None)

# (StepRun status, reason is timeout) → decision, for StepRuns without a blocked attempt.
CANCEL_STEP_TABLE: Final = {
    **{(s, t): _SKIP for s in TERMINAL_STEP for t in (False, True)},
    ("pending", False): _CANCELLED, ("pending", True): _CANCELLED,
    ("ready", False): _CANCELLED, ("ready", True): _TIMED_OUT,
    ("waiting_approval", False): _CANCELLED, ("waiting_approval", True): _TIMED_OUT,
    ("lost", False): _CANCELLED, ("lost", True): _CANCELLED,
    ("running", False): _BLOCKED, ("running", True): _BLOCKED,
}

# (attempt status, lease status or None) → "settle" | "blocked"  (cancellation.md §5)
CANCEL_ATTEMPT_TABLE: Final = {
    **{("claimed", ls): "settle" for ls in (None, "released", "completed")},
    ("claimed", "leased"): "blocked",
    **{(a, ls): "blocked" for a in ("starting", "running") for ls in (None, *LEASE_STATUSES)},
}


def cancel_step_id(status: str, timeout: bool) -> str:
    """Stable rule id of the CANCEL_STEP_TABLE row for (StepRun status, reason is timeout): the cells of
    cancellation.md §4's table, whose one `terminal` row stands for every terminal status."""
    if (status, timeout) not in CANCEL_STEP_TABLE:
        raise UnknownRule(f"CANCEL_STEP_TABLE has no row ({status}, {timeout})")
    row = "terminal" if status in TERMINAL_STEP else status
    return f"cancel.step:{row}/{'timeout' if timeout else 'other'}"


def cancel_attempt_id(status: str, lease_status: str | None) -> str:
    """Stable rule id of the CANCEL_ATTEMPT_TABLE row for (attempt status, lease status)."""
    if (status, lease_status) not in CANCEL_ATTEMPT_TABLE:
        raise UnknownRule(f"CANCEL_ATTEMPT_TABLE has no row ({status}, {lease_status})")
    return f"cancel.attempt:{status}/{lease_status}"


class StepPerformer(NamedTuple):
    """One row of state-machines.md §3.4: who performs a StepRun transition in v1."""

    rule: str
    source: str | None
    target: str
    command: str

    @property
    def id(self) -> str:
        """The row's stable rule id, as the model reports it in `Outcome.rules`."""
        return f"step:{self.rule}"


def _short(status: str) -> str:
    return "waiting" if status == "waiting_approval" else status


# The convergence rows are read off CANCEL_STEP_TABLE: one row per (status, target) it mutates.
_CONVERGE_MOVES: Final = sorted({(s, d.target) for (s, _), d in CANCEL_STEP_TABLE.items()
                                 if d.action == "mutate" and d.target is not None},
                                key=lambda m: (STEP_STATUSES.index(m[0]), m[1]))

STEP_PERFORMERS: Final = (
    StepPerformer("admit.ready", None, "ready", "admit_workflow"),
    StepPerformer("admit.pending", None, "pending", "admit_workflow"),
    StepPerformer("frontier.ready", "pending", "ready", "advance_frontier"),
    StepPerformer("frontier.skip", "pending", "skipped", "advance_frontier"),
    StepPerformer("running.record", "ready", "running", "record_running"),
    StepPerformer("running.synthetic", "ready", "running", "complete_attempt"),
    StepPerformer("fail_start.failed", "ready", "failed", "fail_start"),
    StepPerformer("fail_start.cancelled", "ready", "cancelled", "fail_start"),
    StepPerformer("fail_start.timed_out", "ready", "timed_out", "fail_start"),
    StepPerformer("complete.succeeded", "running", "succeeded", "complete_attempt"),
    StepPerformer("complete.failed", "running", "failed", "complete_attempt"),
    StepPerformer("complete.cancelled", "running", "cancelled", "complete_attempt"),
    StepPerformer("complete.timed_out", "running", "timed_out", "complete_attempt"),
    StepPerformer("recover.requeue", "ready", "ready", "recover_attempt"),
    StepPerformer("recover.starting_failed", "ready", "failed", "recover_attempt"),
    StepPerformer("recover.running_lost", "running", "lost", "recover_attempt"),
    StepPerformer("recover.lost_failed", "lost", "failed", "recover_attempt"),
    *(StepPerformer(f"converge.{_short(s)}_{t}", s, t, "converge_cancellation") for s, t in _CONVERGE_MOVES),
)


def step_row(command: str, source: str | None, target: str) -> StepPerformer:
    row: StepPerformer = _by_move(STEP_PERFORMERS, command, source, target)
    return row


STEP_TRANSITIONS: Final = {
    s: targets | {p.target for p in STEP_PERFORMERS if p.source == s} for s, targets in _STEP_GRAPH.items()}


# --- task-attempts.md §7 completion mapping (first matching rule wins) ---------------------------
class CompletionRule(NamedTuple):
    rule: str
    command: str
    intent: bool | None  # None = don't care
    timeout_reason: bool | None
    deadline_passed: bool | None
    exit_zero: bool | None
    status: str

    @property
    def id(self) -> str:
        """The row's stable rule id, as the model reports it in `Outcome.rules`."""
        return f"completion:{self.rule}"


COMPLETION_RULES: Final = (
    CompletionRule("fail_start.intent_timeout", "fail_start", True, True, None, None, "timed_out"),
    CompletionRule("fail_start.intent", "fail_start", True, None, None, None, "cancelled"),
    CompletionRule("fail_start.deadline", "fail_start", None, None, True, None, "timed_out"),
    CompletionRule("fail_start.otherwise", "fail_start", None, None, None, None, "failed"),
    CompletionRule("complete.intent_timeout", "complete_attempt", True, True, None, None, "timed_out"),
    CompletionRule("complete.intent", "complete_attempt", True, None, None, None, "cancelled"),
    CompletionRule("complete.deadline", "complete_attempt", None, None, True, None, "timed_out"),
    CompletionRule("complete.exit_zero", "complete_attempt", None, None, None, True, "succeeded"),
    CompletionRule("complete.otherwise", "complete_attempt", None, None, None, None, "failed"),
)


def completion_rule(command: str, intent: bool, timeout_reason: bool, deadline_passed: bool,
                    exit_zero: bool) -> CompletionRule:
    """The first rule of COMPLETION_RULES for `command` that matches the facts."""
    facts = (intent, timeout_reason, deadline_passed, exit_zero)
    for rule in COMPLETION_RULES:
        if rule.command != command:
            continue
        conds = (rule.intent, rule.timeout_reason, rule.deadline_passed, rule.exit_zero)
        if all(c is None or c == f for c, f in zip(conds, facts, strict=True)):
            return rule
    raise AssertionError(f"completion mapping is not total for {command} {facts}")


# --- state-machines.md §8 codes by path -----------------------------------------------------------
class PathCodes(NamedTuple):
    step_result_code: str | None
    step_error_summary: str | None
    attempt_error_code: str | None
    attempt_error_summary: str | None


def _attempt_code(code: str) -> tuple[str, str]:
    return code, CODE_TEXTS[code]


# Worker-path terminal status → codes (fail_start and completion share the rows except failed).
WORKER_PATH_CODES: Final = {
    ("fail_start", "failed"): PathCodes("executor_start_failed", CODE_TEXTS["EXECUTOR_START_FAILED"],
                                        *_attempt_code("EXECUTOR_START_FAILED")),
    ("fail_start", "cancelled"): PathCodes("execution_cancelled", None, *_attempt_code("EXECUTION_CANCELLED")),
    ("fail_start", "timed_out"): PathCodes("execution_timed_out", CODE_TEXTS["EXECUTION_TIMED_OUT"],
                                           *_attempt_code("EXECUTION_TIMED_OUT")),
    ("complete_attempt", "succeeded"): PathCodes(None, None, None, None),
    ("complete_attempt", "failed"): PathCodes("execution_failed", CODE_TEXTS["EXECUTION_FAILED"],
                                              *_attempt_code("EXECUTION_FAILED")),
    ("complete_attempt", "cancelled"): PathCodes("execution_cancelled", None,
                                                 *_attempt_code("EXECUTION_CANCELLED")),
    ("complete_attempt", "timed_out"): PathCodes("execution_timed_out", CODE_TEXTS["EXECUTION_TIMED_OUT"],
                                                 *_attempt_code("EXECUTION_TIMED_OUT")),
}

RECOVERY_PATH_CODES: Final = {
    "unstarted_claim_expired": PathCodes(None, None, *_attempt_code("CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED")),
    "execution_not_running": PathCodes("cluster_recovery_execution_not_running",
                                       CODE_TEXTS["CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING"],
                                       *_attempt_code("CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING")),
}

FRONTIER_SKIP_RESULT_CODE: Final = "dependency_not_succeeded"
FRONTIER_TERMINAL_ERROR_CODE: Final = {
    "succeeded": None,
    "failed": "workflow_step_failed",
    "timed_out": "workflow_step_timed_out",
    "cancelled": "workflow_step_cancelled",
}

# --- commands.md §2.3 error code families --------------------------------------------------------
class Family(NamedTuple):
    invalid: str | None
    conflict: str | None
    unavailable: str | None


def _family(stem: str) -> Family:
    return Family(f"{stem}_INVALID", f"{stem}_CONFLICT", f"{stem}_UNAVAILABLE")


FAMILIES: Final = {
    "plan": Family("PLUGIN_PACKAGE_WORKFLOW_EXECUTION_PLAN_INVALID", None, None),
    "admission": _family("PLUGIN_PACKAGE_WORKFLOW_ADMISSION"),
    "frontier": _family("PLUGIN_PACKAGE_WORKFLOW_FRONTIER"),
    "task_admission": _family("PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION"),
    "task_execution": _family("PLUGIN_PACKAGE_WORKFLOW_TASK_EXECUTION"),
    "task_recovery": _family("PLUGIN_PACKAGE_WORKFLOW_TASK_RECOVERY"),
    "cancel_request": _family("PLUGIN_PACKAGE_WORKFLOW_CANCEL_REQUEST"),
    "cancellation": _family("PLUGIN_PACKAGE_WORKFLOW_CANCELLATION_CONVERGENCE"),
    "page": Family("CLUSTER_RUN_CANCELLATION_CONVERGENCE_INVALID", None,
                   "CLUSTER_RUN_CANCELLATION_CONVERGENCE_UNAVAILABLE"),
    "step_run": Family("STEP_RUN_INVALID", None, None),
    "admission_receipt": Family("PLUGIN_PACKAGE_WORKFLOW_ADMISSION_RECEIPT_INVALID", None, None),
}
STEP_RUN_FENCE_CONFLICT: Final = "STEP_RUN_FENCE_CONFLICT"
STEP_RUN_STATE_CONFLICT: Final = "STEP_RUN_STATE_CONFLICT"
STEP_RUN_MUTATION_CONFLICT: Final = "STEP_RUN_MUTATION_CONFLICT"

# Which family each command belongs to (commands.md §2.3 and §4).
COMMAND_FAMILY: Final = {
    "admit_workflow": "admission",
    "frontier_candidates": "frontier",
    "advance_frontier": "frontier",
    "task_candidates": "task_admission",
    "admit_task_attempt": "task_admission",
    "claim_lease": "task_execution",
    "renew_lease": "task_execution",
    "release_lease": "task_execution",
    "start_attempt": "task_execution",
    "record_running": "task_execution",
    "fail_start": "task_execution",
    "complete_attempt": "task_execution",
    "recovery_candidates": "task_recovery",
    "recover_attempt": "task_recovery",
    "request_cancel": "cancel_request",
    "cancellation_candidates": "cancellation",
    "converge_cancellation": "cancellation",
    "converge_cancellation_page": "page",
}

# Outcomes of every command (commands.md §3), for coverage reports.
COMMAND_OUTCOMES: Final = {
    "admit_workflow": ("created", "existing"),
    "advance_frontier": ("advanced", "terminal", "unchanged", "settled"),
    "admit_task_attempt": ("created", "existing"),
    "claim_lease": ("claimed", "idempotent", "leased", "not_eligible"),
    "renew_lease": ("renewed", "stop_requested"),
    "release_lease": ("released", "already_released"),
    "start_attempt": ("starting", "already_starting", "already_running"),
    "record_running": ("running", "already_running"),
    "fail_start": ("start_failed", "already_terminal"),
    "complete_attempt": ("completed", "already_terminal"),
    "recover_attempt": ("requeued", "failed", "retry", "manual"),
    "request_cancel": ("requested", "existing"),
    "converge_cancellation": ("terminal", "blocked", "settled"),
    "converge_cancellation_page": ("page",),
    "frontier_candidates": ("page",),
    "task_candidates": ("page",),
    "recovery_candidates": ("page",),
    "cancellation_candidates": ("page",),
}
WRITING_COMMANDS: Final = tuple(c for c in COMMAND_OUTCOMES if not c.endswith("_candidates"))
QUERY_COMMANDS: Final = tuple(c for c in COMMAND_OUTCOMES if c.endswith("_candidates"))

# Query pages (commands.md §2.6): limit bound and cursor keys with their shape names.
QUERY_PAGES: Final = {
    "frontier_candidates": (MAX_FRONTIER_PAGE, (("admittedAtMs", "timestamp"), ("planDigest", "digest"))),
    "task_candidates": (MAX_TASK_ATTEMPT_PAGE, (("readyAtMs", "timestamp"), ("stepRunId", "identifier"))),
    "recovery_candidates": (MAX_TASK_ATTEMPT_PAGE,
                            (("leaseExpiresAtMs", "timestamp"), ("attemptId", "portable_id"))),
    "cancellation_candidates": (MAX_CANCELLATION_PAGE,
                                (("cancelRequestedAtMs", "timestamp"), ("runId", "portable_id"))),
}


# --- commands.md §4: the decisions a command takes that move no status (replays, refusals by answer) --
class CommandDecision(NamedTuple):
    """A rule of a command's sequence that is not a status move of the tables above."""

    rule: str
    commands: tuple[str, ...]
    outcome: str
    guard: str

    @property
    def id(self) -> str:
        """The row's stable rule id, as the model reports it in `Outcome.rules`."""
        return f"decision:{self.rule}"


COMMAND_DECISIONS: Final = (
    CommandDecision("admit.replay", ("admit_workflow",), "existing", "same plan already admitted"),
    CommandDecision("frontier.settled", ("advance_frontier",), "settled", "terminal Run recomputes to its status"),
    CommandDecision("frontier.unchanged", ("advance_frontier",), "unchanged", "no StepRun to move, Run not terminal"),
    CommandDecision("task_admission.replay", ("admit_task_attempt",), "existing", "the epoch already has its attempt"),
    CommandDecision("claim.not_eligible", ("claim_lease",), "not_eligible",
                    "attempt not claimed, Run not running or cancelling, epoch left, or lease completed "
                    "(the first that holds is the answer's reason)"),
    CommandDecision("claim.idempotent", ("claim_lease",), "idempotent", "live lease held by the same worker"),
    CommandDecision("claim.leased", ("claim_lease",), "leased", "live lease held by another worker"),
    CommandDecision("renew.stop.intent", ("renew_lease",), "stop_requested", "the Run has cancel intent"),
    CommandDecision("renew.stop.timeout_written", ("renew_lease",), "stop_requested",
                    "execution deadline passed: timeout intent written"),
    CommandDecision("renew.stop.timeout_repeat", ("renew_lease",), "stop_requested",
                    "execution deadline passed, timeout intent already written"),
    CommandDecision("renew.renewed", ("renew_lease",), "renewed", "no intent, deadline not passed"),
    CommandDecision("release.replay", ("release_lease",), "already_released", "same holder released it"),
    CommandDecision("start.replay.starting", ("start_attempt",), "already_starting", "same holder, starting"),
    CommandDecision("start.replay.running", ("start_attempt",), "already_running", "same holder, running"),
    CommandDecision("running.replay", ("record_running",), "already_running", "same holder, running"),
    CommandDecision("finish.replay", ("fail_start", "complete_attempt"), "already_terminal",
                    "terminal attempt, completed lease of the same holder"),
    CommandDecision("recover.retry", ("recover_attempt",), "retry", "evidence does not prove the claim unstarted"),
    CommandDecision("recover.manual", ("recover_attempt",), "manual", "evidence does not prove it not running"),
    CommandDecision("cancel_request.existing", ("request_cancel",), "existing", "intent already recorded"),
    CommandDecision("converge.settled", ("converge_cancellation",), "settled", "terminal Run agrees with its reason"),
    CommandDecision("converge.step_held", ("converge_cancellation",), "blocked",
                    "cancellation.md §5: the StepRun has a blocked active attempt (the §4 table is not read)"),
    CommandDecision("page", ("converge_cancellation_page",), "page", "one cancellation page"),
    *(CommandDecision(f"query.{q}", (q,), "page", "one candidate page") for q in QUERY_COMMANDS),
)
_DECISIONS_BY_RULE: Final = {d.rule: d for d in COMMAND_DECISIONS}


def decision(rule: str) -> CommandDecision:
    """The COMMAND_DECISIONS row named `rule`."""
    try:
        return _DECISIONS_BY_RULE[rule]
    except KeyError:
        raise UnknownRule(f"COMMAND_DECISIONS has no row {rule!r}") from None


# --- task-attempts.md §3A: ql3's input form of the task attempt admission builder -------------------
SCHEMA_TASK_RECONCILIATION: Final = "qinglong/plugin-package-task-reconciliation@v1"
DOMAIN_TASK_RECONCILIATION_RECEIPT: Final = "qinglong/plugin-package-task-reconciliation-receipt@v1"
DOMAIN_LOCAL_EXECUTION_REVISION: Final = "qinglong.local-task-execution-revision.v1"
DOMAIN_CLUSTER_EXECUTION_REVISION: Final = "qinglong.cluster-task-execution-revision.v1"
SCHEMA_COMMAND_EXECUTION_PLAN: Final = "qinglong/command-execution@v1"
RECONCILIATION_DISPOSITIONS: Final = ("already_disabled", "created", "disabled", "retained", "updated")
# The dispositions whose item a Task attempt may execute (check A16).
EXECUTABLE_DISPOSITIONS: Final = ("created", "retained", "updated")
MAX_RECONCILIATION_ITEMS: Final = 512
MAX_CLUSTER_REVISION_BYTES: Final = 98304
MAX_REVISION_TIMEOUT_MS: Final = 31536000000
MAX_COMMAND_ARGS: Final = 256
MAX_COMMAND_ARG_BYTES: Final = 16384
MAX_COMMAND_BYTES: Final = 65536
MAX_PATH_BYTES: Final = 4096
MAX_ENVIRONMENT_ENTRIES: Final = 256
MAX_ENVIRONMENT_BYTES: Final = 65536
MAX_SECRET_REF_BYTES: Final = 512
MAX_PLACEMENT_LIST: Final = 16
MAX_PLACEMENT_TOKEN_CHARS: Final = 64
MAX_LABEL_KEY_CHARS: Final = 128
MAX_LABEL_VALUE_CHARS: Final = 256
MAX_PREFERENCE_WEIGHT: Final = 100
SHELLS: Final = ("/bin/sh", "/bin/bash")
REMOTE_WORKER_EXECUTOR: Final = "remote-worker"
PLACEMENT_STRING_LISTS: Final = ("architectures", "operatingSystems", "executors", "features")
PLACEMENT_REQUIRED_KEYS: Final = (
    "architectures", "operatingSystems", "executors", "runtimes", "labels", "minMemoryBytes", "minDiskBytes",
    "gpuVendor", "features",
)


class AdmissionCheck(NamedTuple):
    """One row of task-attempts.md §3A's check ladder: its id, what it checks, and ql3's reason text,
    which is the oracle's error message (so messages compare with ql3's detail text)."""

    id: str
    checks: str
    reason_text: str


QL3_ADMISSION_CHECKS: Final = (
    AdmissionCheck("A1", "the input is a JSON object", "admission input must be an object"),
    AdmissionCheck("A2", "exact input keys", "admission input shape is invalid"),
    AdmissionCheck("A3", "plan, stepRun and taskReconciliation normalize", "durable Workflow evidence is invalid"),
    AdmissionCheck("A4", "execution is an object whose executorType is local_process or remote_worker",
                   "execution revision executorType is invalid"),
    AdmissionCheck("A5", "execution normalizes as that executor's revision, digest included",
                   "execution revision is invalid"),
    AdmissionCheck("A6", "local only: taskRevision is IDENTIFIER-shaped", "execution revision taskRevision is invalid"),
    AdmissionCheck("A7", "local only: taskRevision is qltd:v1:R:DIGEST (R without upper bound)",
                   "execution revision Task identity is inconsistent"),
    AdmissionCheck("A8", "execution.projectId is IDENTIFIER-shaped", "execution revision projectId is invalid"),
    AdmissionCheck("A9", "execution.taskId is IDENTIFIER-shaped", "execution revision taskId is invalid"),
    AdmissionCheck("A10", "attemptNumber is an int in 1..8192", "attemptNumber is invalid"),
    AdmissionCheck("A11", "admittedAtMs is a TIMESTAMP", "admittedAtMs is invalid"),
    AdmissionCheck("A12", "the Run checks of §3 step 4, except the counter bound",
                   "Run does not match the admitted Workflow aggregate"),
    AdmissionCheck("A13", "the StepRun checks of §3 step 5", "StepRun is not one exact ready Task from the plan"),
    AdmissionCheck("A14", "the receipt's project, package, generation and digests equal plan.target's",
                   "Task reconciliation does not match the immutable plan"),
    AdmissionCheck("A15", "pkg: + packageName + : + the plan step's taskId is IDENTIFIER-shaped",
                   "runtime Task identity is invalid"),
    AdmissionCheck("A16", "an executable receipt item for the Task, and the revision is that item's",
                   "execution binding is not the reconciled Task revision"),
    AdmissionCheck("A17", "admittedAtMs >= plan.plannedAtMs, receipt.committedAtMs and stepRun.updatedAtMs",
                   "admission time precedes durable evidence"),
    AdmissionCheck("A18", "run.version and run.eventSequence < 2147483647", "Run counters overflowed"),
)
