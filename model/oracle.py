"""The specification oracle: the pure resolutions by name, with optional rule explanations.

`consult(fn, input)` answers "what must happen here?" for one ql3 snapshot. Input and output are
exactly the ql3 contract objects of the spec; explanations are returned separately so the
resolution itself stays byte-identical to the contract. Each explanation starts with the id of the
rule-table row that decided its subject, as the model's commands fire it (model/rules.py `explained`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from . import tables as T
from .admission import create_admission_bundle
from .attempts import build_task_attempt_admission
from .attempts_ql3 import build_ql3_task_attempt_admission, is_ql3_admission_input
from .cancellation import resolve_cancellation
from .errors import Invalid
from .frontier import resolve_frontier
from .records import Record
from .recovery import RECOVERY_FIT, build_task_recovery
from .rules import explained
from .steprun import transition_step_run_mutation
from .values import is_object

ORACLE_REQUEST_INVALID = "QLWF_ORACLE_REQUEST_INVALID"


class Answer(NamedTuple):
    resolution: Record
    explanation: dict[str, str]


def _frontier(inp: Any) -> Answer:
    explain: dict[str, str] = {}
    return Answer(resolve_frontier(inp, explain=explain), explain)


def _cancel(inp: Any) -> Answer:
    explain: dict[str, str] = {}
    return Answer(resolve_cancellation(inp, explain=explain), explain)


def _recover(inp: Any) -> Answer:
    res = build_task_recovery(inp)
    a = inp["attempt"]
    fit = RECOVERY_FIT[(inp["reason"], a["status"])]
    why = f"{inp['reason']} for a {a['status']} attempt, StepRun at its {fit.replace('_', ' ')}"
    attempt_row = T.attempt_row("recover_attempt", a["status"], "lost").id
    step_rows = tuple(T.step_row("recover_attempt", m["previousStatus"], m["stepRun"]["status"]).id
                      for m in res["stepMutations"])
    explain = {a["id"]: explained(attempt_row, f"{why} -> attempt lost"),
               inp["stepRun"]["id"]: explained(step_rows, f"{why} -> StepRun {res['disposition']}")}
    return Answer(res, explain)


def _admit_attempt(inp: Any) -> Answer:
    """Both input forms: the §3 binding, or ql3's evidence (task-attempts.md §3A), told apart by their keys."""
    ql3 = is_ql3_admission_input(inp)
    res = build_ql3_task_attempt_admission(inp) if ql3 else build_task_attempt_admission(inp)
    s, r = inp["stepRun"], res["receipt"]
    why = f"StepRun {s['id']} ready at epoch v{s['version']}, attempt number {res['attempt']['attempt']}"
    if ql3:
        why += (f"; binding derived from reconciliation item {r['taskId']} ({r['taskRevision']}) "
                f"and the {r['executorType']} execution revision {r['executionDigest'][:12]}…")
    return Answer(res, {res["attempt"]["id"]: explained(T.attempt_row("admit_task_attempt", None, "claimed").id, why)})


def _admit_workflow(inp: Any) -> Answer:
    bundle = create_admission_bundle(inp)
    explain = {m["stepRun"]["id"]: explained(T.step_row("admit_workflow", None, m["stepRun"]["status"]).id,
                                             "no needs" if m["stepRun"]["status"] == "ready" else "waits for its needs")
               for m in bundle["stepMutations"]}
    return Answer(bundle, explain)


def _step_transition(inp: Any) -> Answer:
    # The oracle's own request shape for state-machines.md §3.3's three arguments (decisions Q-4).
    if not is_object(inp) or set(inp) != {"current", "command", "context"}:
        raise Invalid(T.FAMILIES["step_run"].invalid or "", "step_run_invalid",
                      "step-transition input must be exactly {current, command, context}")
    m = transition_step_run_mutation(inp["current"], inp["command"], inp["context"])
    # a transition by itself, outside any command: no performer row decides it, the graph allows it
    why = f"step transition {m['previousStatus']} -> {m['stepRun']['status']} (state-machines.md §3.1 allows it)"
    return Answer(m, {m["stepRun"]["id"]: explained((), why)})


FUNCTIONS: dict[str, Callable[[Any], Answer]] = {
    "frontier": _frontier,
    "cancel": _cancel,
    "recover": _recover,
    "admit-attempt": _admit_attempt,
    "admit-workflow": _admit_workflow,
    "step-transition": _step_transition,
}


def consult(fn: str, inp: Any) -> Answer:
    """Resolve `inp` with the pure function `fn`; raises the model's typed errors."""
    if not isinstance(fn, str):  # checked first: an unhashable fn would make the lookup raise TypeError
        raise Invalid(ORACLE_REQUEST_INVALID, "unknown_function",
                      f"an oracle function is named by a string, not {type(fn).__name__}")
    if fn not in FUNCTIONS:
        raise Invalid(ORACLE_REQUEST_INVALID, "unknown_function", f"unknown oracle function {fn!r}")
    return FUNCTIONS[fn](inp)
