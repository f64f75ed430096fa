"""The one vocabulary of rules: every row of every rule table of model/tables.py by its stable id.

The model fires rules by row (`Outcome.rules` holds row ids); the coverage reports of the tests,
the explorer and conformance all read this registry: which rows exist, which v1 cannot reach (with
the spec clause that makes them unreachable), and so which rows a campaign must reach. An id that
names no row is an `UnknownRule`, at fire time and in this registry.
"""

from __future__ import annotations

from typing import Final

from . import tables as T
from .tables import UnknownRule

__all__ = ["NO_ROW", "UNREACHABLE", "UnknownRule", "explained", "explained_rows", "is_unreachable", "reachable",
           "registry", "require"]


def registry() -> dict[str, str]:
    """rule id -> the table it is a row of, read from the tables as they are now (a mutated table
    is its own registry)."""
    rows: dict[str, str] = {}
    rows |= {r.id: "RUN_TRANSITIONS" for r in T.RUN_TRANSITIONS}
    rows |= {r.id: "STEP_PERFORMERS" for r in T.STEP_PERFORMERS}
    rows |= {r.id: "ATTEMPT_TRANSITIONS" for r in T.ATTEMPT_TRANSITIONS}
    rows |= {r.id: "LEASE_TRANSITIONS" for r in T.LEASE_TRANSITIONS}
    rows |= {r.id: "COMPLETION_RULES" for r in T.COMPLETION_RULES}
    rows |= {T.cancel_attempt_id(a, ls): "CANCEL_ATTEMPT_TABLE" for a, ls in T.CANCEL_ATTEMPT_TABLE}
    rows |= {T.cancel_step_id(s, t): "CANCEL_STEP_TABLE" for s, t in T.CANCEL_STEP_TABLE}
    rows |= {d.id: "COMMAND_DECISIONS" for d in T.COMMAND_DECISIONS}
    return rows


_KNOWN: set[str] = set(registry())


def require(rule_id: str) -> str:
    """`rule_id` if it is a row of the tables, else UnknownRule."""
    if rule_id not in _KNOWN:
        _KNOWN.update(registry())  # a table changed since import (a test's mutant): read it again
        if rule_id not in _KNOWN:
            raise UnknownRule(f"no table has a row {rule_id!r}")
    return rule_id


# --- explanations (the oracle's --explain; resolve_frontier's and resolve_cancellation's `explain`) ---
# An explanation starts with the id of the table row that decided its subject (several, in the order
# they fired, when one decision moves it twice), then says why: "step:frontier.ready: every need
# succeeded". A decision no table row makes (the frontier leaving a step pending) starts with NO_ROW.
NO_ROW: Final = "no row"


def explained(rows: str | tuple[str, ...], why: str) -> str:
    """The explanation of a decision made by the table row(s) `rows` (() for none; UnknownRule for an
    id of no row)."""
    ids = (rows,) if isinstance(rows, str) else rows
    return f"{', '.join(require(r) for r in ids) if ids else NO_ROW}: {why}"


def explained_rows(explanation: str) -> tuple[str, ...]:
    """The row ids an explanation starts with (() for NO_ROW)."""
    head = explanation.split(": ", 1)[0]
    return () if head == NO_ROW else tuple(head.split(", "))


# --- rows no v1 command can reach, each with the clause that makes it so -------------------------
_NO_WAITING = "D-1 and INV-9: no v1 command creates waiting_approval"
_NO_LOST = ("INV-9 and state-machines.md §3.4: recovery writes running → lost → failed in one transaction, so no "
            "StepRun is lost after a commit")
_LEASED = ("INV-24 and state-machines.md §7: a starting or running attempt always holds its `leased` lease (fail_start "
           "and completion end the attempt in the transaction that completes the lease; recovery loses it)")
_RUNNING_STEP = ("state-machines.md §7 (s running ⇒ exactly one running attempt, which is blocked) and "
                 "cancellation.md §5: a running StepRun is always in the blocked set through its attempt before "
                 "the table is read")

UNREACHABLE: Final[dict[str, str]] = {
    "step:converge.waiting_cancelled": _NO_WAITING,
    "step:converge.waiting_timed_out": _NO_WAITING,
    "step:converge.lost_cancelled": _NO_LOST,
    "run:frontier.cancelled": ("D-3, D-5 and task-attempts.md §7: a StepRun becomes cancelled only under cancel intent "
                               "(completion/start-failure mapping or convergence), and a Run with intent is never "
                               "terminalized by the frontier, so AGG never yields cancelled for advance_frontier"),
    "cancel.attempt:claimed/completed": ("cancellation.md §5 ('not reachable in v1'): a lease is completed only by "
                                         "fail_start/complete_attempt, which end the attempt"),
    **{f"cancel.attempt:{a}/{ls}": _LEASED for a in ("starting", "running") for ls in (None, "released", "completed")},
    **{f"cancel.step:waiting_approval/{k}": _NO_WAITING for k in ("other", "timeout")},
    **{f"cancel.step:lost/{k}": _NO_LOST for k in ("other", "timeout")},
    **{f"cancel.step:running/{k}": _RUNNING_STEP for k in ("other", "timeout")},
}


def _check_unreachable() -> None:
    stale = sorted(set(UNREACHABLE) - set(registry()))
    if stale:
        raise UnknownRule(f"rows declared unreachable that no table has: {stale}")


_check_unreachable()


def is_unreachable(rule_id: str) -> bool:
    """True for a row declared unreachable in v1 (exact ids; UnknownRule for an id of no row)."""
    return require(rule_id) in UNREACHABLE


def reachable() -> tuple[str, ...]:
    """Every row a complete campaign must reach: all rows but the declared unreachable ones."""
    return tuple(r for r in registry() if r not in UNREACHABLE)
