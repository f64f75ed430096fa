"""The worker-path and recovery disjuncts (commands.md §4.6–§4.14): claim, renew, release, start,
running, start failure, completion and recovery with evidence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from .encoding import B, E, Run, Step, Sys
from .rules import RuleBase, Transition


class WorkerPath(RuleBase):
    """Worker commands act on the slot's attempt of the selected step; their fence argument `holder`
    abstracts "workerId and leaseGeneration equal the lease's" (S-4)."""

    def _worker_args(self, tag: str, name: str) -> tuple[E, B]:
        return self.sel(tag, name), z3.Bool(f"{tag}.{name}.holder")

    def at_epoch(self, s: Step) -> B:
        return z3.And(s.st == self.d.step_status("ready"), s.sv == s.rv)

    def claim_lease(self, pre: Sys, tag: str) -> Transition:
        d, e = self.d, self.enc
        sel = self.sel(tag, "claim_lease")
        r = pre.run

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            eligible = z3.And(s.at == d.attempt_status("claimed"), e.running(r), z3.Not(e.intent(r)),
                              self.at_epoch(s), z3.Not(e.lease_is(s, "completed")), z3.Not(e.lease_is(s, "live")))
            fresh = e.lease_is(s, "absent")
            gen = z3.If(fresh, 1, s.lgen + 1)
            ver = z3.If(fresh, 0, s.lver + 1)
            new = replace(s, ls=d.lease_state("live"), lrx=z3.BoolVal(False), lgen=gen, lver=ver,
                          akeys=z3.BoolVal(True), algen=gen, alver=ver)
            run = e.ite_run(eligible, self.bump(r, 1, nother=1), r)
            return e.has_attempt(s), e.ite_step(eligible, new, s), run, eligible

        guard, post, work = self.per_step(pre, sel, at)
        return Transition("claim_lease", {"step": sel}, z3.And(self.step_range(sel), guard),
                          self.finish(pre, post, new_work=work))

    def renew_lease(self, pre: Sys, tag: str) -> Transition:
        e, t = self.enc, self.t
        sel, holder = self._worker_args(tag, "renew_lease")
        r = pre.run
        tr_parts: list[B] = []

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            fence = z3.And(e.lease_is(s, "live"), holder)
            ok = z3.And(e.has_attempt(s), fence, e.att_in(s, t.ACTIVE_ATTEMPT))
            write = z3.And(z3.Not(e.intent(r)), s.adl, s.adp, s.ntr == 0)
            tr_parts.append(write)
            new = replace(s, lver=s.lver + 1, alver=s.lver + 1, ntr=z3.If(write, s.ntr + 1, s.ntr))
            return ok, new, e.ite_run(write, self.bump(r, 1, nother=1), r), z3.BoolVal(False)

        guard, post, _ = self.per_step(pre, sel, at)
        written = z3.Or([z3.And(sel == k, w) for k, w in enumerate(tr_parts)])
        return Transition("renew_lease", {"step": sel, "holder": holder}, z3.And(self.step_range(sel), guard),
                          self.finish(pre, post, timeout_request=written))

    def release_lease(self, pre: Sys, tag: str) -> Transition:
        d, e = self.d, self.enc
        sel, holder = self._worker_args(tag, "release_lease")
        same_reason = z3.Bool(f"{tag}.release_lease.same_reason")
        r = pre.run

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            hold = z3.And(holder, z3.Not(e.lease_is(s, "absent")))
            replay = z3.And(e.lease_is(s, "released"), hold)
            replay_ok = z3.And(replay, same_reason, z3.Not(s.lrx))  # a worker reason never equals lease_expired
            release = z3.And(z3.Not(replay), e.lease_is(s, "live"), holder, s.at == d.attempt_status("claimed"))
            new = replace(s, ls=d.lease_state("released"), lrx=z3.BoolVal(False), lver=s.lver + 1,
                          akeys=z3.BoolVal(False), algen=z3.IntVal(0), alver=z3.IntVal(0))
            return (z3.And(e.has_attempt(s), z3.Or(replay_ok, release)), e.ite_step(release, new, s),
                    e.ite_run(release, self.bump(r, 1, nother=1), r), z3.BoolVal(False))

        guard, post, _ = self.per_step(pre, sel, at)
        return Transition("release_lease", {"step": sel, "holder": holder, "same_reason": same_reason},
                          z3.And(self.step_range(sel), guard), self.finish(pre, post))

    def start_attempt(self, pre: Sys, tag: str) -> Transition:
        d, e = self.d, self.enc
        sel, holder = self._worker_args(tag, "start_attempt")
        timeout = z3.Bool(f"{tag}.start_attempt.timeout")
        r = pre.run

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            hold = z3.And(holder, z3.Not(e.lease_is(s, "absent")))
            replay = z3.And(e.att_in(s, ("starting", "running")), hold)
            start = z3.And(z3.Not(replay), e.lease_is(s, "live"), holder, s.at == d.attempt_status("claimed"),
                           e.running(r), z3.Not(e.intent(r)), self.at_epoch(s))
            new = replace(s, at=d.attempt_status("starting"), adl=timeout, adp=z3.BoolVal(False),
                          g_nstart=s.g_nstart + 1)
            return (z3.And(e.has_attempt(s), z3.Or(replay, start)), e.ite_step(start, new, s),
                    e.ite_run(start, self.bump(r, 1, nother=1), r), start)

        guard, post, work = self.per_step(pre, sel, at)
        return Transition("start_attempt", {"step": sel, "holder": holder, "timeout": timeout},
                          z3.And(self.step_range(sel), guard), self.finish(pre, post, new_work=work))

    def record_running(self, pre: Sys, tag: str) -> Transition:
        d, e, t = self.d, self.enc, self.t
        sel, holder = self._worker_args(tag, "record_running")
        r = pre.run

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            hold = z3.And(holder, z3.Not(e.lease_is(s, "absent")))
            replay = z3.And(s.at == d.attempt_status("running"), hold)
            g_mut, moved = self.mutate(s, "running", "worker")
            go = z3.And(z3.Not(replay), e.lease_is(s, "live"), holder, s.at == d.attempt_status("starting"),
                        e.running(r), z3.Not(e.intent(r)), self.at_epoch(s), s.ac < t.MAX_STEP_RUN_ATTEMPTS)
            new = replace(moved, at=d.attempt_status("running"), ast=z3.BoolVal(True), cb=s.cb + 1)
            return (z3.And(e.has_attempt(s), z3.Or(replay, z3.And(go, g_mut))), e.ite_step(go, new, s),
                    e.ite_run(go, self.bump(r, 2, nother=1), r), go)

        guard, post, work = self.per_step(pre, sel, at)
        return Transition("record_running", {"step": sel, "holder": holder}, z3.And(self.step_range(sel), guard),
                          self.finish(pre, post, new_work=work))

    def _finish_attempt(self, pre: Sys, s: Step, command: str, exit_zero: B) -> tuple[B, Step, Any]:
        """Shared effects of fail_start and complete_attempt (task-attempts.md §7)."""
        d, e, t = self.d, self.enc, self.t
        r = pre.run
        from_starting = s.at == d.attempt_status("starting")
        synthetic = z3.And(from_starting, z3.BoolVal(command == "complete_attempt"))
        g_run, ran = self.mutate(s, "running", "worker")
        base = replace(ran, ast=z3.BoolVal(True), cb=s.cb + 1)
        base = e.ite_step(synthetic, base, replace(s, cb=s.cb + 1) if command == "fail_start" else s)
        checks = [z3.Implies(synthetic, g_run)]
        cases = self.completion_cases(command, e.intent(r), e.timeout_reason(r), z3.And(s.adl, s.adp), exit_zero)
        path = "fail_start" if command == "fail_start" else "complete"
        out: Step | None = None
        matched: list[B] = []
        for cond, status in reversed(cases):
            codes = t.WORKER_PATH_CODES.get((command, status))
            if codes is None or status not in d.attempt_status or status not in d.step_status:
                checks.append(z3.Not(cond))  # the model has no codes row: it cannot complete this way
                continue
            g_mut, moved = self.mutate(base, status, "worker", codes.step_result_code, codes.step_error_summary)
            checks.append(z3.Implies(cond, g_mut))
            new = replace(moved, at=d.attempt_status(status), aerr=d.attempt_code(codes.attempt_error_code),
                          asum=d.text(codes.attempt_error_summary), apath=d.attempt_path(path),
                          ls=d.lease_state("completed"), lver=s.lver + 1, alver=s.lver + 1)
            out = new if out is None else e.ite_step(cond, new, out)
            matched.append(cond)
        checks.append(z3.Or(matched) if matched else z3.BoolVal(False))  # COMPLETION_RULES must match
        k = z3.If(synthetic, 3, 2)
        return z3.And(checks), out if out is not None else s, k

    def fail_start(self, pre: Sys, tag: str) -> Transition:
        return self._worker_terminal(pre, tag, "fail_start")

    def complete_attempt(self, pre: Sys, tag: str) -> Transition:
        return self._worker_terminal(pre, tag, "complete_attempt")

    def _worker_terminal(self, pre: Sys, tag: str, command: str) -> Transition:
        d, e, t = self.d, self.enc, self.t
        sel, holder = self._worker_args(tag, command)
        exit_zero = z3.Bool(f"{tag}.{command}.exit_zero") if command == "complete_attempt" else z3.BoolVal(False)
        r = pre.run

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            hold = z3.And(holder, z3.Not(e.lease_is(s, "absent")))
            replay = z3.And(e.att_in(s, t.TERMINAL_ATTEMPT), e.lease_is(s, "completed"), hold)
            if command == "fail_start":
                state_ok = z3.And(s.at == d.attempt_status("starting"), e.running(r), self.at_epoch(s))
            else:
                starting = s.at == d.attempt_status("starting")
                epoch = z3.If(starting, self.at_epoch(s),
                              z3.And(s.st == d.step_status("running"), s.sv == s.rv + 1))
                state_ok = z3.And(e.att_in(s, ("starting", "running")), e.running(r), epoch,
                                  z3.Implies(starting, s.ac < t.MAX_STEP_RUN_ATTEMPTS))
            go = z3.And(z3.Not(replay), e.lease_is(s, "live"), holder, state_ok)
            checks, new, kk = self._finish_attempt(pre, s, command, exit_zero)
            return (z3.And(e.has_attempt(s), z3.Or(replay, z3.And(go, checks))), e.ite_step(go, new, s),
                    e.ite_run(go, self.bump(r, kk, nother=1), r), z3.BoolVal(False))

        guard, post, _ = self.per_step(pre, sel, at)
        args: dict[str, Any] = {"step": sel, "holder": holder}
        if command == "complete_attempt":
            args["exit_zero"] = exit_zero
        return Transition(command, args, z3.And(self.step_range(sel), guard), self.finish(pre, post))

    # ================================================================================== recovery
    def recover_attempt(self, pre: Sys, tag: str) -> Transition:
        d, e, t = self.d, self.enc, self.t
        sel = self.sel(tag, "recover_attempt")
        evidence = d.evidence.var(f"{tag}.recover_attempt.evidence")
        r = pre.run
        unstarted, not_running = t.RECOVERY_PATH_CODES["unstarted_claim_expired"], \
            t.RECOVERY_PATH_CODES["execution_not_running"]

        def at(k: int, s: Step) -> tuple[B, Step, Run, B]:
            claimed = s.at == d.attempt_status("claimed")
            starting = s.at == d.attempt_status("starting")
            applicable = z3.And(e.att_in(s, t.ACTIVE_ATTEMPT), e.lease_is(s, "expired"), self.recover_allowed(pre))
            answer_only = z3.And(z3.Not(claimed), evidence != d.evidence("not_running"))  # retry / manual
            acts = z3.And(applicable, z3.Not(answer_only))
            codes = e.ite_step(claimed, replace(s, aerr=d.attempt_code(unstarted.attempt_error_code),
                                                asum=d.text(unstarted.attempt_error_summary)),
                               replace(s, aerr=d.attempt_code(not_running.attempt_error_code),
                                       asum=d.text(not_running.attempt_error_summary)))
            released = replace(codes, at=d.attempt_status("lost"), apath=d.attempt_path("recover"),
                               ls=d.lease_state("released"), lrx=z3.BoolVal(True), lver=s.lver + 1, alver=s.lver + 1)
            g_rq, requeued = self.mutate(released, "ready", "recover")
            g_fs, failed_s = self.mutate(released, "failed", "recover", not_running.step_result_code,
                                         not_running.step_error_summary)
            g_lo, lost = self.mutate(released, "lost", "recover", not_running.step_result_code,
                                     not_running.step_error_summary)
            g_lf, failed_r = self.mutate(lost, "failed", "recover", not_running.step_result_code,
                                         not_running.step_error_summary)
            new = e.ite_step(claimed, requeued, e.ite_step(starting, failed_s, failed_r))
            checks = z3.If(claimed, g_rq, z3.If(starting, g_fs, z3.And(g_lo, g_lf)))
            k_events = z3.If(z3.Or(claimed, starting), 2, 3)
            return (z3.And(applicable, z3.Implies(acts, checks)), e.ite_step(acts, new, s),
                    e.ite_run(acts, self.bump(r, k_events, nother=1), r), z3.BoolVal(False))

        guard, post, _ = self.per_step(pre, sel, at)
        return Transition("recover_attempt", {"step": sel, "evidence": evidence},
                          z3.And(self.step_range(sel), guard), self.finish(pre, post))

