"""commands.md as data: the error code families (§2.3), which family each command belongs to, the
outcomes of every command (§3), the query pages (§2.6) and the decisions a command takes that move
no status (§4; `decision` in `model/tables.py` looks one up)."""

from __future__ import annotations

from typing import Final, NamedTuple

from .tables_records import MAX_CANCELLATION_PAGE, MAX_FRONTIER_PAGE, MAX_TASK_ATTEMPT_PAGE


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
