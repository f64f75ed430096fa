"""The transition relation: one disjunct per command of commands.md, plus time advance.

Each command is a `Transition` with its abstract arguments (free Z3 constants), a guard and the
post-state as expressions over the pre-state and the arguments: the relation is
`OR_c (guard_c AND post = post_c)`. Commands that the model answers without writing (replays,
`unchanged`, `not_eligible`, `retry`, ...) have a true guard and post = pre; commands the model
refuses (Invalid / Conflict) have a false guard. Record-drift checks (Unavailable on a stored
record that disagrees with its receipt, mirror or digest) are not encoded: the invariants exclude
drift and the cross-check confirms it on reachable states. The StepRun machine's own checks
(STEP_TRANSITIONS legality, resultCode/errorSummary shape, attemptCount < 64) ARE encoded, because a
command whose mutation fails them fails closed in the model.

Layout: rules.py (Transition, StepRun mutation, counters, ghosts, and the rule hooks
`cannot_succeed`, `ready_rule`, `recover_allowed`, `admission_allowed`, ... that mutants override),
worker_path.py (worker commands and recovery), this module (frontier, admission, cancellation, time,
and the relation itself).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from .encoding import B, E, Run, Step, Sys
from .rules import FrontierPlan, Transition
from .worker_path import WorkerPath

COMMANDS = (
    "advance_frontier", "admit_task_attempt", "claim_lease", "renew_lease", "release_lease", "start_attempt",
    "record_running", "fail_start", "complete_attempt", "recover_attempt", "request_cancel",
    "converge_cancellation", "advance_time",
)


class Semantics(WorkerPath):
    """The whole relation: RuleBase helpers and hooks, the worker path, and the system commands."""

    # ================================================================================== frontier
    def frontier_plan(self, x: Sys) -> FrontierPlan:
        d, e, t = self.d, self.enc, self.t
        doomed = self.cannot_succeed(x)
        skip, ready, projected = [], [], []
        for i, s in enumerate(x.steps):
            pending = s.st == d.step_status("pending")
            skip.append(z3.And(pending, doomed[i]))
            ready.append(z3.And(pending, z3.Not(doomed[i]), self.ready_rule(x, i)))
            projected.append(z3.If(skip[i], d.step_status("skipped"), z3.If(ready[i], d.step_status("ready"), s.st)))
        agg_terminal, agg_status = self.aggregate(projected)
        mutated = [z3.Or(a, b) for a, b in zip(skip, ready, strict=True)]
        m = z3.Sum([z3.If(x, 1, 0) for x in mutated])
        # frontier.md §5: only DIRECT needs are examined.
        direct = []
        for i, s in enumerate(x.steps):
            needs = [(e.need[i][j], x.steps[j]) for j in range(i)]
            all_ok = z3.And([z3.Implies(c, o.st == d.step_status("succeeded")) for c, o in needs])
            blocked = z3.Or([z3.And(c, e.step_in(o, t.BLOCKING_STEP)) for c, o in needs] or [z3.BoolVal(False)])
            direct.append(z3.And(s.st == d.step_status("pending"), z3.Or(all_ok, blocked)))
        all_terminal = z3.And([e.step_in(s, t.TERMINAL_STEP) for s in x.steps])
        candidate = z3.And(e.running(x.run), z3.Not(e.intent(x.run)), z3.Or(all_terminal, *direct))
        return FrontierPlan(doomed, skip, ready, mutated, projected, agg_terminal, agg_status, m, candidate)

    def advance_frontier(self, pre: Sys, tag: str) -> Transition:
        d, e, t = self.d, self.enc, self.t
        p = self.frontier_plan(pre)
        r = pre.run
        steps, checks = [], []
        for i, s in enumerate(pre.steps):
            # one mutation per step (target by rule) keeps the step's counters `x + If(mutated, 1, 0)`
            target = z3.If(p.skip[i], d.step_status("skipped"), d.step_status("ready"))
            code = z3.If(p.skip[i], d.step_code(t.FRONTIER_SKIP_RESULT_CODE), d.step_code(None))
            g_mut, moved = self.mutate(s, target, "frontier", code)
            checks.append(z3.Implies(p.mutated[i], g_mut))
            steps.append(self.counted(moved, s, p.mutated[i]))
        code_known = d.run_status.isin(p.agg_status, t.FRONTIER_TERMINAL_ERROR_CODE)
        code = d.run_status.select(p.agg_status, {s: d.run_code(c) for s, c in t.FRONTIER_TERMINAL_ERROR_CODE.items()},
                                   d.run_code(None))
        term = p.agg_terminal
        tcount = z3.If(term, 1, 0)
        run = self.bump(r, p.mutations + tcount, nterm=tcount)
        run = replace(run, rs=z3.If(term, p.agg_status, r.rs), rerr=z3.If(term, code, r.rerr),
                      rpath=z3.If(term, d.run_path("frontier"), r.rpath))
        advanced = self.finish(pre, Sys(run, tuple(steps)), new_work=z3.Or(p.ready))
        running = e.running(r)
        settled_ok = z3.And(p.mutations == 0, p.agg_terminal, p.agg_status == r.rs)
        guard = z3.And(z3.Not(e.intent(r)), z3.If(running, z3.And(*checks, z3.Implies(term, code_known)), settled_ok))
        return Transition("advance_frontier", {}, guard, e.ite(running, advanced, pre),
                          {"writes": z3.And(running, z3.Or(p.mutations > 0, term))})

    # ================================================================================== admission
    def admit_task_attempt(self, pre: Sys, tag: str) -> Transition:
        d, e, t = self.d, self.enc, self.t
        sel = self.sel(tag, "admit_task_attempt")
        r = pre.run
        unstarted = t.RECOVERY_PATH_CODES["unstarted_claim_expired"].attempt_error_code

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            replay = z3.And(e.has_attempt(s), s.rv == s.sv)
            create = z3.And(s.st == d.step_status("ready"), self.admission_allowed(pre),
                            s.ac < t.MAX_STEP_RUN_ATTEMPTS, r.natt + 1 <= t.MAX_RUN_ATTEMPTS)
            old_ok = z3.Or(z3.Not(e.has_attempt(s)),
                           z3.And(s.at == d.attempt_status("lost"), s.aerr == d.attempt_code(unstarted),
                                  z3.Not(s.ast), z3.Not(s.adl)))
            new = replace(e.empty_slot(s), at=d.attempt_status("claimed"), rv=s.sv, nat=s.nat + 1,
                          g_prior_bad=z3.Or(s.g_prior_bad, z3.Not(old_ok)), g_nstart=s.g_nstart)
            run = self.bump(r, 1, natt=1)
            return (z3.Or(replay, create), e.ite_step(replay, s, new), e.ite_run(replay, r, run),
                    z3.Not(replay))

        guard, post, work = self.per_step(pre, sel, at)
        return Transition("admit_task_attempt", {"step": sel}, z3.And(self.step_range(sel), guard),
                          self.finish(pre, post, new_work=work))

    # ================================================================================== cancellation
    def request_cancel(self, pre: Sys, tag: str) -> Transition:
        d, e, t = self.d, self.enc, self.t
        reason = d.reason.var(f"{tag}.request_cancel.reason")
        r = pre.run
        existing = e.intent(r)
        record = z3.And(z3.Not(existing), e.running(r))
        run = replace(self.bump(r, 1, ncancel=1), reason=reason)
        post = Sys(e.ite_run(record, run, r), pre.steps)
        guard = z3.And(d.reason.isin(reason, t.CANCEL_REASONS), z3.Or(existing, record))
        return Transition("request_cancel", {"reason": reason}, guard, self.finish(pre, post))

    def attempt_decision(self, s: Step) -> tuple[B, B, B]:
        """CANCEL_ATTEMPT_TABLE for the slot: (row exists, blocked, settle), for active attempts."""
        e = self.enc
        rows = self.t.CANCEL_ATTEMPT_TABLE
        match = {key: z3.And(s.at == self.d.attempt_status(key[0]), e.lease_kind_is(s, key[1]))
                 for key in rows if key[0] in self.d.attempt_status}
        active = e.att_in(s, self.t.ACTIVE_ATTEMPT)
        defined = z3.Or(list(match.values())) if match else z3.BoolVal(False)
        blocked = z3.Or([m for k, m in match.items() if rows[k] == "blocked"] or [z3.BoolVal(False)])
        settle = z3.Or([m for k, m in match.items() if rows[k] == "settle"] or [z3.BoolVal(False)])
        return z3.Implies(active, defined), z3.And(active, blocked), z3.And(active, settle)

    def step_decision(self, s: Step, timeout: B) -> tuple[B, B, B, E, E, E]:
        """CANCEL_STEP_TABLE: (row exists, blocked, mutate, target, resultCode, errorSummary)."""
        d = self.d
        rows = self.t.CANCEL_STEP_TABLE
        match = {key: z3.And(s.st == d.step_status(key[0]), timeout == key[1])
                 for key in rows if key[0] in d.step_status}
        defined = z3.Or(list(match.values()))
        blocked = z3.Or([m for k, m in match.items() if rows[k].action == "blocked"] or [z3.BoolVal(False)])
        mutate = z3.Or([m for k, m in match.items() if rows[k].action == "mutate"] or [z3.BoolVal(False)])
        target: E = s.st
        rc: E = d.step_code(None)
        ssum: E = d.text(None)
        for key, m in match.items():
            dec = rows[key]
            if dec.action == "mutate":
                target = z3.If(m, d.step_status(dec.target), target)
                rc = z3.If(m, d.step_code(dec.result_code), rc)
                ssum = z3.If(m, d.text(dec.error_summary), ssum)
        return defined, blocked, mutate, target, rc, ssum

    def converge_plan(self, pre: Sys) -> tuple[B, list[B], list[B], list[B], list[Step], E, E]:
        """resolve_cancellation (cancellation.md §5–§6) on the abstract state.

        Returns (tables defined and mutations legal, settle[k], blocked[k], mutate[k], post steps,
        settled-attempt count, step-mutation count)."""
        d, e = self.d, self.enc
        r = pre.run
        timeout = e.timeout_reason(r)
        att_status = self.reason_target(r, "attempt_status", "status")
        att_code = self.reason_target(r, "attempt_code", "error_code")
        att_text = self.reason_target(r, "text", "error_summary")
        checks, settles, blocks, mutates, steps = [], [], [], [], []
        for s in pre.steps:
            a_def, a_blocked, a_settle = self.attempt_decision(s)
            s_def, s_blocked, s_mutate, target, rc, ssum = self.step_decision(s, timeout)
            settled = replace(s, at=att_status, aerr=att_code, asum=att_text, apath=d.attempt_path("converge"))
            after = e.ite_step(a_settle, settled, s)
            mutate = z3.And(z3.Not(a_blocked), s_mutate)
            g_mut, moved = self.mutate(after, target, "converge", rc, ssum)
            checks += [a_def, z3.Implies(z3.Not(a_blocked), s_def), z3.Implies(mutate, g_mut)]
            settles.append(a_settle)
            blocks.append(z3.Or(a_blocked, s_blocked))
            mutates.append(mutate)
            steps.append(self.counted(moved, after, mutate))
        a = z3.Sum([z3.If(x, 1, 0) for x in settles])
        m = z3.Sum([z3.If(x, 1, 0) for x in mutates])
        return z3.And(checks), settles, blocks, mutates, steps, a, m

    def converge_cancellation(self, pre: Sys, tag: str) -> Transition:
        d, e, t = self.d, self.enc, self.t
        r = pre.run
        checks, _, blocks, _, steps, a, m = self.converge_plan(pre)
        terminal = z3.Not(z3.Or(blocks))
        tcount = z3.If(terminal, 1, 0)
        run = self.bump(r, a + m + tcount, nother=a, nterm=tcount)
        run = replace(run, rs=z3.If(terminal, self.reason_target(r, "run_status", "status"), r.rs),
                      rerr=z3.If(terminal, self.reason_target(r, "run_code", "error_code"), r.rerr),
                      rsum=z3.If(terminal, self.reason_target(r, "text", "error_summary"), r.rsum),
                      rpath=z3.If(terminal, d.run_path("converge"), r.rpath))
        converged = self.finish(pre, Sys(run, tuple(steps)))
        running = e.running(r)
        reason_known = d.reason.isin(r.reason, t.CANCEL_REASON_TARGET)
        settled_ok = r.rs == self.reason_target(r, "run_status", "status")
        guard = z3.And(e.intent(r), reason_known, z3.If(running, checks, settled_ok))
        return Transition("converge_cancellation", {}, guard, e.ite(running, converged, pre),
                          {"terminal": z3.And(running, terminal)})

    # ================================================================================== time
    def advance_time(self, pre: Sys, tag: str) -> Transition:
        d, e = self.d, self.enc
        expire = [z3.Bool(f"{tag}.advance_time.expire{k}") for k in range(self.n)]
        passes = [z3.Bool(f"{tag}.advance_time.pass{k}") for k in range(self.n)]

        def tick(k: int, s: Step) -> Step:
            return replace(s, ls=z3.If(z3.And(e.lease_is(s, "live"), expire[k]), d.lease_state("expired"), s.ls),
                           adp=z3.Or(s.adp, z3.And(s.adl, passes[k])))

        args: dict[str, Any] = {f"expire{k}": x for k, x in enumerate(expire)}
        args |= {f"pass{k}": x for k, x in enumerate(passes)}
        return Transition("advance_time", args, z3.BoolVal(True), e.map_steps(pre, tick))

    # ================================================================================== relation
    def transitions(self, pre: Sys, tag: str, only: tuple[str, ...] | None = None) -> list[Transition]:
        return [getattr(self, name)(pre, tag) for name in (only or COMMANDS)]

    def relation(self, pre: Sys, post: Sys, tag: str, only: tuple[str, ...] | None = None
                 ) -> tuple[B, E, list[Transition]]:
        """(Step(pre, post), the command selector of this step, the disjuncts).

        Written as OR_c (cmd = c ∧ guard_c) ∧ post = ITE_c(cmd = c, post_c): equivalent to
        OR_c (guard_c ∧ post = post_c), with one equality per field instead of one per field and
        command (BMC unrollings stay small; a field no command changes is a plain frame)."""
        cmd = z3.Int(f"{tag}.cmd")
        ts = self.transitions(pre, tag, only)
        idx = [COMMANDS.index(t.name) for t in ts]
        guard = z3.Or([z3.And(cmd == i, t.guard) for i, t in zip(idx, ts, strict=True)])
        merged = ts[-1].post
        for i, t in reversed(list(zip(idx[:-1], ts[:-1], strict=True))):
            merged = self.enc.ite(cmd == i, t.post, merged)
        return z3.And(guard, self.enc.equal(post, merged)), cmd, ts
