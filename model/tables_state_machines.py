"""state-machines.md as data: AGG (§1), the Run, StepRun, attempt and lease transitions (§2–§5), who
performs each StepRun move (§3.4) and the codes by path (§8). The lookups over these rows (`run_row`,
`step_row`, `aggregate`, ...) are in `model/tables.py`."""

from __future__ import annotations

from typing import Final, NamedTuple

from .tables_cancellation import CANCEL_STEP_TABLE
from .tables_records import CODE_TEXTS, STEP_STATUSES, TERMINAL_STEP

# --- state-machines.md §1 AGG precedence: first matching member wins -----------------------------
AGG_PRECEDENCE: Final = (
    (frozenset({"failed", "skipped"}), "failed"),
    (frozenset({"timed_out"}), "timed_out"),
    (frozenset({"cancelled"}), "cancelled"),
)


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


# --- state-machines.md §3.4 who performs each StepRun transition in v1 ------------------------------
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

STEP_TRANSITIONS: Final = {
    s: targets | {p.target for p in STEP_PERFORMERS if p.source == s} for s, targets in _STEP_GRAPH.items()}


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
