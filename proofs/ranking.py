"""Property 3: LIVE-1 (state-machines.md §10) by a ranking function.

Workers are silent: only system actions run — advance_time (every live lease expires, T*),
recover_attempt(k, evidence = not_running) and converge_cancellation for a cancelling Run,
advance_frontier for a Run without intent.

rank = 2·#leased + #live + #open StepRuns + [Run running]   (≥ 0)

* LIVE-1-rank: in every state satisfying the invariants whose Run is running with intent, one of
  these actions is enabled and strictly decreases the rank (so the drain terminates);
* LIVE-1-bound: once no lease is live, every recovery of an expired lease is enabled, removes
  exactly one leased lease and adds none, and with no leased lease left one converge terminalizes
  the Run with the reason's status: exactly a_R + 1 system commands (clause 1);
* LIVE-1-no-regress: no system action increases #leased or #live or removes the intent;
* LIVE-1-quiesce: a running Run without intent that is a frontier candidate is terminal or no
  longer a candidate after ONE advance_frontier, which is enabled; if every StepRun is terminal
  that advance terminalizes it (clause 2).

Clause 3 (page sweeps and cursors) is about the caller-held cursor, outside the one-workflow
encoding: covered by the model and stateful tests, not by Z3.
"""

from __future__ import annotations

import time
from typing import Any

import z3

from . import decode
from .encoding import B, E, Encoding, Sys
from .invariants import conjunction
from .results import PROVED, UNKNOWN, VIOLATED, Result, implication_solver
from .rules import Transition
from .transitions import Semantics


def rank(enc: Encoding, x: Sys) -> E:
    t = enc.t
    leased = z3.Sum([z3.If(enc.leased(s), 1, 0) for s in x.steps])
    live = z3.Sum([z3.If(enc.lease_is(s, "live"), 1, 0) for s in x.steps])
    open_steps = z3.Sum([z3.If(enc.step_in(s, t.TERMINAL_STEP), 0, 1) for s in x.steps])
    return 2 * leased + live + open_steps + z3.If(enc.running(x.run), 1, 0)


def count_leased(enc: Encoding, x: Sys) -> E:
    return z3.Sum([z3.If(enc.leased(s), 1, 0) for s in x.steps])


def count_live(enc: Encoding, x: Sys) -> E:
    return z3.Sum([z3.If(enc.lease_is(s, "live"), 1, 0) for s in x.steps])


def instantiate(t: Transition, values: dict[str, Any], enc: Encoding) -> tuple[B, Sys]:
    """The guard and post-state of a disjunct with concrete arguments substituted."""
    pairs = []
    for k, v in values.items():
        expr = t.args[k]
        if isinstance(v, bool):
            pairs.append((expr, z3.BoolVal(v)))
        elif isinstance(v, int):
            pairs.append((expr, z3.IntVal(v)))
        else:
            pairs.append((expr, enc.d.evidence(v)))
    guard = z3.substitute(t.guard, *pairs) if pairs else t.guard
    post = Sys(type(t.post.run)(**{f: _sub(getattr(t.post.run, f), pairs) for f in t.post.run.__dataclass_fields__}),
               tuple(type(s)(**{f: _sub(getattr(s, f), pairs) for f in s.__dataclass_fields__}) for s in t.post.steps))
    return guard, post


def _sub(e: Any, pairs: list[tuple[Any, Any]]) -> Any:
    return z3.substitute(e, *pairs) if pairs and isinstance(e, z3.ExprRef) else e


def system_actions(enc: Encoding, sem: Semantics, pre: Sys) -> list[tuple[str, dict[str, Any], B, Sys]]:
    """(name, args, guard, post) of every system action of the silent-worker continuation."""
    out: list[tuple[str, dict[str, Any], B, Sys]] = []
    tick = sem.advance_time(pre, "lv")
    g, post = instantiate(tick, {k: True for k in tick.args}, enc)
    out.append(("advance_time", {"expire": "all", "pass": "all"}, g, post))
    rec = sem.recover_attempt(pre, "lv")
    for k in range(enc.n):
        g, post = instantiate(rec, {"step": k, "evidence": "not_running"}, enc)
        out.append(("recover_attempt", {"step": k, "evidence": "not_running"}, g, post))
    conv = sem.converge_cancellation(pre, "lv")
    out.append(("converge_cancellation", {}, conv.guard, conv.post))
    front = sem.advance_frontier(pre, "lv")
    out.append(("advance_frontier", {}, front.guard, front.post))
    return out


def _result(name: str, n: int, start: float, s: z3.Solver, answer: z3.CheckSatResult, enc: Encoding, pre: Sys,
            detail: str, extra: Any = None) -> Result:
    res = Result(name, PROVED, n, time.perf_counter() - start, queries=1, detail=detail)
    if answer == z3.sat:
        m = s.model()
        res.result = VIOLATED
        res.counterexample = {"kind": "state satisfying every invariant where the property fails",
                              "state": decode.state(enc, m, pre)}
        if extra is not None:
            res.counterexample |= extra(m)
    elif answer == z3.unknown:
        res.result = UNKNOWN
    return res


def prove_rank(enc: Encoding, sem: Semantics) -> Result:
    start = time.perf_counter()
    pre = enc.fresh("lr")
    r0 = rank(enc, pre)
    decreasing = [z3.And(g, rank(enc, post) < r0, enc.intent(post.run))
                  for name, _, g, post in system_actions(enc, sem, pre) if name != "advance_frontier"]
    s = implication_solver()
    s.add(conjunction(sem, pre), enc.running(pre.run), enc.intent(pre.run), r0 >= 0, z3.Not(z3.Or(decreasing)))
    answer = s.check()
    return _result("LIVE-1-rank", enc.n, start, s, answer, enc, pre,
                   "cancelling Run: some system action is enabled and decreases 2·leased + live + open + running",
                   lambda m: {"rank": m.eval(r0).as_long()})


def prove_bound(enc: Encoding, sem: Semantics) -> Result:
    start = time.perf_counter()
    pre = enc.fresh("lb")
    acts = system_actions(enc, sem, pre)
    leased0 = count_leased(enc, pre)
    obligations = []
    for name, args, g, post in acts:
        if name == "recover_attempt":
            s_k = pre.steps[args["step"]]
            target = z3.And(enc.att_in(s_k, enc.t.ACTIVE_ATTEMPT), enc.lease_is(s_k, "expired"))
            obligations.append(z3.Implies(target, z3.And(g, count_leased(enc, post) == leased0 - 1,
                                                          count_live(enc, post) == 0, enc.running(post.run),
                                                          enc.intent(post.run))))
        if name == "converge_cancellation":
            target_status = sem.reason_target(pre.run, "run_status", "status")
            obligations.append(z3.Implies(leased0 == 0, z3.And(g, post.run.rs == target_status,
                                                               z3.Not(enc.running(post.run)))))
    s = implication_solver()
    s.add(conjunction(sem, pre), enc.running(pre.run), enc.intent(pre.run), count_live(enc, pre) == 0,
          z3.Not(z3.And(obligations)))
    answer = s.check()
    return _result("LIVE-1-bound", enc.n, start, s, answer, enc, pre,
                   "after T*: a_R recoveries (any order) then one converge terminalize the cancelling Run")


def prove_no_regress(enc: Encoding, sem: Semantics) -> Result:
    start = time.perf_counter()
    pre = enc.fresh("ln")
    bad = []
    for _, _, g, post in system_actions(enc, sem, pre):
        bad.append(z3.And(g, z3.Or(count_leased(enc, post) > count_leased(enc, pre),
                                   count_live(enc, post) > count_live(enc, pre),
                                   z3.And(enc.intent(pre.run), z3.Not(enc.intent(post.run))))))
    s = implication_solver()
    s.add(conjunction(sem, pre), z3.Or(bad))
    answer = s.check()
    return _result("LIVE-1-no-regress", enc.n, start, s, answer, enc, pre,
                   "system actions never create leased/live leases or drop the intent")


def prove_quiesce(enc: Encoding, sem: Semantics) -> Result:
    start = time.perf_counter()
    pre = enc.fresh("lq")
    front = sem.advance_frontier(pre, "lq")
    plan_pre = sem.frontier_plan(pre)
    plan_post = sem.frontier_plan(front.post)
    all_terminal = z3.And([enc.step_in(s, enc.t.TERMINAL_STEP) for s in pre.steps])
    quiet = z3.And(front.guard, z3.Or(z3.Not(enc.running(front.post.run)), z3.Not(plan_post.candidate)),
                   z3.Implies(all_terminal, z3.Not(enc.running(front.post.run))))
    s = implication_solver()
    s.add(conjunction(sem, pre), enc.running(pre.run), z3.Not(enc.intent(pre.run)), plan_pre.candidate,
          z3.Not(quiet))
    answer = s.check()
    return _result("LIVE-1-quiesce", enc.n, start, s, answer, enc, pre,
                   "Run without intent: one advance_frontier makes it terminal or no longer a candidate",
                   lambda m: {"afterOneAdvance": decode.state(enc, m, front.post)})

