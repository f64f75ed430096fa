"""Coverage witnesses: which rule-table rows a campaign reached (README §7, model/tables.py).

Every row of STEP_PERFORMERS, ATTEMPT_TRANSITIONS, LEASE_TRANSITIONS, RUN_TRANSITIONS and
COMPLETION_RULES, and every key of CANCEL_ATTEMPT_TABLE and CANCEL_STEP_TABLE, has a witness name.
Most witnesses are rule names the model reports in `Outcome.rules`; the StepRun convergence keys
(status, reason is timeout) are derived from the state a converge_cancellation ran on, because the
model reports all terminal StepRuns under one rule. Rows that no v1 command can reach are listed in
UNREACHABLE with the spec clause that makes them unreachable.
"""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.state import State


def _run_row(r: T.RunTransition) -> str:
    names = {"admit_workflow": "run:admit", "request_cancel": "run:request_cancel",
             "advance_frontier": f"run:frontier.{r.target}", "converge_cancellation": f"run:converge.{r.target}"}
    return names[r.command]


def cancel_step_row(status: str, timeout: bool) -> str:
    return f"cancel.step:{status}/{'timeout' if timeout else 'other'}"


def all_rows() -> dict[str, str]:
    """witness name -> the table it belongs to."""
    rows: dict[str, str] = {}
    rows |= {f"step:{r.rule}": "STEP_PERFORMERS" for r in T.STEP_PERFORMERS}
    rows |= {f"attempt:{r.rule}": "ATTEMPT_TRANSITIONS" for r in T.ATTEMPT_TRANSITIONS}
    rows |= {f"lease:{r.rule}": "LEASE_TRANSITIONS" for r in T.LEASE_TRANSITIONS}
    rows |= {_run_row(r): "RUN_TRANSITIONS" for r in T.RUN_TRANSITIONS}
    rows |= {f"completion:{r.rule}": "COMPLETION_RULES" for r in T.COMPLETION_RULES}
    rows |= {f"cancel.attempt:{a}/{ls}": "CANCEL_ATTEMPT_TABLE" for a, ls in T.CANCEL_ATTEMPT_TABLE}
    rows |= {cancel_step_row(s, t): "CANCEL_STEP_TABLE" for s, t in T.CANCEL_STEP_TABLE}
    return rows


_NO_WAITING = "D-1 and INV-9: no v1 command creates waiting_approval"
_NO_LOST = ("INV-9 and state-machines.md §3.4: recovery writes running → lost → failed in one transaction, so no "
            "StepRun is lost after a commit")
_LEASED = ("INV-24 and state-machines.md §7: a starting or running attempt always holds its `leased` lease (fail_start "
           "and completion end the attempt in the transaction that completes the lease; recovery loses it)")
_RUNNING_STEP = ("state-machines.md §7 (s running ⇒ exactly one running attempt, which is blocked) and "
                 "cancellation.md §5: a running StepRun is always in the blocked set through its attempt before "
                 "the table is read")

UNREACHABLE: dict[str, str] = {
    "step:converge.waiting_cancelled": _NO_WAITING,
    "step:converge.waiting_timed_out": _NO_WAITING,
    "step:converge.lost_cancelled": _NO_LOST,
    "run:frontier.cancelled": ("D-3, D-5 and task-attempts.md §7: a StepRun becomes cancelled only under cancel intent "
                               "(completion/start-failure mapping or convergence), and a Run with intent is never "
                               "terminalized by the frontier, so AGG never yields cancelled for advance_frontier"),
    "cancel.attempt:claimed/completed": ("cancellation.md §5 ('not reachable in v1'): a lease is completed only by "
                                         "fail_start/complete_attempt, which end the attempt"),
    **{f"cancel.attempt:{a}/{ls}": _LEASED for a in ("starting", "running") for ls in (None, "released", "completed")},
    **{cancel_step_row("waiting_approval", t): _NO_WAITING for t in (False, True)},
    **{cancel_step_row("lost", t): _NO_LOST for t in (False, True)},
    **{cancel_step_row("running", t): _RUNNING_STEP for t in (False, True)},
}


def convergence_witnesses(before: State, step: dict[str, Any], result: dict[str, Any] | None) -> set[str]:
    """CANCEL_STEP_TABLE keys consulted by a committed converge_cancellation on `before`."""
    if step.get("name") != "converge_cancellation" or not result or result.get("status") == "settled":
        return set()
    run = before.runs[step["args"]["runId"]]
    timeout = run["cancelReason"] == "timeout"
    blocked_attempts = set(result["blockedAttemptIds"])
    held = {a["stepRunId"] for a in before.attempts_of_run(run["id"]) if a["id"] in blocked_attempts}
    return {cancel_step_row(s["status"], timeout) for s in before.steps_of_run(run["id"]) if s["id"] not in held}


def outcome_rows() -> set[str]:
    """Every outcome of the command catalogue (commands.md §3)."""
    return {f"outcome:{c}.{o}" for c, outcomes in T.COMMAND_OUTCOMES.items() for o in outcomes}


def witnesses(before: State, step: dict[str, Any], rules: tuple[str, ...] | list[str],
              result: dict[str, Any] | None) -> set[str]:
    """Every row witness (and the command outcome) shown by one committed command."""
    outcome = f"outcome:{step.get('name')}.{(result or {}).get('status', 'page')}"
    return {*rules, outcome} | convergence_witnesses(before, step, result)
