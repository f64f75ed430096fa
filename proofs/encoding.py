"""Symbolic encoding of ONE workflow of N steps (the Z3 state vector).

Abstraction (what a symbolic state is, relative to the model's `State`):

* The DAG is a boolean matrix `need[i][j]`, defined only for j < i: step indices follow a
  topological order, so every DAG of N steps is one assignment of the matrix. The matrix is
  shared by all states of a trace (plans are immutable).
* Run: status, version, eventSequence and the number of events (three integers, INV-1 relates
  them), cancel intent as the reason (`none` = no intent), errorCode and errorSummary (as the fixed
  code/text vocabulary of the tables), the terminalizing path (frontier / convergence), the number
  of admitted attempts (attempt numbers are Run-global), and the event log abstracted to counters
  (cancel requests, terminal events, "other" attempt/lease events) plus ghost flags for the
  order-dependent history facts: an event after the terminal event (INV-12), new work after intent
  (INV-15), a task timeout request written under intent (INV-31).
* StepRun i: status, version, attemptCount, readyAtMs/startedAtMs presence, resultCode, errorSummary,
  the kind of writer of its last mutation (admission / frontier / worker / recovery / convergence,
  i.e. the mutation-id prefix), and its number of `step.*` events.
* Attempt numbers: the number of attempts admitted per step (older attempts included); the Run's
  attempt count is their sum (attempt numbers are Run-global, D-12).
* Attempt: ONE slot per step holding its latest attempt (status, receipt epoch = stepRunVersion,
  callbackSequence, startedAtMs / deadlineAtMs presence, deadline passed, number of timeout
  requests, errorCode/errorSummary, terminating path, lease keys present, mirrored lease generation
  and version) and its lease (absent / leased-live / leased-expired / released / completed, the
  release reason class lease_expired vs worker, generation, version). Older attempts of the step
  are summarized by two ghosts: "some older attempt is not an unstarted lost claim" and "number of
  attempts of the step that ever reached starting" (INV-22).
* Dropped: ids, digests, JSON mirrors, timestamps (only live/expired and deadline-passed survive,
  and time advance flips them monotonically), worker identities (a worker command's arguments
  are abstracted to "matches the lease holder (workerId, leaseGeneration)"), bindings, payloads,
  int31 ceilings (integers are unbounded), other workflows (they share nothing but the clock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any, TypeAlias

import z3

from .domains import Dom, dom
from .tables_view import Tables

# z3 is untyped (Any to mypy): these aliases document which kind of Z3 term a value is.
E: TypeAlias = z3.ExprRef
B: TypeAlias = z3.BoolRef

INT = "int"
BOOL = "bool"


@dataclass(frozen=True)
class Step:
    st: Any   # StepRun status
    sv: Any   # StepRun version
    ac: Any   # attemptCount
    rdy: Any  # readyAtMs set
    sst: Any  # startedAtMs set
    rc: Any   # resultCode
    ssum: Any  # errorSummary
    spath: Any  # writer of the last mutation
    nse: Any  # number of step.* events of this StepRun
    nat: Any  # attempts admitted for this StepRun (all of them, older ones included)
    at: Any   # attempt slot status (`none` = no attempt)
    rv: Any   # receipt stepRunVersion (the admitted epoch)
    cb: Any   # callbackSequence
    ast: Any  # attempt startedAtMs set
    adl: Any  # deadlineAtMs set
    adp: Any  # deadline passed (deadlineAtMs <= now)
    ntr: Any  # task timeout requests written for the attempt
    aerr: Any  # attempt errorCode
    asum: Any  # attempt errorSummary
    apath: Any  # path that terminated the attempt
    akeys: Any  # attempt lease keys present
    ls: Any   # lease state
    lrx: Any  # lease released with reason lease_expired (vs a worker reason)
    lgen: Any  # lease generation (0 when absent)
    lver: Any  # lease version (0 when absent)
    algen: Any  # attempt mirror of the generation (0 without keys)
    alver: Any  # attempt mirror of the lease version (0 without keys)
    g_prior_bad: Any  # ghost: an older attempt of the step is not an unstarted lost claim
    g_nstart: Any  # ghost: attempts of the step that ever reached starting


@dataclass(frozen=True)
class Run:
    rs: Any
    ver: Any
    seq: Any
    nev: Any
    reason: Any  # cancel reason, `none` = no intent
    rerr: Any
    rsum: Any
    rpath: Any  # none / frontier / converge
    natt: Any  # attempts admitted (attempt numbers are 1..natt)
    ncancel: Any  # workflow.cancel_requested events
    nterm: Any  # parent terminal events
    nother: Any  # every other non-step event except workflow.admitted and task_attempt_admitted
    g_after_term: Any  # ghost: an event was appended after the terminal event
    g_work_after_intent: Any  # ghost: INV-15 event after workflow.cancel_requested
    g_tr_intent: Any  # ghost: a task timeout request was written under intent


@dataclass(frozen=True)
class Sys:
    run: Run
    steps: tuple[Step, ...]


class Domains:
    """Every enumeration sort, sized from the tables."""

    def __init__(self, t: Tables) -> None:
        lease_states = ["absent"]
        for s in t.LEASE_STATUSES:
            lease_states += ["live", "expired"] if s == "leased" else [s]
        self.run_status = dom("RunStatus", t.RUN_STATUSES)
        self.step_status = dom("StepStatus", t.STEP_STATUSES)
        self.attempt_status = dom("AttemptStatus", ["none", *t.ATTEMPT_STATUSES])
        self.lease_state = dom("LeaseState", lease_states)
        self.reason = dom("Reason", ["none", *t.CANCEL_REASONS])
        self.step_code = dom("StepCode", t.step_codes())
        self.attempt_code = dom("AttemptCode", t.attempt_codes())
        self.run_code = dom("RunCode", t.run_codes())
        self.text = dom("Text", t.texts())
        self.step_path = dom("StepPath", ["admit", "frontier", "worker", "recover", "converge"])
        self.attempt_path = dom("AttemptPath", ["none", "fail_start", "complete", "recover", "converge"])
        self.run_path = dom("RunPath", ["none", "frontier", "converge"])
        self.evidence = dom("Evidence", t.RECOVERY_EVIDENCE)


STEP_KINDS: dict[str, str] = {
    "st": "step_status", "sv": INT, "ac": INT, "rdy": BOOL, "sst": BOOL, "rc": "step_code", "ssum": "text",
    "spath": "step_path", "nse": INT, "nat": INT, "at": "attempt_status", "rv": INT, "cb": INT, "ast": BOOL,
    "adl": BOOL, "adp": BOOL, "ntr": INT, "aerr": "attempt_code", "asum": "text", "apath": "attempt_path",
    "akeys": BOOL, "ls": "lease_state", "lrx": BOOL, "lgen": INT, "lver": INT, "algen": INT, "alver": INT,
    "g_prior_bad": BOOL, "g_nstart": INT,
}
RUN_KINDS: dict[str, str] = {
    "rs": "run_status", "ver": INT, "seq": INT, "nev": INT, "reason": "reason", "rerr": "run_code",
    "rsum": "text", "rpath": "run_path", "natt": INT, "ncancel": INT, "nterm": INT, "nother": INT,
    "g_after_term": BOOL, "g_work_after_intent": BOOL, "g_tr_intent": BOOL,
}
assert list(STEP_KINDS) == [f.name for f in fields(Step)]
assert list(RUN_KINDS) == [f.name for f in fields(Run)]


class Encoding:
    """One workflow of N steps: domains, the need matrix, state constructors and Init."""

    def __init__(self, n: int, tables: Tables | None = None) -> None:
        if n < 1:
            raise ValueError("a workflow has at least one step")
        self.n = n
        self.t = tables or Tables.model()
        self.d = Domains(self.t)
        self.need: list[list[B]] = [[z3.Bool(f"need_{i}_{j}") for j in range(i)] for i in range(n)]

    # ---- variables ------------------------------------------------------------------------------
    def _var(self, name: str, kind: str) -> E:
        if kind == INT:
            return z3.Int(name)
        if kind == BOOL:
            return z3.Bool(name)
        domain: Dom = getattr(self.d, kind)
        return domain.var(name)

    def fresh(self, prefix: str) -> Sys:
        run = Run(**{f: self._var(f"{prefix}.run.{f}", k) for f, k in RUN_KINDS.items()})
        steps = tuple(Step(**{f: self._var(f"{prefix}.s{i}.{f}", k) for f, k in STEP_KINDS.items()})
                      for i in range(self.n))
        return Sys(run, steps)

    def kind_domain(self, kind: str) -> Dom | None:
        return None if kind in (INT, BOOL) else getattr(self.d, kind)

    # ---- fieldwise combinators -------------------------------------------------------------------
    @staticmethod
    def pairs(a: Sys, b: Sys) -> Iterator[tuple[E, E]]:
        for f in RUN_KINDS:
            yield getattr(a.run, f), getattr(b.run, f)
        for sa, sb in zip(a.steps, b.steps, strict=True):
            for f in STEP_KINDS:
                yield getattr(sa, f), getattr(sb, f)

    def equal(self, a: Sys, b: Sys) -> B:
        return z3.And([x == y for x, y in self.pairs(a, b)])

    @staticmethod
    def ite_step(c: B, a: Step, b: Step) -> Step:
        return Step(**{f: _ite(c, getattr(a, f), getattr(b, f)) for f in STEP_KINDS})

    @staticmethod
    def ite_run(c: B, a: Run, b: Run) -> Run:
        return Run(**{f: _ite(c, getattr(a, f), getattr(b, f)) for f in RUN_KINDS})

    def ite(self, c: B, a: Sys, b: Sys) -> Sys:
        return Sys(self.ite_run(c, a.run, b.run),
                   tuple(self.ite_step(c, x, y) for x, y in zip(a.steps, b.steps, strict=True)))

    # ---- common predicates -----------------------------------------------------------------------
    def intent(self, r: Run) -> B:
        return r.reason != self.d.reason("none")

    def timeout_reason(self, r: Run) -> B:
        return r.reason == self.d.reason("timeout")

    def running(self, r: Run) -> B:
        return r.rs == self.d.run_status("running")

    def step_in(self, s: Step, statuses: Any) -> B:
        return self.d.step_status.isin(s.st, statuses)

    def att_in(self, s: Step, statuses: Any) -> B:
        return self.d.attempt_status.isin(s.at, statuses)

    def has_attempt(self, s: Step) -> B:
        return s.at != self.d.attempt_status("none")

    def leased(self, s: Step) -> B:
        return self.d.lease_state.isin(s.ls, ("live", "expired"))

    def lease_is(self, s: Step, state: str) -> B:
        return s.ls == self.d.lease_state(state)

    def released_by_worker(self, s: Step) -> B:
        return z3.And(self.lease_is(s, "released"), z3.Not(s.lrx))

    def lease_kind_is(self, s: Step, status: str | None) -> B:
        """The lease status as the tables see it: None = absent, `leased` = live or expired."""
        if status is None:
            return self.lease_is(s, "absent")
        if status == "leased":
            return self.leased(s)
        return self.lease_is(s, status)

    def empty_slot(self, s: Step) -> Step:
        """The canonical values of a step without any attempt (and the fields a new attempt resets)."""
        d = self.d
        return replace(s, at=d.attempt_status("none"), rv=z3.IntVal(0), cb=z3.IntVal(0), ast=z3.BoolVal(False),
                       adl=z3.BoolVal(False), adp=z3.BoolVal(False), ntr=z3.IntVal(0), aerr=d.attempt_code(None),
                       asum=d.text(None), apath=d.attempt_path("none"), akeys=z3.BoolVal(False),
                       ls=d.lease_state("absent"), lrx=z3.BoolVal(False), lgen=z3.IntVal(0), lver=z3.IntVal(0),
                       algen=z3.IntVal(0), alver=z3.IntVal(0))

    def slot_is_empty(self, s: Step) -> B:
        e = self.empty_slot(s)
        return z3.And([getattr(s, f) == getattr(e, f) for f in STEP_KINDS
                       if f not in ("st", "sv", "ac", "rdy", "sst", "rc", "ssum", "spath", "nse", "nat")]
                      + [s.g_nstart == 0, z3.Not(s.g_prior_bad)])

    def has_needs(self, i: int) -> B:
        return z3.Or(self.need[i]) if self.need[i] else z3.BoolVal(False)

    # ---- Init = admit_workflow ---------------------------------------------------------------------
    def init(self, x: Sys) -> B:
        """admit_workflow of one plan: version N+1, roots ready, the others pending."""
        d, n = self.d, self.n
        r = x.run
        cs = [r.rs == d.run_status("running"), r.ver == n + 1, r.seq == n + 1, r.nev == n + 1,
              r.reason == d.reason("none"), r.rerr == d.run_code(None), r.rsum == d.text(None),
              r.rpath == d.run_path("none"), r.natt == 0, r.ncancel == 0, r.nterm == 0, r.nother == 0,
              z3.Not(r.g_after_term), z3.Not(r.g_work_after_intent), z3.Not(r.g_tr_intent)]
        for i, s in enumerate(x.steps):
            root = z3.Not(self.has_needs(i))
            cs += [s.st == z3.If(root, d.step_status("ready"), d.step_status("pending")), s.sv == 1, s.ac == 0,
                   s.rdy == root, z3.Not(s.sst), s.rc == d.step_code(None), s.ssum == d.text(None),
                   s.spath == d.step_path("admit"), s.nse == 1, s.nat == 0, self.slot_is_empty(s)]
        return z3.And(cs)

    def need_of(self, fixed: list[list[bool]]) -> B:
        """Fix the DAG to a concrete matrix."""
        return z3.And([self.need[i][j] == fixed[i][j] for i in range(self.n) for j in range(i)] or [z3.BoolVal(True)])

    def map_steps(self, x: Sys, fn: Callable[[int, Step], Step]) -> Sys:
        return Sys(x.run, tuple(fn(i, s) for i, s in enumerate(x.steps)))


def _ite(c: B, a: Any, b: Any) -> Any:
    if a is b:
        return a
    if isinstance(a, z3.ExprRef) and isinstance(b, z3.ExprRef) and a.eq(b):
        return a
    return z3.If(c, a, b)
