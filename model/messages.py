"""The wording of the commands' refusals: the free-text message of each Invalid, Conflict and
Unavailable a command's checks raise (commands.md §2.2).

A message is for humans. Conformance compares an error's class, code and reason, never its message
(conformance/lockstep/compare.py; traces store {class, code, reason}), so the wording lives here once and
both readers of the spec use it: the model's commands (model/cmd_*.py, model/cmd_loads.py) and
impl's independent transcription of them (impl/commands/). Which check fails first, and with which
class and reason, each side decides on its own — that is what lockstep conformance compares
(docs/architecture.md "What impl shares with the model").

Argument messages are in model/arguments.py, with the shapes they describe.
"""

from __future__ import annotations

from typing import Final

from . import tables as T

# --- LOAD-RUN, LOAD-STEP(S), LOAD-ATTEMPT (commands.md §2.4) ---------------------------------------
PLAN_DIGEST_DRIFT: Final = "stored planDigest differs from the admission"
STEPS_NOT_PLAN: Final = "StepRuns are not in bijection with the plan steps"


def run_missing(run_id: str) -> str:
    return f"Run {run_id} does not exist"


def admission_count(run_id: str, count: int) -> str:
    return f"Run {run_id} has {count} admissions"


def step_missing(step_run_id: str, run_id: str) -> str:
    return f"StepRun {step_run_id} of Run {run_id} does not exist"


def attempt_missing(attempt_id: str) -> str:
    return f"attempt {attempt_id} does not exist"


def receipt_problem(attempt_id: str, problem: str) -> str:
    return f"receipt of {attempt_id}: {problem}"


# --- statuses a check found (the status is the message's last word) -------------------------------
def run_is(status: str) -> str:
    return f"Run is {status}"


def attempt_is(status: str) -> str:
    return f"attempt is {status}"


def step_is(step_run_id: str, status: str) -> str:
    return f"StepRun {step_run_id} is {status}"


# --- admit_workflow (commands.md §4.1; frontier.md §3.2 for the frozen evidence of a replay) ------
PLANNED_IN_FUTURE: Final = "plannedAtMs is after the observation time"
STEP_RUN_ID_TAKEN: Final = "a StepRun id of the plan already exists"
STORED_PLAN_DIFFERS: Final = "stored plan or receipt differs"
ADMISSION_EVENTS_DIFFER: Final = "admission events differ"
ADMISSION_STEPS_DIFFER: Final = "admission step entries differ"
RUN_IDENTITY_DRIFTED: Final = "Run identity or counters drifted"


def plan_id_taken(plan_id: str) -> str:
    return f"planId {plan_id} is admitted with another digest"


def run_id_taken(run_id: str) -> str:
    return f"Run {run_id} already exists"


def first_ledger_entry_differs(step_run_id: str) -> str:
    return f"first ledger entry of {step_run_id} differs"


def step_identity_drifted(step_run_id: str) -> str:
    return f"StepRun {step_run_id} identity drifted"


# --- the Run's cancel intent and terminal status ---------------------------------------------------
CANCEL_INTENT: Final = "the Run has cancel intent"
NO_CANCEL_INTENT: Final = "the Run has no cancel intent"
FRONTIER_TERMINAL_DRIFT: Final = "terminal Run does not recompute to its status"
CANCEL_TERMINAL_DRIFT: Final = "terminal status disagrees with the cancel reason"

# --- admit_task_attempt (commands.md §4.5) ---------------------------------------------------------
RECEIPT_EPOCH_DRIFT: Final = "receipt epoch digest differs from the StepRun"
BINDING_MISMATCH: Final = "this epoch was admitted with another binding"
ATTEMPTS_EXHAUSTED: Final = f"StepRun attemptCount reached {T.MAX_STEP_RUN_ATTEMPTS}"
ATTEMPT_NUMBERS_EXHAUSTED: Final = f"the Run used all {T.MAX_RUN_ATTEMPTS} attempt numbers"

# --- the worker commands and recovery (commands.md §4.6–§4.14) --------------------------------------
LEFT_ADMITTED_EPOCH: Final = "StepRun left the admitted epoch"
LEFT_ATTEMPT_EPOCH: Final = "StepRun left the attempt's epoch"
RELEASED_OTHERWISE: Final = "the lease was released with another reason"
NOT_LEASED: Final = "the attempt holds no leased lease"
LEASE_LIVE: Final = "the lease has not expired"


def fence_failed(attempt_id: str) -> str:
    """FENCE (commands.md §2.4): the reason names the failing part, the message the attempt."""
    return f"lease fence failed for {attempt_id}"
