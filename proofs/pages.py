"""Convergence page bounds (cancellation.md §8) over pages of symbolic per-workflow outcomes.

The counters follow `qlwf.model.cancellation.accumulate_page` (settledRuns = #terminal,
settledAttempts = Σ settledAttempts, blocked = #blocked|locked|failed, scanned = #outcomes) and the
per-outcome values follow `page_outcome` (locked / raced / failed carry 0 settled attempts;
terminal / blocked carry the converge result, at most one settled attempt per StepRun). The
cross-check evaluates the same encoding on every concrete page the model produces and compares it
with `accumulate_page`.
"""

from __future__ import annotations

from typing import Any

import z3

from .domains import dom
from .encoding import Encoding
from .invariants import conjunction
from .results import PROVED, Clock, Result, verdict
from .tables_view import Tables
from .transitions import Semantics

OUTCOME = dom("PageOutcome", ("terminal", "blocked", "locked", "raced", "failed"))
BLOCKING_OUTCOMES = ("blocked", "locked", "failed")


def counters(statuses: list[Any], settled: list[Any], included: list[Any]) -> tuple[Any, Any, Any, Any]:
    """(scanned, settledRuns, settledAttempts, blocked) of a page, as Z3 integer expressions."""
    one = [z3.If(inc, 1, 0) for inc in included]
    scanned = z3.Sum(one) if one else z3.IntVal(0)
    runs = z3.Sum([z3.If(z3.And(inc, st == OUTCOME("terminal")), 1, 0)
                   for st, inc in zip(statuses, included, strict=True)]
                  or [z3.IntVal(0)])
    attempts = z3.Sum([z3.If(inc, n, 0) for n, inc in zip(settled, included, strict=True)] or [z3.IntVal(0)])
    blocked = z3.Sum([z3.If(z3.And(inc, OUTCOME.isin(st, BLOCKING_OUTCOMES)), 1, 0)
                      for st, inc in zip(statuses, included, strict=True)] or [z3.IntVal(0)])
    return scanned, runs, attempts, blocked


def concrete_counters(outcomes: list[dict[str, Any]]) -> tuple[int, int, int, int]:
    """The page encoding evaluated on concrete outcomes (used by the cross-check)."""
    exprs = counters([OUTCOME(o["status"]) for o in outcomes], [z3.IntVal(o["settledAttempts"]) for o in outcomes],
                     [z3.BoolVal(True)] * len(outcomes))
    scanned, runs, attempts, blocked = (int(z3.simplify(e).as_long()) for e in exprs)
    return scanned, runs, attempts, blocked


def bounds(limit: Any, scanned: Any, runs: Any, attempts: Any, blocked: Any, per_run_max: int) -> Any:
    return z3.And(scanned >= 0, scanned <= limit, runs >= 0, runs <= scanned, attempts >= 0,
                  attempts <= scanned * per_run_max, blocked >= 0, blocked <= scanned - runs)


def _outcome_ok(st: Any, n: Any, t: Tables) -> Any:
    """page_outcome: terminal / blocked carry the converge count, the other outcomes 0."""
    return z3.If(OUTCOME.isin(st, ("terminal", "blocked")), z3.And(n >= 0, n <= t.MAX_STEP_RUNS_PER_RUN), n == 0)


def prove_page_bounds(t: Tables | None = None, slots: int = 8) -> Result:
    """The page-result bounds for pages of ANY length ≤ limit (induction on the number of processed
    outcomes, as accumulate_page folds them), plus a direct check of the summed counters on every
    page of ≤ `slots` symbolic outcomes and every limit 1..128."""
    t = t or Tables.model()
    clock = Clock()
    per = t.MAX_STEP_RUNS_PER_RUN
    # induction: the empty page satisfies the bounds; appending one outcome preserves them
    sc, ru, at, bl, limit = z3.Ints("scanned settledRuns settledAttempts blocked limit")
    st, n = OUTCOME.var("outcome"), z3.Int("n")
    inv = bounds(limit, sc, ru, at, bl, per)
    step = bounds(limit, sc + 1, ru + z3.If(st == OUTCOME("terminal"), 1, 0), at + n,
                  bl + z3.If(OUTCOME.isin(st, BLOCKING_OUTCOMES), 1, 0), per)
    s = z3.Solver()
    s.add(z3.Or(z3.And(limit >= 1, limit <= t.MAX_CANCELLATION_PAGE, z3.Not(bounds(limit, 0, 0, 0, 0, per))),
                z3.And(inv, sc + 1 <= limit, _outcome_ok(st, n, t), z3.Not(step))))
    answer = s.check()
    res = Result("PAGE-bounds", verdict(answer), slots, 0.0, queries=2)
    if answer == z3.sat:
        m = s.model()
        res.counterexample = {"kind": "page accumulator step breaking a bound",
                              "before": {k: m.eval(v, model_completion=True).as_long()
                                         for k, v in (("scanned", sc), ("settledRuns", ru), ("settledAttempts", at),
                                                      ("blocked", bl), ("limit", limit))},
                              "outcome": OUTCOME.decode(m.eval(st, model_completion=True)),
                              "settledAttempts": m.eval(n, model_completion=True).as_long()}
        res.seconds = clock.seconds()
        return res
    # direct: the summed counters of the cross-checked encoding on explicit pages
    statuses = [OUTCOME.var(f"out{k}") for k in range(slots)]
    settled = [z3.Int(f"settled{k}") for k in range(slots)]
    count = z3.Int("count")
    s = z3.Solver()
    s.add(limit >= 1, limit <= t.MAX_CANCELLATION_PAGE, count >= 0, count <= slots, count <= limit,
          *[_outcome_ok(x, y, t) for x, y in zip(statuses, settled, strict=True)])
    s.add(z3.Not(bounds(limit, *counters(statuses, settled, [k < count for k in range(slots)]), per)))
    answer = s.check()
    res.result = verdict(answer)
    res.seconds = clock.seconds()
    if answer == z3.sat:
        m = s.model()
        res.counterexample = {"kind": "explicit page breaking a bound", "limit": m.eval(limit).as_long(),
                              "outcomes": [{"status": OUTCOME.decode(m.eval(statuses[k], model_completion=True)),
                                            "settledAttempts": m.eval(settled[k], model_completion=True).as_long()}
                                           for k in range(m.eval(count).as_long())]}
    return res


def prove_settled_per_run(enc: Encoding, sem: Semantics) -> Result:
    """A converge settles at most one attempt per StepRun (≤ N ≤ MAX_STEP_RUNS_PER_RUN) and answers
    `terminal` iff it terminalizes: the per-outcome facts the page proof assumes."""
    clock = Clock()
    pre = enc.fresh("pg")
    _, _, blocks, _, _, a, _ = sem.converge_plan(pre)
    t = sem.converge_cancellation(pre, "pg")
    s = z3.Solver()
    s.add(conjunction(sem, pre), t.guard, enc.running(pre.run))
    claim = z3.And(a >= 0, a <= enc.n, z3.BoolVal(enc.n <= enc.t.MAX_STEP_RUNS_PER_RUN),
                   t.facts["terminal"] == z3.Not(z3.Or(blocks)),
                   t.facts["terminal"] == z3.Not(enc.running(t.post.run)))
    s.add(z3.Not(claim))
    answer = s.check()
    return Result("PAGE-settled-per-run", verdict(answer), enc.n, clock.seconds(), queries=1,
                  detail="" if verdict(answer) == PROVED else "a converge settles more than N attempts")
