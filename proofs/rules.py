"""Shared machinery of the transition relation: the Transition record, the StepRun mutation, counter
and ghost updates, the per-step combinator and the rule hooks that mutants override."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import z3

from .encoding import B, E, Encoding, Run, Step, Sys


@dataclass
class Transition:
    name: str
    args: dict[str, Any]
    guard: B
    post: Sys
    facts: dict[str, B] = field(default_factory=dict)


@dataclass
class FrontierPlan:
    doomed: list[B]
    skip: list[B]
    ready: list[B]
    mutated: list[B]
    projected: list[E]
    agg_terminal: B
    agg_status: E
    mutations: E
    candidate: B


class RuleBase:
    """Helpers shared by every disjunct, and the rule hooks (one method per rule a mutant may change)."""

    def __init__(self, enc: Encoding) -> None:
        self.enc = enc
        self.t = enc.t
        self.d = enc.d
        self.n = enc.n

    # ================================================================================== helpers
    def _const(self, dom_name: str, v: Any) -> E:
        return v if isinstance(v, z3.ExprRef) else getattr(self.d, dom_name)(v)

    def mutate(self, s: Step, to: str | E, path: str, rc: Any = None, ssum: Any = None) -> tuple[B, Step]:
        """transition_step_run (state-machines.md §3.2) on the abstract StepRun: (checks, new step)."""
        d, t = self.d, self.t
        to_e, rc_e, ssum_e = self._const("step_status", to), self._const("step_code", rc), self._const("text", ssum)
        sources = {b: [a for a, targets in t.STEP_TRANSITIONS.items() if b in targets] for b in t.STEP_STATUSES}
        if isinstance(to, str):
            allowed = d.step_status.isin(s.st, sources.get(to, ()))
        else:
            allowed = z3.Or([z3.And(to_e == d.step_status(b), d.step_status.isin(s.st, src))
                             for b, src in sources.items() if src])
        shape = z3.And((rc_e != d.step_code(None)) == d.step_status.isin(to_e, t.STEP_RESULT_CODE_REQUIRED),
                       z3.Implies(ssum_e != d.text(None), d.step_status.isin(to_e, t.STEP_ERROR_SUMMARY_ALLOWED)))
        to_ready, to_running = to_e == d.step_status("ready"), to_e == d.step_status("running")
        count_ok = z3.Implies(to_running, s.ac < t.MAX_STEP_RUN_ATTEMPTS)
        new = replace(s, st=to_e, sv=s.sv + 1, nse=s.nse + 1, rdy=z3.Or(s.rdy, to_ready),
                      sst=z3.If(to_ready, False, z3.Or(s.sst, to_running)), ac=z3.If(to_running, s.ac + 1, s.ac),
                      rc=rc_e, ssum=ssum_e, spath=d.step_path(path))
        return z3.And(allowed, shape, count_ok), new

    @staticmethod
    def counted(moved: Step, s: Step, mutated: B) -> Step:
        """ite(mutated, moved, s) with the version and event count written `x + If(mutated, 1, 0)`: the
        Run's increment Σ If(mutated_k, 1, 0) then shares those terms, so INV-1/INV-8 need no case split
        over the N steps (otherwise the solver's time grows exponentially with N)."""
        inc = z3.If(mutated, 1, 0)
        return replace(Encoding.ite_step(mutated, moved, s), sv=s.sv + inc, nse=s.nse + inc)

    def bump(self, r: Run, k: Any, **counts: Any) -> Run:
        """k events appended: version, eventSequence and the event count move together (INV-1)."""
        upd = {name: getattr(r, name) + v for name, v in counts.items()}
        return replace(r, ver=r.ver + k, seq=r.seq + k, nev=r.nev + k, **upd)

    def finish(self, pre: Sys, post: Sys, new_work: B | bool = False, timeout_request: B | bool = False) -> Sys:
        """History ghosts: the order-dependent facts of INV-12, INV-15 and INV-31."""
        e, r, p = self.enc, pre.run, post.run
        wrote = p.nev != r.nev
        run = replace(p, g_after_term=z3.Or(r.g_after_term, z3.And(z3.Not(e.running(r)), wrote)),
                      g_work_after_intent=z3.Or(r.g_work_after_intent, z3.And(e.intent(r), new_work)),
                      g_tr_intent=z3.Or(r.g_tr_intent, z3.And(e.intent(r), timeout_request)))
        return Sys(run, post.steps)

    def per_step(self, pre: Sys, sel: E,
                 fn: Callable[[int, Step], tuple[B, Step, Run, B]]) -> tuple[B, Sys, B]:
        """Combine a per-step command: fn(k, s) = (guard, new step, new run, new-work fact)."""
        parts = [fn(k, s) for k, s in enumerate(pre.steps)]
        guard = z3.Or([z3.And(sel == k, g) for k, (g, _, _, _) in enumerate(parts)])
        steps = tuple(self.enc.ite_step(sel == k, parts[k][1], s) for k, s in enumerate(pre.steps))
        run = pre.run
        work: B = z3.BoolVal(False)
        for k in reversed(range(self.n)):
            run = self.enc.ite_run(sel == k, parts[k][2], run)
            work = z3.If(sel == k, parts[k][3], work)
        return guard, Sys(run, steps), work

    def sel(self, tag: str, name: str) -> E:
        return z3.Int(f"{tag}.{name}.step")

    def step_range(self, sel: E) -> B:
        return z3.And(sel >= 0, sel < self.n)

    # ================================================================================== rule hooks
    def cannot_succeed(self, x: Sys) -> list[B]:
        """CANNOT_SUCCEED (frontier.md §4.3), unrolled along the topological order."""
        e, t = self.enc, self.t
        doomed: list[B] = []
        for i, s in enumerate(x.steps):
            via = z3.Or([z3.And(e.need[i][j], doomed[j]) for j in range(i)]) if i else z3.BoolVal(False)
            doomed.append(z3.Or(e.step_in(s, t.BLOCKING_STEP), z3.And(e.step_in(s, ["pending"]), via)))
        return doomed

    def ready_rule(self, x: Sys, i: int) -> B:
        """Every need of step i has snapshot status succeeded."""
        return z3.And([z3.Implies(self.enc.need[i][j], x.steps[j].st == self.d.step_status("succeeded"))
                       for j in range(i)])

    def recover_allowed(self, x: Sys) -> B:
        """D-2: recovery does not look at cancel intent."""
        return z3.BoolVal(True)

    def admission_allowed(self, x: Sys) -> B:
        """admit_task_attempt checks 6-7: Run running and no intent."""
        return z3.And(self.enc.running(x.run), z3.Not(self.enc.intent(x.run)))

    def aggregate(self, statuses: list[E]) -> tuple[B, E]:
        """AGG (state-machines.md §1) from AGG_PRECEDENCE: (all terminal, first matching row's status)."""
        d, t = self.d, self.t
        terminal = z3.And([d.step_status.isin(s, t.TERMINAL_STEP) for s in statuses])
        out = d.run_status("succeeded")
        for members, result in reversed(t.AGG_PRECEDENCE):
            out = z3.If(z3.Or([d.step_status.isin(s, members) for s in statuses]), d.run_status(result), out)
        return terminal, out

    def completion_cases(self, command: str, intent: B, timeout: B, deadline: B, exit_zero: B) -> list[tuple[B, str]]:
        """COMPLETION_RULES as first-match cases (exclusive conditions, in table order)."""
        facts = (intent, timeout, deadline, exit_zero)
        cases: list[tuple[B, str]] = []
        earlier: list[B] = []
        for rule in self.t.COMPLETION_RULES:
            if rule.command != command:
                continue
            conds = (rule.intent, rule.timeout_reason, rule.deadline_passed, rule.exit_zero)
            match = z3.And([f if c else z3.Not(f) for c, f in zip(conds, facts, strict=True) if c is not None])
            cases.append((z3.And(match, *[z3.Not(m) for m in earlier]), rule.status))
            earlier.append(match)
        return cases

    def reason_target(self, r: Run, dom_name: str, attr: str) -> E:
        """CANCEL_REASON_TARGET[reason].<attr> as an expression of the given domain."""
        domain = getattr(self.d, dom_name)
        table = {reason: domain(getattr(tgt, attr)) for reason, tgt in self.t.CANCEL_REASON_TARGET.items()}
        default = {"run_status": "running", "attempt_status": "none"}.get(dom_name)
        return self.d.reason.select(r.reason, table, domain(default))

