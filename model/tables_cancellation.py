"""cancellation.md §4–§5 as data: the reason mapping and the convergence decision tables of a StepRun
and of an attempt (their rule ids: `cancel_step_id`, `cancel_attempt_id` in `model/tables.py`)."""

from __future__ import annotations

from typing import Final, NamedTuple

from .tables_records import CODE_TEXTS, LEASE_STATUSES, TERMINAL_STEP


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
