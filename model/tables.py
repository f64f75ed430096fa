"""Constants, status sets and every rule table of the spec, as data.

This module is the single source the model functions, the Z3 encodings, the documentation
generator and the coverage witnesses read (`from . import tables as T`). The rows live in one module
per spec document (../shared/spec/), all of them exported here:

| module | spec | what |
| --- | --- | --- |
| `tables_records.py` | records.md §2 | schema strings, domains, limits, enumerations, derived sets, fixed codes |
| `tables_state_machines.py` | state-machines.md §1–§5, §8 | AGG, the transitions, StepRun performers, codes by path |
| `tables_cancellation.py` | cancellation.md §4–§5 | reason mapping, the StepRun and attempt decision tables |
| `tables_task_attempts.py` | task-attempts.md §7 | the completion mapping |
| `tables_commands.py` | commands.md §2–§4 | error code families, command outcomes, query pages, command decisions |
| `tables_ql3_admission.py` | task-attempts.md §3A | ql3's admission input: schemas, limits, checks A1–A18 |

The lookups over the rows (first match wins, a row by its move, a rule id) are written here and
read the tables through this module's names, so a table replaced on `T` (a mutant, a test) is the
one every lookup reads.
"""

from __future__ import annotations

from typing import Any

from .tables_cancellation import *  # noqa: F403
from .tables_cancellation import CANCEL_ATTEMPT_TABLE, CANCEL_STEP_TABLE
from .tables_commands import *  # noqa: F403
from .tables_commands import COMMAND_DECISIONS, CommandDecision
from .tables_ql3_admission import *  # noqa: F403
from .tables_records import *  # noqa: F403
from .tables_records import TERMINAL_STEP
from .tables_state_machines import *  # noqa: F403
from .tables_state_machines import _STEP_GRAPH as _STEP_GRAPH  # the §3.1 graph as drawn (tests read it)
from .tables_state_machines import (
    AGG_PRECEDENCE,
    ATTEMPT_TRANSITIONS,
    LEASE_TRANSITIONS,
    RUN_TRANSITIONS,
    STEP_PERFORMERS,
    AttemptTransition,
    LeaseTransition,
    RunTransition,
    StepPerformer,
)
from .tables_task_attempts import *  # noqa: F403
from .tables_task_attempts import COMPLETION_RULES, CompletionRule


# --- state-machines.md §1 AGG ----------------------------------------------------------------------
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
    """A rule id, or a row key, that no table has: a bug at a fire site or in a registry, never input."""


def _by_move(rows: tuple[Any, ...], command: str, source: str | None, target: str) -> Any:
    """The row of `rows` for (command, source, target): the model fires rows, found by the move they make."""
    for row in rows:
        if row.command == command and row.source == source and row.target == target:
            return row
    raise UnknownRule(f"no row for {command}: {source} -> {target}")


def run_row(command: str, source: str | None, target: str) -> RunTransition:
    row: RunTransition = _by_move(RUN_TRANSITIONS, command, source, target)
    return row


def step_row(command: str, source: str | None, target: str) -> StepPerformer:
    row: StepPerformer = _by_move(STEP_PERFORMERS, command, source, target)
    return row


def attempt_row(command: str, source: str | None, target: str) -> AttemptTransition:
    row: AttemptTransition = _by_move(ATTEMPT_TRANSITIONS, command, source, target)
    return row


def lease_row(command: str, source: str | None, target: str) -> LeaseTransition:
    row: LeaseTransition = _by_move(LEASE_TRANSITIONS, command, source, target)
    return row


# --- cancellation.md §4–§5 -------------------------------------------------------------------------
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


# --- task-attempts.md §7 ---------------------------------------------------------------------------
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


# --- commands.md §4 --------------------------------------------------------------------------------
_DECISIONS_BY_RULE = {d.rule: d for d in COMMAND_DECISIONS}


def decision(rule: str) -> CommandDecision:
    """The COMMAND_DECISIONS row named `rule`."""
    try:
        return _DECISIONS_BY_RULE[rule]
    except KeyError:
        raise UnknownRule(f"COMMAND_DECISIONS has no row {rule!r}") from None
