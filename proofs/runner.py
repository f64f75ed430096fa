"""The proof runner used by `qlwf prove` and the tests.

`run(Options(bound=N))` builds the encoding of one workflow of N steps (optionally from a mutant's
tables / semantics) and evaluates every named property, or those matching `only` (fnmatch
patterns). Each property is a Result(name, proved | violated | unknown, bound, seconds). For a
violated property of a mutant, `explain=True` adds a replayable BMC trace from Init when the
property is about states or steps (table defects are explained by the failing rows).

`bound` is N (the number of workflow steps) for every workflow property and the number of steps N
of the AGG domain for TABLE-aggregate; BMC-* report their depth k, PAGE-bounds the number of
explicit outcome slots (its inductive half covers every page length).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from . import bmc, decode, pages, ranking, tables_check
from .encoding import B, Encoding
from .invariants import INVARIANTS
from .moves import STEP_PROPERTIES
from .mutants import BY_NAME, Mutant
from .properties import prove_invariants, selected
from .results import VIOLATED, Result
from .transitions import COMMANDS, Semantics

TABLE_PROPERTIES = ("TABLE-cancel-step", "TABLE-cancel-attempt", "TABLE-reason-target", "TABLE-aggregate",
                    "TABLE-completion", "TABLE-path-codes")
LIVE_PROPERTIES = ("LIVE-1-rank", "LIVE-1-bound", "LIVE-1-no-regress", "LIVE-1-quiesce")
PAGE_PROPERTIES = ("PAGE-bounds", "PAGE-settled-per-run")
BMC_PROPERTIES = ("BMC-invariants", "BMC-cover")
INDUCTIVE_PROPERTIES = tuple(i.name for i in INVARIANTS) + tuple(p.name for p in STEP_PROPERTIES)
ALL_PROPERTIES = (*INDUCTIVE_PROPERTIES, "INV-nonvacuous", *TABLE_PROPERTIES, *LIVE_PROPERTIES, *PAGE_PROPERTIES,
                  *BMC_PROPERTIES)


@dataclass
class Options:
    bound: int = 4
    depth: int = 4
    only: list[str] | None = None
    mutant: str | Mutant | None = None
    explain: bool = False
    explain_depth: int = 8
    page_slots: int = 8


def build(options: Options) -> tuple[Encoding, Semantics, Mutant | None]:
    mutant = BY_NAME[options.mutant] if isinstance(options.mutant, str) else options.mutant
    tables = mutant.build_tables() if mutant else None
    enc = Encoding(options.bound, tables)
    sem = (mutant.semantics if mutant else Semantics)(enc)
    return enc, sem, mutant


def run(options: Options) -> list[Result]:
    enc, sem, _ = build(options)
    only = options.only
    results: list[Result] = []
    results += prove_invariants(enc, sem, only)
    groups: list[tuple[tuple[str, ...], Callable[[], list[Result]]]] = [
        (TABLE_PROPERTIES, lambda: tables_check.check_tables(enc, sem)),
        (("LIVE-1-rank",), lambda: [ranking.prove_rank(enc, sem)]),
        (("LIVE-1-bound",), lambda: [ranking.prove_bound(enc, sem)]),
        (("LIVE-1-no-regress",), lambda: [ranking.prove_no_regress(enc, sem)]),
        (("LIVE-1-quiesce",), lambda: [ranking.prove_quiesce(enc, sem)]),
        (("PAGE-bounds",), lambda: [pages.prove_page_bounds(enc.t, options.page_slots)]),
        (("PAGE-settled-per-run",), lambda: [pages.prove_settled_per_run(enc, sem)]),
        (("BMC-invariants",), lambda: [bmc.check_invariants(enc, sem, options.depth)]),
        (("BMC-cover",), lambda: [bmc.check_cover(enc, sem, options.depth + 2)]),
    ]
    for names, fn in groups:
        if any(selected(n, only) for n in names):
            results += [r for r in fn() if selected(r.name, only)]
    if options.explain:
        for r in results:
            if r.result == VIOLATED:
                trace = explain(enc, sem, r.name, options.explain_depth)
                if trace is not None:
                    r.counterexample = (r.counterexample or {}) | {"replay": trace}
    order = {name: i for i, name in enumerate(ALL_PROPERTIES)}
    return sorted(results, key=lambda r: order.get(r.name, len(order)))


# ------------------------------------------------------------------------------------------------
def bad_predicate(enc: Encoding, sem: Semantics, name: str) -> Callable[[bmc.Unrolling], B] | None:
    """The violation of a property as a predicate on the end of a BMC unrolling."""
    inv = next((i for i in INVARIANTS if i.name == name), None)
    if inv is not None:
        return lambda u: z3.Not(inv.fn(sem, u.states[-1]))
    prop = next((p for p in STEP_PROPERTIES if p.name == name), None)
    if prop is not None:
        def step_bad(u: bmc.Unrolling) -> B:
            if len(u.states) < 2:
                return z3.BoolVal(False)
            pre, post, cmd = u.states[-2], u.states[-1], u.cmds[-1]
            return z3.Or([z3.And(cmd == COMMANDS.index(c), z3.Not(prop.fn(sem, pre, post, c))) for c in COMMANDS])
        return step_bad
    if name == "LIVE-1-rank":
        def stuck(u: bmc.Unrolling) -> B:
            x = u.states[-1]
            r0 = ranking.rank(enc, x)
            dec = [z3.And(g, ranking.rank(enc, post) < r0) for n, _, g, post in ranking.system_actions(enc, sem, x)
                   if n != "advance_frontier"]
            return z3.And(enc.running(x.run), enc.intent(x.run), z3.Not(z3.Or(dec)))
        return stuck
    if name == "LIVE-1-quiesce":
        def loud(u: bmc.Unrolling) -> B:  # the last step is the advance that fails to quiesce
            if len(u.states) < 2:
                return z3.BoolVal(False)
            pre, post = u.states[-2], u.states[-1]
            return z3.And(u.cmds[-1] == COMMANDS.index("advance_frontier"), enc.running(pre.run),
                          sem.frontier_plan(pre).candidate, enc.running(post.run), sem.frontier_plan(post).candidate)
        return loud
    return None


def explain(enc: Encoding, sem: Semantics, name: str, depth: int) -> dict[str, Any] | None:
    bad = bad_predicate(enc, sem, name)
    return bmc.search(enc, sem, depth, bad) if bad is not None else None


def replay(enc: Encoding, sem: Semantics, trace: dict[str, Any]) -> bool:
    """Re-check a decoded trace step by step: each command with its arguments maps pre to post."""
    needs = trace["dag"]
    fixed = [[j in needs[i] for j in range(i)] for i in range(enc.n)]
    s = z3.Solver()
    x0 = enc.fresh("r0")
    s.add(enc.need_of(fixed), enc.init(x0), decode.constraints(enc, x0, trace["init"]))
    if s.check() != z3.sat:
        return False
    for step in trace["trace"]:
        pre = enc.fresh(f"rp{step['step']}")
        t = getattr(sem, step["command"])(pre, f"rt{step['step']}")
        s = z3.Solver()
        s.add(enc.need_of(fixed), decode.constraints(enc, pre, step["pre"]), t.guard,
              decode.constraints(enc, t.post, step["post"]))
        for k, v in step["args"].items():
            expr = t.args[k]
            if isinstance(v, (bool, int)):
                s.add(expr == v)
            else:
                s.add(expr == next(d for d in vars(enc.d).values() if d.sort == expr.sort())(v))
        if s.check() != z3.sat:
            return False
    return True


@dataclass
class Refutation:
    mutant: Mutant
    violated: list[Result]
    trace: dict[str, Any] | None
    replayed: bool | None

    @property
    def refuted(self) -> bool:
        witnessed = self.mutant.witness is None or (self.trace is not None and bool(self.replayed))
        return bool(self.violated) and witnessed


def refute(mutant: str | Mutant, bound: int = 3, depth: int = 8) -> Refutation:
    """Run the mutant's refuting properties; for a state/step witness, find and replay a BMC trace."""
    options = Options(bound=bound, mutant=mutant)
    enc, sem, m = build(options)
    assert m is not None
    results = run(Options(bound=bound, mutant=m, only=list(m.refuted_by)))
    violated = [r for r in results if r.result == VIOLATED]
    trace = explain(enc, sem, m.witness, depth) if m.witness else None
    replayed = replay(enc, sem, trace) if trace is not None else None
    return Refutation(m, violated, trace, replayed)


def summary(results: list[Result]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.result] = counts.get(r.result, 0) + 1
    return {"properties": len(results), **counts, "seconds": round(sum(r.seconds for r in results), 3)}

