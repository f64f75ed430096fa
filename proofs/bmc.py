"""Property 5: bounded model checking from Init, and replayable counterexample traces.

Every property of this package is proved inductively; BMC adds (a) a lemma-free confirmation that
the INV-n hold on every path of ≤ k steps, (b) non-vacuity: every command changes the state on
some path of ≤ k steps, and (c) for a refuted property (mutants), a concrete trace from Init to a
violation, decoded step by step (symbolic command, arguments, pre and post states).
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
    enc: Encoding
    sem: Semantics
    solver: z3.Solver
    states: list[Sys]
    cmds: list[E]
    transitions: list[list[Transition]]

    def extend(self) -> None:
        t = len(self.states)
        x = self.enc.fresh(f"b{t}")
        rel, cmd, ts = self.sem.relation(self.states[-1], x, f"b{t}")
        self.solver.add(rel)
        self.states.append(x)
        self.cmds.append(cmd)
        self.transitions.append(ts)

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
    s = z3.Solver()
    x0 = enc.fresh("b0")
    s.add(enc.init(x0))
    return Unrolling(enc, sem, s, [x0], [], [])


def search(enc: Encoding, sem: Semantics, depth: int, bad: Callable[[Unrolling], B]) -> dict[str, Any] | None:
    """Shortest trace from Init (≤ depth steps) whose last state(s) satisfy `bad`."""
    u = unrolling(enc, sem)
    for t in range(depth + 1):
        if t:
            u.extend()
        u.solver.push()
        u.solver.add(bad(u))
        if u.solver.check() == z3.sat:
            m = u.solver.model()
            trace = u.trace(m)
            u.solver.pop()
            return {"kind": "replayable trace from Init", "dag": decode.dag(enc, m),
                    "init": decode.state(enc, m, u.states[0]), "trace": trace}
        u.solver.pop()
    return None


def check_invariants(enc: Encoding, sem: Semantics, depth: int) -> Result:
    """Every INV-n (without the lemmas) holds on every path of ≤ depth steps from Init.

    Depth t is checked on paths whose earlier states satisfy the INV-n: the first violation of a
    shortest counterexample is always at its last state, so nothing is lost."""
    start = time.perf_counter()
    invs = [i for i in INVARIANTS if not i.lemma]
    u = unrolling(enc, sem)
    res = Result("BMC-invariants", PROVED, depth, 0.0, detail=f"{len(invs)} INV-n, depth {depth}, N={enc.n}")
    for t in range(depth + 1):
        if t:
            u.extend()
        holds = z3.And([i.fn(sem, u.states[-1]) for i in invs])
        u.solver.push()
        u.solver.add(z3.Not(holds))
        answer = u.solver.check()
        res.queries += 1
        if answer == z3.sat:
            m = u.solver.model()
            broken = [i.name for i in invs if z3.is_false(m.eval(i.fn(sem, u.states[-1]), model_completion=True))]
            res.result = VIOLATED
            res.counterexample = {"kind": "replayable trace from Init", "violated": broken, "dag": decode.dag(enc, m),
                                  "trace": u.trace(m)}
            u.solver.pop()
            break
        if answer == z3.unknown:
            res.result = UNKNOWN
        u.solver.pop()
        u.solver.add(holds)  # sound: a shortest violating path satisfies the INV-n before its last state
    res.seconds = time.perf_counter() - start
    return res


def check_cover(enc: Encoding, sem: Semantics, depth: int) -> Result:
    """Non-vacuity: every command changes the state on some path of ≤ depth steps from Init."""
    start = time.perf_counter()
    u = unrolling(enc, sem)
    missing = set(COMMANDS)
    witnesses: dict[str, int] = {}
    queries = 0
    for t in range(1, depth + 1):
        u.extend()
        pre, post, cmd = u.states[-2], u.states[-1], u.cmds[-1]
        u.solver.push()
        u.solver.add(z3.Not(enc.equal(pre, post)))
        while missing:  # one query finds some still-missing command effective at this depth
            u.solver.push()
            u.solver.add(z3.Or([cmd == COMMANDS.index(name) for name in missing]))
            answer = u.solver.check()
            queries += 1
            name = COMMANDS[u.solver.model().eval(cmd).as_long()] if answer == z3.sat else None
            u.solver.pop()
            if name is None:
                break
            witnesses[name] = t
            missing.discard(name)
        u.solver.pop()
        if not missing:
            break
    res = Result("BMC-cover", PROVED if not missing else VIOLATED, depth, time.perf_counter() - start,
                 queries=queries, extra={"firstDepth": witnesses})
    res.detail = f"first effective depth per command: {witnesses}" if not missing else f"never effective: {missing}"
    return res
