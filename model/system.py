"""The whole-system model: every command of commands.md as one atomic step.

`apply(state, command, at_ms)` is a pure function: it returns an Outcome holding either the result
and the new State, or the typed error and the unchanged State, plus the names of the rule-table
rows that fired (for explanations and coverage witnesses). This module is the dispatcher: the
commands live by area in model/cmd_*.py (as impl/commands/cmd_* do for the storage
implementations), their loads in model/cmd_loads.py, their context in model/cmd_context.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from . import cmd_admission, cmd_cancel, cmd_frontier, cmd_queries, cmd_recovery, cmd_tasks, cmd_worker
from . import tables as T
from .cmd_context import CommandContext
from .cmd_queries import frontier_candidate_rows, recovery_candidate_rows, task_candidate_rows
from .errors import QlwfError
from .records import Record
from .state import State
from .values import is_object, is_timestamp

# Re-exported: the names other modules import from here (the facade of the whole system).
__all__ = ["COMMANDS", "CommandContext", "Outcome", "WorkflowSystem", "advance_time", "apply",
           "frontier_candidate_rows", "recovery_candidate_rows", "task_candidate_rows"]


class Outcome(NamedTuple):
    result: Record | None
    error: QlwfError | None
    state: State
    rules: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.error is None


COMMANDS: dict[str, Callable[[State, CommandContext, Any], tuple[Record, State]]] = {
    "admit_workflow": cmd_admission.admit_workflow,
    "frontier_candidates": cmd_queries.frontier_candidates,
    "advance_frontier": cmd_frontier.advance_frontier,
    "task_candidates": cmd_queries.task_candidates,
    "admit_task_attempt": cmd_tasks.admit_task_attempt,
    "claim_lease": cmd_worker.claim_lease,
    "renew_lease": cmd_worker.renew_lease,
    "release_lease": cmd_worker.release_lease,
    "start_attempt": cmd_worker.start_attempt,
    "record_running": cmd_worker.record_running,
    "fail_start": cmd_worker.fail_start,
    "complete_attempt": cmd_worker.complete_attempt,
    "recovery_candidates": cmd_queries.recovery_candidates,
    "recover_attempt": cmd_recovery.recover_attempt,
    "request_cancel": cmd_cancel.request_cancel,
    "cancellation_candidates": cmd_queries.cancellation_candidates,
    "converge_cancellation": cmd_cancel.converge_cancellation,
    "converge_cancellation_page": cmd_cancel.converge_cancellation_page,
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
