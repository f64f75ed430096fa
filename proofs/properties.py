"""Property 1: every encoded invariant (and lemma) is inductive; two-state table conformance.

Init ⇒ I_k for every conjunct, and Inv ∧ guard_c ⇒ I_k(post_c) for every conjunct k and command c,
where Inv is the conjunction of ALL conjuncts (so the conjunction is inductive and each conjunct
holds in every reachable state). The two-state properties are Inv ∧ guard_c ⇒ P(pre, post_c, c).

The queries come in independent batches (Init, and one solver per command) so that the runner can
spread them over processes; `merge_answers` folds the batches into Results exactly as one
sequential pass over Init and then COMMANDS would (`prove_invariants` is that pass).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any

import z3

from . import decode
from .encoding import Encoding, Sys
from .invariants import INVARIANTS, conjunction
from .moves import STEP_PROPERTIES
from .results import PROVED, UNKNOWN, VIOLATED, Result, implication_solver
from .rules import Transition
from .transitions import COMMANDS, Semantics

VACUITY = "INV-nonvacuous"


def selected(name: str, only: list[str] | None) -> bool:
    """fnmatch patterns; a pattern starting with `!` excludes (e.g. ['!BMC-*'] = everything but BMC)."""
    if only is None:
        return True
    include = [p for p in only if not p.startswith("!")]
    exclude = [p[1:] for p in only if p.startswith("!")]
    return (not include or any(fnmatch.fnmatchcase(name, p) for p in include)) and \
        not any(fnmatch.fnmatchcase(name, p) for p in exclude)


def cti(enc: Encoding, model: z3.ModelRef, pre: Sys, t: Transition) -> dict[str, Any]:
    """A counterexample to induction as a one-step trace."""
    a, b = decode.state(enc, model, pre), decode.state(enc, model, t.post)
    return {"kind": "counterexample to induction (a state satisfying every invariant, one step)",
            "trace": [{"step": 1, "command": t.name, "args": decode.args(enc, model, t.args), "pre": a, "post": b}],
            "changed": decode.diff(a, b)}


@dataclass
class Answer:
    """The solver's answer to one query of one property: `sat`, `unsat` or `unknown` (for
    INV-nonvacuous `sat` is the good answer), with the counterexample decoded where it is sat."""

    name: str
    answer: str
    seconds: float
    counterexample: Any = None
    reason: str = ""


def inductive_names(only: list[str] | None) -> list[str]:
    """The inductive properties `only` selects, in report order."""
    return [n for n in (*(i.name for i in INVARIANTS), *(p.name for p in STEP_PROPERTIES)) if selected(n, only)]


def _ask(s: z3.Solver, name: str, negated: z3.BoolRef, on_sat: Callable[[z3.ModelRef], Any]) -> Answer:
    start = time.perf_counter()
    s.push()
    s.add(negated)
    answer = s.check()
    out = Answer(name, str(answer), 0.0)
    if answer == z3.sat:
        out.counterexample = on_sat(s.model())
    elif answer == z3.unknown:
        out.reason = s.reason_unknown()
    s.pop()
    out.seconds = time.perf_counter() - start
    return out


def init_answers(enc: Encoding, sem: Semantics, names: Collection[str], timeout_ms: int | None = None
                 ) -> list[Answer]:
    """Init ⇒ I_k for every named invariant (one solver, one query each)."""
    init = enc.fresh("init")
    s = _solver(timeout_ms)
    s.add(enc.init(init))
    return [_ask(s, inv.name, z3.Not(inv.fn(sem, init)),
                 lambda m: {"kind": "Init violates it", "init": decode.state(enc, m, init)})
            for inv in INVARIANTS if inv.name in names]


def hypothesis(enc: Encoding, sem: Semantics) -> tuple[Sys, z3.BoolRef]:
    """The pre-state of the inductive step and Inv over it (built once, shared by every command)."""
    pre = enc.fresh("pre")
    return pre, conjunction(sem, pre)


def command_answers(enc: Encoding, sem: Semantics, command: str, names: Collection[str],
                    timeout_ms: int | None = None, hyp: tuple[Sys, z3.BoolRef] | None = None) -> list[Answer]:
    """Inv ∧ guard_c ⇒ P(post_c) for every named property, and first the non-vacuity of the command
    (answer `sat`: some state satisfying Inv is changed by it). One solver per command, used
    incrementally: the queries share its set-up (the hypothesis and the guard), and unlike the BMC
    queries these are faster incremental than each in a fresh solver (measured at N = 16)."""
    pre, inv = hyp or hypothesis(enc, sem)
    t: Transition = getattr(sem, command)(pre, "t")
    s = _solver(timeout_ms)
    s.add(inv, t.guard)
    # non-vacuity first: it also pays the solver's set-up for the queries below
    start = time.perf_counter()
    s.push()
    s.add(z3.Not(enc.equal(pre, t.post)))
    answer = s.check()
    s.pop()
    out = [Answer(VACUITY, str(answer), time.perf_counter() - start, reason=command)]
    on_sat = partial(cti, enc, pre=pre, t=t)
    out += [_ask(s, inv.name, z3.Not(inv.fn(sem, t.post)), on_sat) for inv in INVARIANTS if inv.name in names]
    out += [_ask(s, prop.name, z3.Not(prop.fn(sem, pre, t.post, command)), on_sat)
            for prop in STEP_PROPERTIES if prop.name in names]
    return out


def merge_answers(n: int, names: list[str], batches: list[list[Answer]], vacuity: bool) -> list[Result]:
    """The Results of `names` (and INV-nonvacuous if `vacuity`) from the answers of the Init batch and
    the command batches in COMMANDS order: the first violating query gives the counterexample, the
    first unknown the detail, and a command that changes nothing fails INV-nonvacuous."""
    results = {name: Result(name, PROVED, n, 0.0) for name in names}
    vacuous = Result(VACUITY, PROVED, n, 0.0, detail="every command changes some state satisfying Inv")
    for batch in batches:
        for a in batch:
            if a.name == VACUITY:
                vacuous.queries += 1
                vacuous.seconds += a.seconds
                if a.answer != "sat":
                    vacuous.result = VIOLATED if a.answer == "unsat" else UNKNOWN
                    vacuous.detail = f"no state satisfying the invariants lets {a.reason} change anything"
                continue
            res = results.get(a.name)
            if res is None:  # answered for another consumer (the BMC's induction), not reported
                continue
            res.queries += 1
            res.seconds += a.seconds
            if a.answer == "sat" and res.result != VIOLATED:
                res.result = VIOLATED
                res.counterexample = a.counterexample
            elif a.answer == "unknown" and res.result == PROVED:
                res.result = UNKNOWN
                res.detail = a.reason
    lemmas = {i.name: i.lemma for i in INVARIANTS}
    for name, res in results.items():
        if name in lemmas:
            res.detail = res.detail or ("lemma" if lemmas[name] else "invariant")
    return [*results.values(), *([vacuous] if vacuity else [])]


def all_inductive(batches: list[list[Answer]]) -> bool:
    """Init ⇒ every INVARIANTS conjunct (lemmas included), and every command preserves each of them
    under their conjunction: unsat everywhere, so they hold in every reachable state."""
    wanted = {i.name for i in INVARIANTS}
    if len(batches) != 1 + len(COMMANDS):
        return False
    for batch in batches:
        answered = {a.name: a.answer for a in batch if a.name in wanted}
        if set(answered) != wanted or any(v != "unsat" for v in answered.values()):
            return False
    return True


def prove_invariants(enc: Encoding, sem: Semantics, only: list[str] | None = None,
                     timeout_ms: int | None = None) -> list[Result]:
    names = inductive_names(only)
    vacuity = selected(VACUITY, only)
    if not names and not vacuity:
        return []
    hyp = hypothesis(enc, sem)
    batches = [init_answers(enc, sem, names, timeout_ms)]
    batches += [command_answers(enc, sem, command, names, timeout_ms, hyp) for command in COMMANDS]
    return merge_answers(enc.n, names, batches, vacuity)


def _solver(timeout_ms: int | None) -> z3.Solver:
    return implication_solver(timeout_ms)

