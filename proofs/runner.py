"""The proof runner used by `qlwf prove` and the tests.

`run(Options(bound=N))` builds the encoding of one workflow of N steps (optionally from a mutant's
tables / semantics) and evaluates every named property, or those matching `only` (fnmatch
patterns). Each property is a Result(name, proved | violated | unknown, bound, seconds). The work
is split into independent tasks (the inductive step per command, Init, each LIVE and PAGE
property, the tables, each BMC check) run on `Options.jobs` forked processes (parallel.py); the
results are merged in a fixed order, so they do not depend on the scheduling. For a
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

from . import bmc, decode, pages, parallel, properties, ranking, tables_check
from .encoding import B, Encoding
from .invariants import INVARIANTS
from .moves import STEP_PROPERTIES
from .mutants import BY_NAME, Mutant
from .properties import VACUITY, Answer, selected
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
    # worker processes for the independent proof tasks; None = every core (`qlwf prove --jobs`)
    jobs: int | None = None
    # BMC-invariants checks paths of up to this many steps lemma-free and the longer ones by induction
    # (see bmc_invariants); None = lemma-free to the full depth, as before issue 36
    lemma_free_depth: int | None = 3


def build(options: Options) -> tuple[Encoding, Semantics, Mutant | None]:
    mutant = BY_NAME[options.mutant] if isinstance(options.mutant, str) else options.mutant
    tables = mutant.build_tables() if mutant else None
    enc = Encoding(options.bound, tables)
    sem = (mutant.semantics if mutant else Semantics)(enc)
    return enc, sem, mutant


LIVE: dict[str, Callable[[Encoding, Semantics], Result]] = {
    "LIVE-1-rank": ranking.prove_rank, "LIVE-1-bound": ranking.prove_bound,
    "LIVE-1-no-regress": ranking.prove_no_regress, "LIVE-1-quiesce": ranking.prove_quiesce,
}
assert tuple(LIVE) == LIVE_PROPERTIES

Task = tuple[str, str]  # (kind, argument), e.g. ("step", "fail_start"): picklable, and names its work

# Tasks start longest first, so that the two cores finish together (CPU seconds at N = 16, depth 6:
# BMC-cover 13.8, BMC-invariants to depth 3 7.9, then the inductive step per command as below, 1.1–4.0
# each, LIVE-1 0.7–1.5 each; 56 s in all).
STEP_ORDER = ("complete_attempt", "converge_cancellation", "fail_start", "admit_task_attempt", "recover_attempt",
              "advance_frontier", "record_running", "release_lease", "start_attempt", "claim_lease", "renew_lease",
              "advance_time", "request_cancel")
assert sorted(STEP_ORDER) == sorted(COMMANDS)


def run(options: Options) -> list[Result]:
    enc, sem, _ = build(options)
    only = options.only
    names = properties.inductive_names(only)
    vacuity = selected(VACUITY, only)
    want_bmc = selected("BMC-invariants", only)
    lemma_free = options.depth if options.lemma_free_depth is None else min(options.lemma_free_depth, options.depth)
    by_induction = want_bmc and lemma_free < options.depth
    # the BMC's induction needs every INVARIANTS conjunct answered, reported or not
    asked = names + [i.name for i in INVARIANTS if by_induction and i.name not in names]
    inductive = bool(asked) or vacuity

    tasks: list[Task] = []
    if selected("BMC-cover", only):
        tasks.append(("cover", ""))
    if want_bmc:
        tasks.append(("bmc", ""))
    if inductive:
        tasks += [("step", c) for c in STEP_ORDER]
    tasks += [("live", n) for n in LIVE_PROPERTIES if selected(n, only)]
    if inductive:
        tasks.append(("init", ""))
    tasks += [("page", n) for n in PAGE_PROPERTIES if selected(n, only)]
    if any(selected(n, only) for n in TABLE_PROPERTIES):
        tasks.append(("tables", ""))

    hyp = properties.hypothesis(enc, sem) if inductive else None  # built before the fork: every step task inherits it

    def work(task: Task) -> Any:
        kind, arg = task
        if kind == "step":
            return properties.command_answers(enc, sem, arg, asked, hyp=hyp)
        if kind == "init":
            return properties.init_answers(enc, sem, asked)
        if kind == "bmc":
            return bmc.check_invariants(enc, sem, options.depth, 0, lemma_free)
        if kind == "cover":
            return bmc.check_cover(enc, sem, options.depth + 2)
        if kind == "live":
            return LIVE[arg](enc, sem)
        if kind == "page":
            return pages.prove_page_bounds(enc.t, options.page_slots) if arg == "PAGE-bounds" \
                else pages.prove_settled_per_run(enc, sem)
        if kind == "tables":
            return tables_check.check_tables(enc, sem)
        raise ValueError(f"unknown proof task {task}")

    jobs = parallel.default_jobs() if options.jobs is None else options.jobs
    done = dict(zip(tasks, parallel.ordered_map(work, tasks, jobs), strict=True))

    results: list[Result] = []
    batches: list[list[Answer]] = []
    if inductive:
        batches = [done[("init", "")], *(done[("step", c)] for c in COMMANDS)]
        results += properties.merge_answers(enc.n, names, batches, vacuity)
    for kind, arg in tasks:
        if kind in ("live", "page", "cover"):
            results.append(done[(kind, arg)])
        elif kind == "tables":
            results += [r for r in done[(kind, arg)] if selected(r.name, only)]
        elif kind == "bmc":
            res = bmc_invariants(enc, sem, options.depth, lemma_free, done[(kind, arg)],
                                 properties.all_inductive(batches) if by_induction else False)
            # queries asked for the induction alone (their properties not selected) are its cost
            reported = {*names, *([VACUITY] if vacuity else [])}
            res.seconds += sum(a.seconds for batch in batches for a in batch if a.name not in reported)
            results.append(res)
    if options.explain:
        for r in results:
            if r.result == VIOLATED:
                trace = explain(enc, sem, r.name, options.explain_depth)
                if trace is not None:
                    r.counterexample = (r.counterexample or {}) | {"replay": trace}
    order = {name: i for i, name in enumerate(ALL_PROPERTIES)}
    return sorted(results, key=lambda r: order.get(r.name, len(order)))


def bmc_invariants(enc: Encoding, sem: Semantics, depth: int, lemma_free: int, head: Result, inductive: bool
                   ) -> Result:
    """BMC-invariants from its lemma-free check of the paths of ≤ `lemma_free` steps (`head`).

    Longer paths: when every INVARIANTS conjunct (INV-n and lemmas) holds at Init and is preserved
    by every command under their conjunction (`inductive`, answered in this run), the conjunction
    holds in every reachable state, so every INV-n holds on every path of any length: the same
    statement as the lemma-free BMC's, proved for all depths. Otherwise (a mutant, an unknown) the
    lemma-free check goes on to the full depth, so the verdict is the lemma-free BMC's."""
    if lemma_free >= depth or head.result == VIOLATED:
        return head
    if inductive:
        head.detail += (f"; lemma-free to depth {lemma_free}, every depth by induction (every INV-n and lemma "
                        f"holds at Init and is preserved by all {len(COMMANDS)} commands)")
        return head
    return bmc.join_invariants(head, bmc.check_invariants(enc, sem, depth, lemma_free + 1))


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

