"""Property 2: the decision tables are total and deterministic over their whole input domain.

For each table, Z3 checks that every input of the domain matches exactly one row (dict tables) or
that the first-match winner exists and is unique (precedence lists), that no row is dead (each row
decides some input), and the well-formedness facts the transition relation relies on (targets are
legal StepRun transitions, codes satisfy the StepRun shape rules, texts are the fixed texts, ...).
The Z3 encodings of AGG and of the completion mapping are compared with the model's own
`aggregate` / `completion_rule` on their whole (finite) domain.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import z3
from qlwf.model import tables as model_tables

from .domains import dom
from .encoding import Encoding
from .results import PROVED, VIOLATED, Result
from .transitions import Semantics


class _Check:
    """Collects failed facts of one table property."""

    def __init__(self, name: str, bound: int) -> None:
        self.name, self.bound = name, bound
        self.failures: list[str] = []
        self.start = time.perf_counter()
        self.queries = 0

    def fact(self, ok: bool, message: str) -> None:
        if not ok:
            self.failures.append(message)

    def valid(self, formula: z3.BoolRef, message: str, witness: Callable[[z3.ModelRef], str] | None = None) -> None:
        s = z3.Solver()
        s.add(z3.Not(formula))
        self.queries += 1
        if s.check() != z3.unsat:
            self.failures.append(message + (f": {witness(s.model())}" if witness and s.check() == z3.sat else ""))

    def satisfiable(self, formula: z3.BoolRef, message: str) -> None:
        s = z3.Solver()
        s.add(formula)
        self.queries += 1
        if s.check() != z3.sat:
            self.failures.append(message)

    def result(self) -> Result:
        res = Result(self.name, PROVED if not self.failures else VIOLATED, self.bound, time.perf_counter() - self.start,
                     queries=self.queries)
        if self.failures:
            res.detail = self.failures[0]
            res.counterexample = {"kind": "decision table defect", "failures": self.failures}
        return res


def _exactly_one(matches: list[z3.BoolRef]) -> z3.BoolRef:
    return z3.Sum([z3.If(m, 1, 0) for m in matches] or [z3.IntVal(0)]) == 1


def check_cancel_step(enc: Encoding) -> Result:
    t, d = enc.t, enc.d
    c = _Check("TABLE-cancel-step", len(t.STEP_STATUSES) * 2)
    rows = t.CANCEL_STEP_TABLE
    st, timeout = d.step_status.var("in.status"), z3.Bool("in.timeout")
    c.fact(all(k[0] in t.STEP_STATUSES and isinstance(k[1], bool) for k in rows), "a key is outside the domain")
    matches = [z3.And(st == d.step_status(k[0]), timeout == k[1]) for k in rows if k[0] in d.step_status]
    c.valid(_exactly_one(matches), "some (status, timeout?) input has no row or several rows",
            lambda m: f"{m.eval(st, model_completion=True)} timeout={m.eval(timeout, model_completion=True)}")
    for (status, to), dec in rows.items():
        c.fact(dec.action in ("mutate", "blocked", "skip"), f"{status}/{to}: unknown action {dec.action}")
        c.fact((dec.action == "skip") == (status in t.TERMINAL_STEP), f"{status}/{to}: skip iff terminal")
        if dec.action == "mutate":
            c.fact(dec.target in t.STEP_TRANSITIONS.get(status, ()), f"{status}/{to}: {status} → {dec.target} "
                   "is not a StepRun transition")
            c.fact(dec.target in t.TERMINAL_STEP, f"{status}/{to}: target {dec.target} is not terminal")
            c.fact((dec.result_code is not None) == (dec.target in t.STEP_RESULT_CODE_REQUIRED),
                   f"{status}/{to}: resultCode shape")
            c.fact(dec.error_summary is None or dec.target in t.STEP_ERROR_SUMMARY_ALLOWED,
                   f"{status}/{to}: errorSummary not allowed for {dec.target}")
        else:
            c.fact(dec.target is None and dec.result_code is None, f"{status}/{to}: non-mutating row writes")
    return c.result()


def check_cancel_attempt(enc: Encoding) -> Result:
    t, d = enc.t, enc.d
    leases = (None, *t.LEASE_STATUSES)
    c = _Check("TABLE-cancel-attempt", len(t.ACTIVE_ATTEMPT) * len(leases))
    rows = t.CANCEL_ATTEMPT_TABLE
    lease_dom = dom("TableLease", ("none", *t.LEASE_STATUSES))
    a, ls = d.attempt_status.var("in.attempt"), lease_dom.var("in.lease")
    c.fact(all(k[0] in t.ACTIVE_ATTEMPT and k[1] in leases for k in rows), "a key is outside the domain")
    matches = {k: z3.And(a == d.attempt_status(k[0]), ls == lease_dom(k[1] or "none"))
               for k in rows if k[0] in d.attempt_status and (k[1] or "none") in lease_dom}
    active = d.attempt_status.isin(a, t.ACTIVE_ATTEMPT)
    c.valid(z3.Implies(active, _exactly_one(list(matches.values()))),
            "some (active attempt, lease) input has no row or several rows",
            lambda m: f"{m.eval(a, model_completion=True)} / {m.eval(ls, model_completion=True)}")
    c.fact(set(rows.values()) <= {"settle", "blocked"}, "decisions must be settle or blocked")
    blocked = z3.Or([m for k, m in matches.items() if rows[k] == "blocked"] or [z3.BoolVal(False)])
    # cancellation.md §5: blocked ⇔ attempt.status ≠ claimed OR leaseStatus = leased
    spec = z3.Or(a != d.attempt_status("claimed"), ls == lease_dom("leased"))
    c.valid(z3.Implies(active, blocked == spec), "the table disagrees with 'blocked ⇔ ≠ claimed ∨ leased'")
    return c.result()


def check_reason_target(enc: Encoding) -> Result:
    t, d = enc.t, enc.d
    c = _Check("TABLE-reason-target", len(t.CANCEL_REASONS))
    reason = d.reason.var("in.reason")
    matches = [reason == d.reason(r) for r in t.CANCEL_REASON_TARGET if r in d.reason]
    c.fact(set(t.CANCEL_REASON_TARGET) <= set(t.CANCEL_REASONS), "a key is not a cancel reason")
    c.valid(z3.Implies(reason != d.reason("none"), _exactly_one(matches)), "some cancel reason has no target",
            lambda m: str(m.eval(reason, model_completion=True)))
    for r, tgt in t.CANCEL_REASON_TARGET.items():
        c.fact(tgt.status in t.TERMINAL_RUN and tgt.status in t.TERMINAL_ATTEMPT, f"{r}: status {tgt.status}")
        c.fact(t.CODE_TEXTS.get(tgt.error_code) == tgt.error_summary, f"{r}: summary is not the text of its code")
        c.fact(tgt.status in {dec.target for dec in t.CANCEL_STEP_TABLE.values()},
               f"{r}: status {tgt.status} is never a StepRun convergence target")
    return c.result()


def check_aggregate(enc: Encoding, sem: Semantics) -> Result:
    """AGG over N symbolic statuses: a unique winner for every all-terminal vector, no dead row."""
    t, d = enc.t, enc.d
    c = _Check("TABLE-aggregate", enc.n)
    members = [m for m, _ in t.AGG_PRECEDENCE]
    c.fact(all(a.isdisjoint(b) for a, b in itertools.combinations(members, 2)), "precedence rows overlap")
    c.fact(set().union(*members) == set(t.BLOCKING_STEP), "precedence rows must cover exactly BLOCKING_STEP")
    c.fact(len({r for _, r in t.AGG_PRECEDENCE} | {"succeeded"}) == len(t.AGG_PRECEDENCE) + 1,
           "precedence results are not distinct")
    c.fact(set(t.FRONTIER_TERMINAL_ERROR_CODE) == {r for _, r in t.AGG_PRECEDENCE} | {"succeeded"},
           "FRONTIER_TERMINAL_ERROR_CODE does not cover exactly the AGG outcomes")
    xs = [d.step_status.var(f"in.s{i}") for i in range(enc.n)]
    terminal, out = sem.aggregate(xs)
    all_term = z3.And([d.step_status.isin(x, t.TERMINAL_STEP) for x in xs])
    c.valid(terminal == all_term, "AGG is defined exactly when every status is terminal")
    results = [r for _, r in t.AGG_PRECEDENCE] + ["succeeded"]
    c.valid(z3.Implies(all_term, _exactly_one([out == d.run_status(r) for r in results])), "AGG is not a function")
    c.valid(z3.Implies(all_term, (out == d.run_status("succeeded"))
                       == z3.And([x == d.step_status("succeeded") for x in xs])),
            "AGG is succeeded iff every StepRun succeeded")
    for r in results:
        c.satisfiable(z3.And(all_term, out == d.run_status(r)), f"AGG row {r} is dead at N={enc.n}")
    # the Z3 encoding equals the model's aggregate() on the whole domain for small N
    for vec in itertools.product(t.STEP_STATUSES, repeat=min(enc.n, 2)):
        got = z3.simplify(sem.aggregate([d.step_status(v) for v in vec])[1])
        want = model_tables.aggregate(list(vec))
        if want is not None:
            c.fact(d.run_status.decode(got) == want, f"AGG{vec}: encoding {got} ≠ model {want}")
    return c.result()


def check_completion(enc: Encoding, sem: Semantics) -> Result:
    t = enc.t
    c = _Check("TABLE-completion", 2 * 16)
    intent, timeout, deadline, exit0 = z3.Bools("in.intent in.timeout in.deadline in.exit_zero")
    domain = z3.Implies(timeout, intent)  # the model passes `intent and reason == timeout`
    for command, prev in (("fail_start", "ready"), ("complete_attempt", "running")):
        cases = sem.completion_cases(command, intent, timeout, deadline,
                                     exit0 if command == "complete_attempt" else z3.BoolVal(False))
        c.valid(z3.Implies(domain, _exactly_one([cond for cond, _ in cases])), f"{command}: not total/deterministic")
        for (cond, status), rule in zip(cases, [r for r in t.COMPLETION_RULES if r.command == command], strict=True):
            c.satisfiable(z3.And(domain, cond), f"{command}: rule {rule.rule} is dead")
            codes = t.WORKER_PATH_CODES.get((command, status))
            c.fact(codes is not None, f"{command}: no WORKER_PATH_CODES row for {status}")
            c.fact(status in t.STEP_TRANSITIONS.get(prev, ()), f"{command}: {prev} → {status} is not allowed")
        for facts in itertools.product((False, True), repeat=4):
            i, to, dl, ez = facts
            if to and not i:
                continue
            ez = ez if command == "complete_attempt" else False
            want = model_tables.completion_rule(command, i, to, dl, ez).status if t.COMPLETION_RULES is \
                model_tables.COMPLETION_RULES else None
            got = [s for cond, s in cases
                   if z3.is_true(z3.simplify(z3.substitute(cond, (intent, z3.BoolVal(i)), (timeout, z3.BoolVal(to)),
                                                           (deadline, z3.BoolVal(dl)), (exit0, z3.BoolVal(ez)))))]
            if want is not None:
                c.fact(got == [want], f"{command}{facts}: encoding {got} ≠ model {want}")
    return c.result()


def check_path_codes(enc: Encoding) -> Result:
    """WORKER_PATH_CODES / RECOVERY_PATH_CODES / frontier codes: shapes and fixed texts."""
    t = enc.t
    c = _Check("TABLE-path-codes", len(t.WORKER_PATH_CODES) + len(t.RECOVERY_PATH_CODES))
    for (command, status), codes in t.WORKER_PATH_CODES.items():
        where = f"{command}/{status}"
        c.fact((codes.step_result_code is not None) == (status in t.STEP_RESULT_CODE_REQUIRED), f"{where}: resultCode")
        c.fact(codes.step_error_summary is None or status in t.STEP_ERROR_SUMMARY_ALLOWED, f"{where}: errorSummary")
        c.fact(codes.step_result_code == (codes.attempt_error_code or "").lower() or
               (codes.step_result_code is None and codes.attempt_error_code is None),
               f"{where}: StepRun resultCode is not the attempt errorCode in lowercase")
        c.fact(t.CODE_TEXTS.get(codes.attempt_error_code) == codes.attempt_error_summary
               or codes.attempt_error_code is None, f"{where}: attempt text")
    for reason, codes in t.RECOVERY_PATH_CODES.items():
        c.fact(t.CODE_TEXTS.get(codes.attempt_error_code) == codes.attempt_error_summary, f"{reason}: attempt text")
    c.fact(t.FRONTIER_SKIP_RESULT_CODE is not None and "skipped" in t.STEP_RESULT_CODE_REQUIRED, "skip code shape")
    return c.result()


def check_tables(enc: Encoding, sem: Semantics) -> list[Result]:
    return [check_cancel_step(enc), check_cancel_attempt(enc), check_reason_target(enc), check_aggregate(enc, sem),
            check_completion(enc, sem), check_path_codes(enc)]

