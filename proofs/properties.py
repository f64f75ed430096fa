"""Property 1: every encoded invariant (and lemma) is inductive; two-state table conformance.

Init ⇒ I_k for every conjunct, and Inv ∧ guard_c ⇒ I_k(post_c) for every conjunct k and command c,
where Inv is the conjunction of ALL conjuncts (so the conjunction is inductive and each conjunct
holds in every reachable state). The two-state properties are Inv ∧ guard_c ⇒ P(pre, post_c, c).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import z3

from . import decode
from .encoding import Encoding, Sys
from .invariants import INVARIANTS, conjunction
from .moves import STEP_PROPERTIES
from .results import PROVED, UNKNOWN, VIOLATED, Result
from .rules import Transition
from .transitions import COMMANDS, Semantics


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


def prove_invariants(enc: Encoding, sem: Semantics, only: list[str] | None = None,
                     timeout_ms: int | None = None) -> list[Result]:
    invs = [i for i in INVARIANTS if selected(i.name, only)]
    steps = [p for p in STEP_PROPERTIES if selected(p.name, only)]
    if not invs and not steps and not selected("INV-nonvacuous", only):
        return []
    names = [*(i.name for i in invs), *(p.name for p in steps)]
    results = {name: Result(name, PROVED, enc.n, 0.0) for name in names}

    def run(s: z3.Solver, name: str, negated: z3.BoolRef, on_sat: Callable[[z3.ModelRef], Any]) -> None:
        res = results[name]
        start = time.perf_counter()
        s.push()
        s.add(negated)
        answer = s.check()
        res.queries += 1
        if answer == z3.sat and res.result != VIOLATED:
            res.result = VIOLATED
            res.counterexample = on_sat(s.model())
        elif answer == z3.unknown and res.result == PROVED:
            res.result = UNKNOWN
            res.detail = s.reason_unknown()
        s.pop()
        res.seconds += time.perf_counter() - start

    init = enc.fresh("init")
    s = _solver(timeout_ms)
    s.add(enc.init(init))
    for inv in invs:
        run(s, inv.name, z3.Not(inv.fn(sem, init)),
            lambda m: {"kind": "Init violates it", "init": decode.state(enc, m, init)})
    pre = enc.fresh("pre")
    hypothesis = conjunction(sem, pre)
    vacuous = Result("INV-nonvacuous", PROVED, enc.n, 0.0, detail="every command changes some state satisfying Inv")
    for command in COMMANDS:
        t: Transition = getattr(sem, command)(pre, "t")
        s = _solver(timeout_ms)
        s.add(hypothesis, t.guard)
        # non-vacuity first: it also pays the solver's set-up for the queries below
        start = time.perf_counter()
        s.push()
        s.add(z3.Not(enc.equal(pre, t.post)))
        answer = s.check()
        s.pop()
        vacuous.queries += 1
        vacuous.seconds += time.perf_counter() - start
        if answer != z3.sat:
            vacuous.result = VIOLATED if answer == z3.unsat else UNKNOWN
            vacuous.detail = f"no state satisfying the invariants lets {command} change anything"
        for inv in invs:
            run(s, inv.name, z3.Not(inv.fn(sem, t.post)), partial(cti, enc, pre=pre, t=t))
        for prop in steps:
            run(s, prop.name, z3.Not(prop.fn(sem, pre, t.post, command)), partial(cti, enc, pre=pre, t=t))
    for inv in invs:
        results[inv.name].detail = results[inv.name].detail or ("lemma" if inv.lemma else "invariant")
    return [*results.values(), *([vacuous] if selected(vacuous.name, only) else [])]


def _solver(timeout_ms: int | None) -> z3.Solver:
    s = z3.Solver()
    if timeout_ms:
        s.set("timeout", timeout_ms)
    return s

