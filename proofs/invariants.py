"""The state-expressible invariants INV-n (abstracted) and the strengthening lemmas they need.

Each entry is a named predicate over one symbolic state (two-state properties are in moves.py).
The INV-n that the abstraction drops are listed in `NOT_ENCODED`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from .encoding import B, Step, Sys
from .transitions import Semantics


@dataclass(frozen=True)
class Invariant:
    name: str
    doc: str
    fn: Callable[[Semantics, Sys], B]
    lemma: bool = False


NOT_ENCODED: dict[str, str] = {
    "INV-2": "event ids, dedupe keys and contiguity of sequences (ids dropped; the event COUNT is INV-1)",
    "INV-3": "identifier shapes and lengths (ids dropped)",
    "INV-4": "timestamps (time is abstracted to lease live/expired and deadline passed)",
    "INV-5": "frozen admission evidence (plan, receipt and digests dropped; the DAG is immutable by construction)",
    "INV-7": "StepRun identity fields against the plan (structural: one StepRun per index)",
}


def _all(xs: list[B]) -> B:
    return z3.And(xs) if xs else z3.BoolVal(True)


def _steps(sem: Semantics, x: Sys, fn: Callable[[int, Step], B]) -> B:
    return _all([fn(i, s) for i, s in enumerate(x.steps)])


def reached_starting(sem: Semantics, s: Step) -> B:
    """The slot's attempt crossed claimed → starting at some point."""
    d, t = sem.d, sem.t
    not_running = t.RECOVERY_PATH_CODES["execution_not_running"].attempt_error_code
    return z3.Or(sem.enc.att_in(s, ("starting", "running")), d.attempt_path.isin(s.apath, ("fail_start", "complete")),
                 z3.And(s.at == d.attempt_status("lost"), s.aerr == d.attempt_code(not_running)))


# ------------------------------------------------------------------------------------------------
def inv1(sem: Semantics, x: Sys) -> B:
    r = x.run
    steps = z3.Sum([s.nse for s in x.steps])
    return z3.And(r.ver == r.seq, r.seq == r.nev, r.nev == 1 + steps + r.natt + r.ncancel + r.nterm + r.nother)


def inv6(sem: Semantics, x: Sys) -> B:
    d, t = sem.d, sem.t

    def one(i: int, s: Step) -> B:
        return z3.And((s.rc != d.step_code(None)) == sem.enc.step_in(s, t.STEP_RESULT_CODE_REQUIRED),
                       z3.Implies(s.ssum != d.text(None), sem.enc.step_in(s, t.STEP_ERROR_SUMMARY_ALLOWED)),
                       (s.aerr == d.attempt_code(None)) == (s.asum == d.text(None)))
    return _steps(sem, x, one)


def inv8(sem: Semantics, x: Sys) -> B:
    return _steps(sem, x, lambda i, s: s.nse == s.sv)


def inv9(sem: Semantics, x: Sys) -> B:
    def one(i: int, s: Step) -> B:
        return z3.And(z3.Not(sem.enc.step_in(s, ("waiting_approval", "lost"))), s.ac >= 0, s.ac <= 1,
                      (s.ac == 1) == s.sst)
    return _steps(sem, x, one)


def inv10(sem: Semantics, x: Sys) -> B:
    d, r = sem.d, x.run
    none = z3.And(r.rerr == d.run_code(None), r.rsum == d.text(None), r.rpath == d.run_path("none"))
    return z3.If(sem.enc.running(r), none, r.rpath != d.run_path("none"))


def inv11(sem: Semantics, x: Sys) -> B:
    e, t = sem.enc, sem.t

    def one(i: int, s: Step) -> B:
        return z3.And(e.step_in(s, t.TERMINAL_STEP), z3.Not(e.att_in(s, t.ACTIVE_ATTEMPT)), z3.Not(e.leased(s)))
    return z3.Implies(z3.Not(e.running(x.run)), _steps(sem, x, one))


def inv12(sem: Semantics, x: Sys) -> B:
    r = x.run
    return z3.And(r.nterm == z3.If(sem.enc.running(r), 0, 1), z3.Not(r.g_after_term))


def inv13(sem: Semantics, x: Sys) -> B:
    d, e, t, r = sem.d, sem.enc, sem.t, x.run
    _, agg = sem.aggregate([s.st for s in x.steps])
    frontier_code = d.run_status.select(r.rs, {s: d.run_code(c) for s, c in t.FRONTIER_TERMINAL_ERROR_CODE.items()},
                                        d.run_code(None))
    no_intent = z3.And(r.rs == agg, r.rerr == frontier_code, r.rsum == d.text(None), r.rpath == d.run_path("frontier"))
    with_intent = z3.And(r.rs == sem.reason_target(r, "run_status", "status"),
                         r.rerr == sem.reason_target(r, "run_code", "error_code"),
                         r.rsum == sem.reason_target(r, "text", "error_summary"), r.rpath == d.run_path("converge"))
    return z3.Implies(z3.Not(e.running(r)), z3.If(e.intent(r), with_intent, no_intent))


def inv14(sem: Semantics, x: Sys) -> B:
    return x.run.ncancel == z3.If(sem.enc.intent(x.run), 1, 0)


def inv15(sem: Semantics, x: Sys) -> B:
    return z3.Not(x.run.g_work_after_intent)


def inv16(sem: Semantics, x: Sys) -> B:
    d, e = sem.d, sem.enc

    def one(i: int, s: Step) -> B:
        needs_ok = _all([z3.Implies(e.need[i][j], x.steps[j].st == d.step_status("succeeded")) for j in range(i)])
        return z3.And(z3.Implies(s.rdy, needs_ok), z3.Implies(e.has_attempt(s), s.rdy))
    return _steps(sem, x, one)


def inv17(sem: Semantics, x: Sys) -> B:
    d, e, t = sem.d, sem.enc, sem.t

    def one(i: int, s: Step) -> B:
        blocking = z3.Or([z3.And(e.need[i][j], e.step_in(x.steps[j], t.BLOCKING_STEP)) for j in range(i)]
                         or [z3.BoolVal(False)])
        return z3.Implies(s.st == d.step_status("skipped"),
                          z3.And(s.rc == d.step_code(t.FRONTIER_SKIP_RESULT_CODE), s.ssum == d.text(None),
                                 z3.Not(s.rdy), blocking))
    return _steps(sem, x, one)


def inv18(sem: Semantics, x: Sys) -> B:
    d, e = sem.d, sem.enc

    def one(i: int, s: Step) -> B:
        return z3.Implies(s.st == d.step_status("pending"),
                          z3.And(z3.Not(e.has_attempt(s)), z3.Not(s.rdy), s.sv == 1, x.run.nterm == 0))
    return _steps(sem, x, one)


def inv19(sem: Semantics, x: Sys) -> B:
    e = sem.enc
    return _steps(sem, x, lambda i, s: z3.Implies(e.att_in(s, sem.t.ACTIVE_ATTEMPT), e.running(x.run)))


def inv20(sem: Semantics, x: Sys) -> B:
    """Attempt numbers 1..natt count every attempt, per step (Σ of Int ghosts: no If-sum, which would
    make the arithmetic solver branch on every slot); receipt epochs never exceed the version."""
    e, r = sem.enc, x.run
    per_step = _steps(sem, x, lambda i, s: z3.And(s.nat >= 0, e.has_attempt(s) == (s.nat >= 1),
                                                  z3.Implies(e.has_attempt(s), z3.And(s.rv >= 1, s.rv <= s.sv))))
    return z3.And(r.natt == z3.Sum([s.nat for s in x.steps]), r.natt <= sem.t.MAX_RUN_ATTEMPTS, per_step)


def inv21(sem: Semantics, x: Sys) -> B:
    """The coupling table of state-machines.md §7, row by row, and its converse."""
    d, e, t = sem.d, sem.enc, sem.t
    unstarted = t.RECOVERY_PATH_CODES["unstarted_claim_expired"]
    not_running = t.RECOVERY_PATH_CODES["execution_not_running"]

    def one(i: int, s: Step) -> B:
        a = s.at
        st = s.st
        completed = e.lease_is(s, "completed")
        same_status = z3.Or([z3.And(a == d.attempt_status(v), st == d.step_status(v))
                             for v in ("succeeded", "failed", "cancelled", "timed_out")])
        p = s.apath
        rows = [
            z3.Implies(a == d.attempt_status("claimed"),
                       z3.And(z3.Or(e.lease_is(s, "absent"), e.leased(s), e.released_by_worker(s)),
                              st == d.step_status("ready"), s.sv == s.rv, z3.Not(s.ast), s.cb == 0,
                              p == d.attempt_path("none"))),
            z3.Implies(a == d.attempt_status("starting"),
                       z3.And(e.leased(s), st == d.step_status("ready"), s.sv == s.rv, z3.Not(s.ast), s.cb == 0,
                              p == d.attempt_path("none"))),
            z3.Implies(a == d.attempt_status("running"),
                       z3.And(e.leased(s), st == d.step_status("running"), s.sv == s.rv + 1, s.ast, s.sst, s.cb == 1,
                              p == d.attempt_path("none"))),
            z3.Implies(a == d.attempt_status("succeeded"), p == d.attempt_path("complete")),
            z3.Implies(a == d.attempt_status("failed"), d.attempt_path.isin(p, ("fail_start", "complete"))),
            z3.Implies(e.att_in(s, ("cancelled", "timed_out")),
                       d.attempt_path.isin(p, ("fail_start", "complete", "converge"))),
            z3.Implies(p == d.attempt_path("fail_start"),
                       z3.And(completed, same_status, s.sv == s.rv + 1, z3.Not(s.sst), z3.Not(s.ast), s.cb == 1)),
            z3.Implies(p == d.attempt_path("complete"),
                       z3.And(completed, same_status, s.sv == s.rv + 2, s.ast, s.sst, s.cb == 1)),
            z3.Implies(p == d.attempt_path("converge"),
                       z3.And(e.att_in(s, ("cancelled", "timed_out")),
                              z3.Or(e.lease_is(s, "absent"), e.released_by_worker(s)),
                              e.step_in(s, t.TERMINAL_STEP), z3.Not(s.sst), s.cb == 0)),
            z3.Implies(a == d.attempt_status("lost"),
                       z3.And(p == d.attempt_path("recover"), e.lease_is(s, "released"), s.lrx,
                              d.attempt_code.isin(s.aerr, (unstarted.attempt_error_code,
                                                           not_running.attempt_error_code)))),
            z3.Implies(z3.And(a == d.attempt_status("lost"), s.aerr == d.attempt_code(unstarted.attempt_error_code)),
                       z3.And(s.sv > s.rv, s.cb == 0)),
            z3.Implies(z3.And(a == d.attempt_status("lost"),
                              s.aerr == d.attempt_code(not_running.attempt_error_code)),
                       z3.And(st == d.step_status("failed"), s.rc == d.step_code(not_running.step_result_code),
                              z3.Or(s.cb == 0, s.cb == 1))),
            z3.Implies(p == d.attempt_path("recover"), a == d.attempt_status("lost")),
            # converse: a running StepRun has a running attempt
            z3.Implies(st == d.step_status("running"), a == d.attempt_status("running")),
        ]
        return z3.And(rows)
    return _steps(sem, x, one)


def inv22(sem: Semantics, x: Sys) -> B:
    return _steps(sem, x, lambda i, s: z3.And(z3.Not(s.g_prior_bad), s.g_nstart <= 1))


def inv23(sem: Semantics, x: Sys) -> B:
    d, e = sem.d, sem.enc

    def one(i: int, s: Step) -> B:
        attempt = z3.Implies(s.apath == d.attempt_path("converge"),
                             z3.And(z3.Not(s.ast), z3.Not(s.adl),
                                    z3.Or(e.lease_is(s, "absent"), e.released_by_worker(s))))
        step = z3.Implies(s.spath == d.step_path("converge"), z3.And(z3.Not(s.sst), s.g_nstart == 0))
        return z3.And(attempt, step)
    return _steps(sem, x, one)


def inv24(sem: Semantics, x: Sys) -> B:
    d, e, t = sem.d, sem.enc, sem.t

    def one(i: int, s: Step) -> B:
        return z3.And(
            z3.Implies(e.leased(s), e.att_in(s, t.ACTIVE_ATTEMPT)),
            z3.Implies(e.att_in(s, ("starting", "running")), z3.And(e.leased(s), s.akeys)),
            z3.Implies(e.lease_is(s, "completed"),
                       z3.And(e.att_in(s, ("succeeded", "failed", "cancelled", "timed_out")),
                              d.attempt_path.isin(s.apath, ("fail_start", "complete")))),
            z3.Implies(z3.And(e.lease_is(s, "released"), s.lrx), s.at == d.attempt_status("lost")),
            z3.Implies(e.released_by_worker(s),
                       z3.And(e.att_in(s, ("claimed", "cancelled", "timed_out")), z3.Not(s.akeys))),
        )
    return _steps(sem, x, one)


def inv25(sem: Semantics, x: Sys) -> B:
    e = sem.enc

    def one(i: int, s: Step) -> B:
        return z3.If(s.akeys, z3.And(z3.Not(e.lease_is(s, "absent")), s.algen == s.lgen, s.alver == s.lver),
                     z3.And(z3.Or(e.lease_is(s, "absent"), e.released_by_worker(s)), s.algen == 0, s.alver == 0))
    return _steps(sem, x, one)


def inv26(sem: Semantics, x: Sys) -> B:
    e = sem.enc
    return _steps(sem, x, lambda i, s: z3.If(e.lease_is(s, "absent"), z3.And(s.lgen == 0, s.lver == 0),
                                             z3.And(s.lgen >= 1, s.lver >= 0)))


def inv27(sem: Semantics, x: Sys) -> B:
    t = sem.t
    return z3.And(x.run.natt >= 0, x.run.natt <= t.MAX_RUN_ATTEMPTS,
                  _steps(sem, x, lambda i, s: z3.And(s.ac >= 0, s.ac <= t.MAX_STEP_RUN_ATTEMPTS)))


def inv28(sem: Semantics, x: Sys) -> B:
    """A running Run without intent is a frontier candidate iff advance_frontier would write."""
    e = sem.enc
    p = sem.frontier_plan(x)
    writes = z3.Or(p.mutations > 0, p.agg_terminal)
    return z3.Implies(z3.And(e.running(x.run), z3.Not(e.intent(x.run))), p.candidate == writes)


def task_candidate(sem: Semantics, x: Sys, s: Step) -> B:
    """task-attempts.md §2 on the abstract state."""
    d, e, r = sem.d, sem.enc, x.run
    epoch_receipt = z3.And(e.has_attempt(s), s.rv == s.sv)
    return z3.And(e.running(r), z3.Not(e.intent(r)), s.st == d.step_status("ready"), s.rdy,
                  s.ac < sem.t.MAX_STEP_RUN_ATTEMPTS, z3.Not(epoch_receipt))


def inv29(sem: Semantics, x: Sys) -> B:
    """Every task candidate is admitted `created` by admit_task_attempt (numbers permitting)."""
    t = sem.admit_task_attempt(x, "inv29")
    sel = t.args["step"]
    out = []
    for k, s in enumerate(x.steps):
        created = z3.substitute(z3.And(t.guard, t.post.run.natt == x.run.natt + 1), (sel, z3.IntVal(k)))
        out.append(z3.Implies(z3.And(task_candidate(sem, x, s), x.run.natt < sem.t.MAX_RUN_ATTEMPTS), created))
    return _all(out)


def inv30(sem: Semantics, x: Sys) -> B:
    """Every terminal StepRun / attempt carries the code/summary pair of the path that ended it."""
    d, e, t = sem.d, sem.enc, sem.t

    def codes(rc: str | None, ssum: str | None, s: Step) -> B:
        return z3.And(s.rc == d.step_code(rc), s.ssum == d.text(ssum))

    def one(i: int, s: Step) -> B:
        terminal = e.step_in(s, t.TERMINAL_STEP)
        conv_rows = [z3.And(s.st == d.step_status(dec.target), codes(dec.result_code, dec.error_summary, s),
                            (x.run.reason == d.reason("timeout")) == key[1])
                     for key, dec in t.CANCEL_STEP_TABLE.items()
                     if dec.action == "mutate" and dec.target in d.step_status]
        worker_rows = []
        att_rows = []
        for (cmd, status), c in t.WORKER_PATH_CODES.items():
            path = "fail_start" if cmd == "fail_start" else "complete"
            on = z3.And(s.apath == d.attempt_path(path), s.at == d.attempt_status(status))
            worker_rows.append(z3.Implies(z3.And(on, s.st == d.step_status(status)),
                                          codes(c.step_result_code, c.step_error_summary, s)))
            att_rows.append(z3.Implies(on, z3.And(s.aerr == d.attempt_code(c.attempt_error_code),
                                                  s.asum == d.text(c.attempt_error_summary))))
        rec_rows = [z3.Implies(s.aerr == d.attempt_code(c.attempt_error_code),
                               s.asum == d.text(c.attempt_error_summary))
                    for c in t.RECOVERY_PATH_CODES.values()]
        nr = t.RECOVERY_PATH_CODES["execution_not_running"]
        step_rows = z3.And(
            z3.Implies(z3.And(terminal, s.spath == d.step_path("frontier")),
                       z3.And(s.st == d.step_status("skipped"), codes(t.FRONTIER_SKIP_RESULT_CODE, None, s))),
            z3.Implies(z3.And(terminal, s.spath == d.step_path("converge")), z3.Or(conv_rows or [z3.BoolVal(False)])),
            z3.Implies(z3.And(terminal, s.spath == d.step_path("recover")),
                       z3.And(s.st == d.step_status("failed"), codes(nr.step_result_code, nr.step_error_summary, s))),
            z3.Implies(terminal, s.spath != d.step_path("admit")),
            z3.Implies(z3.And(terminal, s.spath == d.step_path("worker")),
                       z3.And(d.attempt_path.isin(s.apath, ("fail_start", "complete")),
                              z3.Or([z3.And(s.st == d.step_status(v), s.at == d.attempt_status(v))
                                     for v in ("succeeded", "failed", "cancelled", "timed_out")]))),
            z3.Implies(z3.And(terminal, s.spath == d.step_path("recover")),
                       z3.And(s.at == d.attempt_status("lost"), s.aerr == d.attempt_code(nr.attempt_error_code))),
            *worker_rows,
        )
        conv_att = z3.Implies(s.apath == d.attempt_path("converge"),
                              z3.And(e.intent(x.run), s.at == sem.reason_target(x.run, "attempt_status", "status"),
                                     s.aerr == sem.reason_target(x.run, "attempt_code", "error_code"),
                                     s.asum == sem.reason_target(x.run, "text", "error_summary")))
        active_clean = z3.Implies(e.att_in(s, t.ACTIVE_ATTEMPT), s.aerr == d.attempt_code(None))
        return z3.And(step_rows, *att_rows, *rec_rows, conv_att, active_clean)
    return _steps(sem, x, one)


def inv31(sem: Semantics, x: Sys) -> B:
    def one(i: int, s: Step) -> B:
        return z3.And(s.ntr >= 0, s.ntr <= 1, z3.Implies(s.ntr == 1, z3.And(s.adl, s.adp)))
    return z3.And(z3.Not(x.run.g_tr_intent), _steps(sem, x, one))


# ---- strengthening lemmas ------------------------------------------------------------------------
def lemma_empty_slot(sem: Semantics, x: Sys) -> B:
    e = sem.enc
    return _steps(sem, x, lambda i, s: z3.Implies(z3.Not(e.has_attempt(s)), e.slot_is_empty(s)))


def lemma_attempt_history(sem: Semantics, x: Sys) -> B:
    """The start-barrier ghost counts exactly the slot's own start; deadlines only after a start."""
    e = sem.enc

    def one(i: int, s: Step) -> B:
        started = reached_starting(sem, s)
        return z3.And(s.g_nstart == z3.If(started, 1, 0), z3.Implies(s.adp, s.adl), z3.Implies(s.adl, started),
                      z3.Implies(s.ast, z3.And(started, z3.Not(e.att_in(s, ("claimed", "starting"))))),
                      z3.Implies(s.ntr > 0, s.adl))
    return _steps(sem, x, one)


def lemma_step_shape(sem: Semantics, x: Sys) -> B:
    """What the slot's attempt implies for the StepRun's version and attemptCount."""
    d, e, t = sem.d, sem.enc, sem.t
    unstarted = t.RECOVERY_PATH_CODES["unstarted_claim_expired"].attempt_error_code

    def one(i: int, s: Step) -> B:
        lost_unstarted = z3.And(s.at == d.attempt_status("lost"), s.aerr == d.attempt_code(unstarted))
        converged = z3.And(s.spath == d.step_path("converge"), e.step_in(s, ("cancelled", "timed_out")))
        return z3.And(
            z3.Implies(e.step_in(s, ("pending", "ready")), z3.And(s.ac == 0, z3.Not(s.sst))),
            z3.Implies(e.step_in(s, ("ready", "running")), s.rdy),
            z3.Implies(lost_unstarted, z3.Or(z3.And(s.st == d.step_status("ready"), s.sv == s.rv + 1),
                                             z3.And(converged, s.sv == s.rv + 2))),
            z3.Implies(s.apath == d.attempt_path("converge"), z3.And(converged, s.sv == s.rv + 1)),
            # the writer of the last mutation bounds the status it wrote
            z3.Implies(s.spath == d.step_path("admit"), z3.And(e.step_in(s, ("pending", "ready")), s.sv == 1)),
            z3.Implies(s.spath == d.step_path("frontier"), e.step_in(s, ("ready", "skipped"))),
            z3.Implies(s.spath == d.step_path("worker"),
                       e.step_in(s, ("running", "succeeded", "failed", "cancelled", "timed_out"))),
            z3.Implies(s.spath == d.step_path("recover"), e.step_in(s, ("ready", "failed"))),
            z3.Implies(s.spath == d.step_path("converge"), e.step_in(s, ("cancelled", "timed_out"))),
        )
    return _steps(sem, x, one)


def d3_attribution(sem: Semantics, x: Sys) -> B:
    """D-3 / task-attempts.md §7 read back from the state: a worker-path `cancelled` attempt proves a
    non-timeout intent, a worker-path `timed_out` proves a timeout intent or a passed deadline."""
    d, e = sem.d, sem.enc
    timeout = e.timeout_reason(x.run)

    def one(i: int, s: Step) -> B:
        worker = d.attempt_path.isin(s.apath, ("fail_start", "complete"))
        return z3.And(
            z3.Implies(z3.And(worker, s.at == d.attempt_status("cancelled")), z3.And(e.intent(x.run), z3.Not(timeout))),
            z3.Implies(z3.And(worker, s.at == d.attempt_status("timed_out")),
                       z3.Or(z3.And(e.intent(x.run), timeout), z3.And(s.adl, s.adp))))
    return _steps(sem, x, one)


def lemma_cancel_needs_intent(sem: Semantics, x: Sys) -> B:
    """Only cancel intent produces `cancelled` StepRuns and convergence writes: hence a Run without
    intent never aggregates to `cancelled` (AGG's cancelled row is dead for the frontier in v1)."""
    d, e = sem.d, sem.enc
    return _steps(sem, x, lambda i, s: z3.Implies(
        z3.Or(s.st == d.step_status("cancelled"), s.spath == d.step_path("converge"),
              s.apath == d.attempt_path("converge")), e.intent(x.run)))


def lemma_counters(sem: Semantics, x: Sys) -> B:
    r = x.run
    return z3.And(r.nother >= 0, r.ncancel >= 0, r.nterm >= 0,
                  _steps(sem, x, lambda i, s: z3.And(s.sv >= 1, s.cb >= 0, s.cb <= 1, s.ntr >= 0)))


def lemma_roots(sem: Semantics, x: Sys) -> B:
    """A step without needs is never pending (admission makes it ready)."""
    d, e = sem.d, sem.enc
    return _steps(sem, x, lambda i, s: z3.Implies(s.st == d.step_status("pending"), e.has_needs(i)))


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("INV-1", "version = eventSequence = number of events (by kind)", inv1),
    Invariant("INV-6", "StepRun resultCode/errorSummary shape rules; attempt code and text together", inv6),
    Invariant("INV-8", "StepRun version = number of its step.* events", inv8),
    Invariant("INV-9", "v1 status domain: no waiting_approval/lost, attemptCount ∈ {0,1} ⇔ startedAtMs", inv9),
    Invariant("INV-10", "Run shape: running ⇒ no code/summary/terminal path", inv10),
    Invariant("INV-11", "terminal Run ⇒ every StepRun terminal, no active attempt, no leased lease", inv11),
    Invariant("INV-12", "exactly one terminal event iff terminal, and it is the last event", inv12),
    Invariant("INV-13", "terminal attribution: AGG + frontier code without intent, reason mapping with intent", inv13),
    Invariant("INV-14", "intent ⇔ exactly one workflow.cancel_requested event", inv14),
    Invariant("INV-15", "no new ready-from-pending / admission / lease / start / running event after intent", inv15),
    Invariant("INV-16", "readyAtMs set ⇒ every need succeeded; an attempt ⇒ readyAtMs set", inv16),
    Invariant("INV-17", "skipped ⇒ dependency_not_succeeded, no summary, never ready, a direct blocking need", inv17),
    Invariant("INV-18", "pending ⇒ no attempt, never ready, version 1, no terminal event", inv18),
    Invariant("INV-19", "an active attempt only in a running Run (one slot per step)", inv19),
    Invariant("INV-20", "attempt numbers = attempts (per step), ≤ 8192; receipt epochs ≤ current version", inv20),
    Invariant("INV-21", "attempt ↔ StepRun ↔ lease ↔ callbackSequence coupling (§7) and its converse", inv21),
    Invariant("INV-22", "older attempts are unstarted lost claims; at most one attempt ever started", inv22),
    Invariant("INV-23", "convergence never settles/terminalizes anything that held execution authority", inv23),
    Invariant("INV-24", "lease status agrees with the attempt", inv24),
    Invariant("INV-25", "attempt lease keys mirror the lease", inv25),
    Invariant("INV-26", "lease generation ≥ 1 and version ≥ 0 when present", inv26),
    Invariant("INV-27", "attemptCount ≤ 64, attempt numbers ≤ 8192", inv27),
    Invariant("INV-28", "frontier candidate ⇔ advance_frontier would write", inv28),
    Invariant("INV-29", "task candidate ⇒ admit_task_attempt creates an attempt", inv29),
    Invariant("INV-30", "codes and summaries by path (state-machines.md §8)", inv30),
    Invariant("INV-31", "at most one timeout request per attempt, after its deadline, never under intent", inv31),
    Invariant("D3-attribution", "worker-path cancelled ⇒ non-timeout intent; timed_out ⇒ timeout intent or "
              "passed deadline", d3_attribution),
    Invariant("L-empty-slot", "a step without attempt has the canonical empty slot", lemma_empty_slot, lemma=True),
    Invariant("L-attempt-history", "start ghost = own start; deadline ⇒ started; epoch of active attempts",
              lemma_attempt_history, lemma=True),
    Invariant("L-step-shape", "attemptCount 0 before the barrier; versions after requeue or settlement",
              lemma_step_shape, lemma=True),
    Invariant("L-counters", "counters are non-negative, versions ≥ 1, callbackSequence ∈ {0,1}", lemma_counters,
              lemma=True),
    Invariant("L-cancel-needs-intent", "cancelled StepRuns and convergence writes only under intent",
              lemma_cancel_needs_intent, lemma=True),
    Invariant("L-roots", "a step without needs is never pending", lemma_roots, lemma=True),
)


def conjunction(sem: Semantics, x: Sys) -> B:
    return z3.And([inv.fn(sem, x) for inv in INVARIANTS])

