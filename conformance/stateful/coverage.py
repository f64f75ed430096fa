"""Coverage witnesses: which rule-table rows a campaign reached (README §7, model/rules.py).

The rows, their ids and the rows declared unreachable (with the spec clause that makes them so) are
the model's one registry, qlwf.model.rules; a witness is a row id the model reported in
`Outcome.rules`, or a command outcome of the catalogue (commands.md §3).
"""

from __future__ import annotations

from typing import Any

from qlwf.model import rules
from qlwf.model import tables as T
from qlwf.model.state import State

UNREACHABLE = rules.UNREACHABLE


def all_rows() -> dict[str, str]:
    """rule id -> the table it belongs to."""
    return rules.registry()


def outcome_rows() -> set[str]:
    """Every outcome of the command catalogue (commands.md §3)."""
    return {f"outcome:{c}.{o}" for c, outcomes in T.COMMAND_OUTCOMES.items() for o in outcomes}


def witnesses(before: State, step: dict[str, Any], fired: tuple[str, ...] | list[str],
              result: dict[str, Any] | None) -> set[str]:
    """Every row witness (and the command outcome) shown by one committed command."""
    del before  # the model reports every row it read, the convergence StepRun rows included
    outcome = f"outcome:{step.get('name')}.{(result or {}).get('status', 'page')}"
    return {*fired, outcome}
