"""Property 5: bounded model checking from Init, and replayable counterexample traces.

Every property of this package is proved inductively; BMC adds (a) a lemma-free confirmation that
the INV-n hold on every path of ≤ k steps, (b) non-vacuity: every command changes the state on
some path of ≤ k steps, and (c) for a refuted property (mutants), a concrete trace from Init to a
violation, decoded step by step (symbolic command, arguments, pre and post states).

(a) grows about tenfold per step of depth (N = 16: depth 3 in about 20 s, depth 4 in over 2 min,
depth 6 in hours), so the runner checks it lemma-free up to `Options.lemma_free_depth` and settles
the deeper paths by induction when every INV-n and lemma was proved inductive in the same run
(then they hold on every path, of any length); otherwise it runs the lemma-free check to the full
depth, so a verdict never rests on a lemma that failed (runner.bmc_invariants).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from . import decode
from .encoding import B, E, Encoding, Sys
from .invariants import INVARIANTS
from .results import PROVED, UNKNOWN, VIOLATED, Result
from .rules import Transition
from .transitions import COMMANDS, Semantics


@dataclass
class Unrolling:
    """Init and k copies of the relation, as assertions. Each query gets a fresh solver over them:
    Z3 simplifies and eliminates a non-incremental problem first (the states are defined by
    equations), while an incremental solver (push/pop) searches the raw unrolling. Measured at
    N = 16: a depth-4 cover query takes 0.6 s fresh against 6–8 s incremental, and a depth-3
    invariant query 10–20 s against 19 s; the terms are built once and shared by the queries."""

    enc: Encoding
    sem: Semantics
    assertions: list[B]
    states: list[Sys]
    cmds: list[E]
    transitions: list[list[Transition]]

    def extend(self) -> None:
        t = len(self.states)
        x = self.enc.fresh(f"b{t}")
        rel, cmd, ts = self.sem.relation(self.states[-1], x, f"b{t}")
        self.assertions.append(rel)
        self.states.append(x)
        self.cmds.append(cmd)
        self.transitions.append(ts)

    def solver(self, *extra: B) -> z3.Solver:
        s = z3.Solver()
        s.add(*self.assertions, *extra)
        return s

    def trace(self, model: z3.ModelRef, upto: int | None = None) -> list[dict[str, Any]]:
        out = []
        last = len(self.states) - 1 if upto is None else upto
        for t in range(1, last + 1):
            k = model.eval(self.cmds[t - 1], model_completion=True).as_long()
            tr = self.transitions[t - 1][k]
            out.append({"step": t, "command": tr.name, "args": decode.args(self.enc, model, tr.args),
                        "pre": decode.state(self.enc, model, self.states[t - 1]),
                        "post": decode.state(self.enc, model, self.states[t])})
        return out


def unrolling(enc: Encoding, sem: Semantics) -> Unrolling:
    x0 = enc.fresh("b0")
    return Unrolling(enc, sem, [enc.init(x0)], [x0], [], [])


def search(enc: Encoding, sem: Semantics, depth: int, bad: Callable[[Unrolling], B]) -> dict[str, Any] | None:
    """Shortest trace from Init (≤ depth steps) whose last state(s) satisfy `bad`."""
    u = unrolling(enc, sem)
    for t in range(depth + 1):
        if t:
            u.extend()
        s = u.solver(bad(u))
        if s.check() == z3.sat:
            m = s.model()
            return {"kind": "replayable trace from Init", "dag": decode.dag(enc, m),
                    "init": decode.state(enc, m, u.states[0]), "trace": u.trace(m)}
    return None


def check_invariants(enc: Encoding, sem: Semantics, depth: int, first: int = 0, last: int | None = None) -> Result:
    """Every INV-n (without the lemmas) holds on every path of ≤ depth steps from Init; this call
    checks the paths of `first`..`last` steps (default all of 0..depth).

    Depth t is checked on paths whose earlier states satisfy the INV-n: the first violation of a
    shortest counterexample is always at its last state, so nothing is lost, and each depth is a
    query of its own (so the depths can be split between calls)."""
    start = time.perf_counter()
    last = depth if last is None else last
    invs = [i for i in INVARIANTS if not i.lemma]
    u = unrolling(enc, sem)
    res = Result("BMC-invariants", PROVED, depth, 0.0, detail=f"{len(invs)} INV-n, depth {depth}, N={enc.n}")
    earlier: list[B] = []
    for t in range(last + 1):
        if t:
            u.extend()
        holds = z3.And([i.fn(sem, u.states[-1]) for i in invs])
        if t >= first:
            s = u.solver(*earlier, z3.Not(holds))
            answer = s.check()
            res.queries += 1
            if answer == z3.sat:
                m = s.model()
                broken = [i.name for i in invs
                          if z3.is_false(m.eval(i.fn(sem, u.states[-1]), model_completion=True))]
                res.result = VIOLATED
                res.counterexample = {"kind": "replayable trace from Init", "violated": broken,
                                      "dag": decode.dag(enc, m), "trace": u.trace(m)}
                break
            if answer == z3.unknown:
                res.result = UNKNOWN
        earlier.append(holds)  # sound: a shortest violating path satisfies the INV-n before its last state
    res.seconds = time.perf_counter() - start
    return res


def join_invariants(head: Result, tail: Result) -> Result:
    """check_invariants over depths a..b then b+1..c as one check over a..c (a violation in the
    first part ends the check there; an unknown does not, as in a single call)."""
    if head.result == VIOLATED:
        return head
    result = head.result if head.result == UNKNOWN and tail.result != VIOLATED else tail.result
    return Result(head.name, result, tail.bound, head.seconds + tail.seconds, detail=tail.detail,
                  counterexample=tail.counterexample, queries=head.queries + tail.queries)


def check_cover(enc: Encoding, sem: Semantics, depth: int) -> Result:
    """Non-vacuity: every command changes the state on some path of ≤ depth steps from Init.

    `firstDepth` is each command's least such depth: at depth t every still-missing command that
    is effective at step t is found (one query each), then one query shows no other is."""
    start = time.perf_counter()
    u = unrolling(enc, sem)
    missing = set(COMMANDS)
    witnesses: dict[str, int] = {}
    queries = 0
    for t in range(1, depth + 1):
        u.extend()
        pre, post, cmd = u.states[-2], u.states[-1], u.cmds[-1]
        changed = z3.Not(enc.equal(pre, post))
        while missing:  # one query finds some still-missing command effective at this depth
            s = u.solver(changed, z3.Or([cmd == COMMANDS.index(name) for name in sorted(missing)]))
            answer = s.check()
            queries += 1
            name = COMMANDS[s.model().eval(cmd).as_long()] if answer == z3.sat else None
            if name is None:
                break
            witnesses[name] = t
            missing.discard(name)
        if not missing:
            break
    # reported by depth, then in COMMANDS order (the order the solver happened to find them is noise)
    witnesses = dict(sorted(witnesses.items(), key=lambda kv: (kv[1], COMMANDS.index(kv[0]))))
    res = Result("BMC-cover", PROVED if not missing else VIOLATED, depth, time.perf_counter() - start,
                 queries=queries, extra={"firstDepth": witnesses})
    res.detail = (f"first effective depth per command: {witnesses}" if not missing
                  else f"never effective: {sorted(missing)}")
    return res
