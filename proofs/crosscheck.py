"""Encoding ↔ model cross-check.

For every step of seeded random model traces: abstract the concrete pre-state (`abstract`), fix it
and the abstracted arguments in the command's disjunct, and check with Z3 that

* the model accepted  ⇒  guard ∧ post_c = abstract(model post-state) is satisfiable, and
  guard ∧ post_c ≠ abstract(model post-state) is not: the relation admits exactly that post-state;
* the model refused (Invalid / Conflict / Unavailable)  ⇒  the guard is unsatisfiable.

Init is checked the same way against admit_workflow, the query commands against the candidate
predicates of the encoding, and convergence pages against the page encoding.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import z3
from qlwf.model import ids
from qlwf.model import tables as T
from qlwf.model.cancellation import accumulate_page
from qlwf.model.state import State

from . import pages
from .driver import Driver, Trace, TraceStep
from .encoding import RUN_KINDS, STEP_KINDS, Encoding, Sys
from .invariants import task_candidate
from .rules import Transition
from .tables_view import Tables
from .transitions import COMMANDS, Semantics

TERMINAL_RUN_EVENTS = {f"workflow.{s}" for s in T.TERMINAL_RUN}
ATTEMPT_TERMINAL_EVENTS = {f"workflow.task_attempt.{s}" for s in T.TERMINAL_ATTEMPT}
NEW_WORK_EVENTS = {"workflow.task_attempt_admitted", "workflow.task_dispatch_leased", "workflow.task_attempt.starting",
                   "workflow.task_attempt.running"}
STEP_PATH_PREFIXES = tuple((pre, path) for path, pres in ids.STEP_MUTATION_PREFIXES.items() for pre in pres)
UNSTARTED = T.RECOVERY_PATH_CODES["unstarted_claim_expired"].attempt_error_code
Abs = dict[str, Any]


# ------------------------------------------------------------------------------------------------
# Abstraction of concrete states
def step_order(state: State, run_id: str) -> tuple[list[str], list[list[int]]]:
    """StepRun ids in a topological order (ties by stepKey) and the needs as indices."""
    adm = state.admission_of_run(run_id)[0]
    plan_steps = {p["stepKey"]: p for p in adm["plan"]["steps"]}
    order: list[str] = []
    remaining = sorted(plan_steps)
    while remaining:
        key = next(k for k in remaining if all(n in order for n in plan_steps[k]["needs"]))
        order.append(key)
        remaining.remove(key)
    ids = [plan_steps[k]["stepRunId"] for k in order]
    needs = [[order.index(n) for n in plan_steps[k]["needs"]] for k in order]
    return ids, needs


def _lease_state(lease: dict[str, Any] | None, clock: int) -> str:
    if lease is None:
        return "absent"
    if lease["status"] == "leased":
        return "live" if lease["expiresAtMs"] > clock else "expired"
    return str(lease["status"])


def _attempt_path(attempt: dict[str, Any], events: tuple[dict[str, Any], ...]) -> str:
    if attempt["status"] in T.ACTIVE_ATTEMPT:
        return "none"
    ev = next(e for e in events if e.get("attemptId") == attempt["id"] and e["type"] in ATTEMPT_TERMINAL_EVENTS)
    if ev["type"] == "workflow.task_attempt.lost":
        return "recover"
    if ev.get("actorId") == T.CANCELLATION_ACTOR["id"]:
        return "converge"
    return "fail_start" if ev["payload"].get("exit_code") is None else "complete"


def abstract(state: State, run_id: str, order: list[str]) -> Abs:
    run = state.runs[run_id]
    events = state.events_of(run_id)
    types = [e["type"] for e in events]
    cancel_seq = next((e["sequence"] for e in events if e["type"] == "workflow.cancel_requested"), None)
    term_seq = next((e["sequence"] for e in events if e["type"] in TERMINAL_RUN_EVENTS), None)
    term_ev = next((e for e in events if e["type"] in TERMINAL_RUN_EVENTS), None)
    after_intent = [e for e in events if cancel_seq is not None and e["sequence"] > cancel_seq]
    n_step = sum(1 for t in types if t.startswith("step."))
    counted = ("workflow.admitted", "workflow.task_attempt_admitted", "workflow.cancel_requested")
    nother = sum(1 for t in types if not t.startswith("step.") and t not in counted and t not in TERMINAL_RUN_EVENTS)
    attempts = state.attempts_of_run(run_id)
    r = {
        "rs": run["status"], "ver": run["version"], "seq": run["eventSequence"], "nev": len(events),
        "reason": run.get("cancelReason", "none"), "rerr": run.get("errorCode"), "rsum": run.get("errorSummary"),
        "rpath": "none" if term_ev is None else (
            "converge" if term_ev.get("actorId") == T.CANCELLATION_ACTOR["id"] else "frontier"),
        "natt": len(attempts), "ncancel": types.count("workflow.cancel_requested"),
        "nterm": sum(1 for t in types if t in TERMINAL_RUN_EVENTS), "nother": nother,
        "g_after_term": term_seq is not None and any(e["sequence"] > term_seq for e in events),
        "g_work_after_intent": any(e["type"] in NEW_WORK_EVENTS or (e["type"] == "step.ready"
                                                                    and e["payload"]["from"] == "pending")
                                   for e in after_intent),
        "g_tr_intent": any(e["type"] == "workflow.task_timeout_requested" for e in after_intent),
    }
    if 1 + n_step + r["natt"] + r["ncancel"] + r["nterm"] + nother != len(events):  # not `assert`: -O keeps it
        raise ValueError("event census of the model state does not add up")
    steps = []
    for sid in order:
        s = state.step_runs[sid]
        mine = sorted((a for a in attempts if a["stepRunId"] == sid), key=lambda a: a["attempt"])
        step = {
            "st": s["status"], "sv": s["version"], "ac": s["attemptCount"], "rdy": s["readyAtMs"] is not None,
            "sst": s["startedAtMs"] is not None, "rc": s["resultCode"], "ssum": s["errorSummary"],
            "spath": next(p for pre, p in STEP_PATH_PREFIXES if s["lastMutationId"].startswith(pre)),
            "nse": sum(1 for e in events if e["type"].startswith("step.") and e.get("stepRunId") == sid),
            "nat": len(mine),
            "g_prior_bad": any(not (a["status"] == "lost" and a.get("errorCode") == UNSTARTED
                                    and "startedAtMs" not in a and "deadlineAtMs" not in a) for a in mine[:-1]),
            "g_nstart": sum(1 for a in mine if any(e["type"] == "workflow.task_attempt.starting"
                                                   and e.get("attemptId") == a["id"] for e in events)),
        }
        step |= _slot(state, mine[-1] if mine else None, events)
        steps.append(step)
    return {"run": r, "steps": steps}


def _slot(state: State, a: dict[str, Any] | None, events: tuple[dict[str, Any], ...]) -> Abs:
    if a is None:
        return {"at": "none", "rv": 0, "cb": 0, "ast": False, "adl": False, "adp": False, "ntr": 0, "aerr": None,
                "asum": None, "apath": "none", "akeys": False, "ls": "absent", "lrx": False, "lgen": 0, "lver": 0,
                "algen": 0, "alver": 0}
    lease = state.leases.get(a["id"])
    return {
        "at": a["status"], "rv": state.receipts[a["id"]]["stepRunVersion"], "cb": a["callbackSequence"],
        "ast": "startedAtMs" in a, "adl": "deadlineAtMs" in a,
        "adp": "deadlineAtMs" in a and a["deadlineAtMs"] <= state.clock,
        "ntr": sum(1 for e in events if e["type"] == "workflow.task_timeout_requested"
                   and e.get("attemptId") == a["id"]),
        "aerr": a.get("errorCode"), "asum": a.get("errorSummary"), "apath": _attempt_path(a, events),
        "akeys": "workerId" in a, "ls": _lease_state(lease, state.clock),
        "lrx": lease is not None and lease.get("releaseReason") == "lease_expired",
        "lgen": lease["leaseGeneration"] if lease else 0, "lver": lease["version"] if lease else 0,
        "algen": a.get("leaseGeneration", 0), "alver": a.get("leaseVersion", 0),
    }


def fix(enc: Encoding, x: Sys, a: Abs, cache: dict[Any, z3.BoolRef] | None = None) -> z3.BoolRef:
    """Constrain a symbolic state to an abstract concrete one.

    Per-part conjunctions are cached by (state, part, values): consecutive states share most parts,
    and building Z3 terms from Python dominates the cost of a check otherwise."""
    cache = {} if cache is None else cache
    parts = []
    run_key = (id(x), "run", tuple(a["run"][f] for f in RUN_KINDS))
    if run_key not in cache:
        cache[run_key] = _and([_eq(enc, getattr(x.run, f), k, a["run"][f]) for f, k in RUN_KINDS.items()])
    parts.append(cache[run_key])
    for i, (s, v) in enumerate(zip(x.steps, a["steps"], strict=True)):
        key = (id(x), i, tuple(v[f] for f in STEP_KINDS))
        if key not in cache:
            cache[key] = _and([_eq(enc, getattr(s, f), k, v[f]) for f, k in STEP_KINDS.items()])
        parts.append(cache[key])
    return _and(parts)


def _and(xs: list[z3.BoolRef]) -> z3.BoolRef:
    """z3.And without the per-argument sort coercion of the Python API (all arguments are Bool)."""
    ctx = xs[0].ctx
    arr = (z3.Ast * len(xs))(*[x.as_ast() for x in xs])
    return z3.BoolRef(z3.Z3_mk_and(ctx.ref(), len(xs), arr), ctx)


def _eq(enc: Encoding, expr: z3.ExprRef, kind: str, v: Any) -> z3.BoolRef:
    domain = enc.kind_domain(kind)
    if domain is not None:
        return expr == domain(v)
    return expr == (z3.BoolVal(v) if isinstance(v, bool) else z3.IntVal(v))


# ------------------------------------------------------------------------------------------------
# Arguments
def abstract_args(step: TraceStep, run_id: str, order: list[str], pre: Abs, post: Abs
                  ) -> tuple[str, dict[str, Any]] | str:
    """(encoding command, argument values), or the reason why the step is not cross-checked."""
    name, args, state = step.name, step.args, step.pre
    if name == "advance_time":
        return name, {**{f"expire{k}": p["ls"] == "live" and q["ls"] == "expired"
                         for k, (p, q) in enumerate(zip(pre["steps"], post["steps"], strict=True))},
                      **{f"pass{k}": (not p["adp"]) and q["adp"]
                         for k, (p, q) in enumerate(zip(pre["steps"], post["steps"], strict=True))}}
    if name in ("advance_frontier", "converge_cancellation"):
        return name, {}
    if name == "request_cancel":
        return name, {"reason": args["reason"]}
    if name == "admit_task_attempt":
        return name, {"step": order.index(args["stepRunId"])}
    a = state.attempts[args["attemptId"]]
    latest = max((x for x in state.attempts_of_run(run_id) if x["stepRunId"] == a["stepRunId"]),
                 key=lambda x: x["attempt"])
    if latest["id"] != a["id"]:
        return "older attempt (outside the one-slot abstraction)"
    out: dict[str, Any] = {"step": order.index(a["stepRunId"])}
    lease = state.leases.get(a["id"])
    if "workerId" in args and name != "claim_lease":
        out["holder"] = (lease is not None and lease["workerId"] == args["workerId"]
                         and lease["leaseGeneration"] == args["leaseGeneration"])
    if name == "release_lease":
        out["same_reason"] = lease is not None and lease.get("releaseReason") == args["reason"]
    if name == "start_attempt":
        out["timeout"] = args["timeoutMs"] is not None
    if name == "complete_attempt":
        out["exit_zero"] = args["exitCode"] == 0
    if name == "recover_attempt":
        out["evidence"] = args["evidence"]
    return name, out


# ------------------------------------------------------------------------------------------------
@dataclass
class Mismatch:
    trace: int
    index: int
    command: str
    args: dict[str, Any]
    problem: str
    pre: Abs
    post: Abs | None


@dataclass
class Report:
    checked: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def transitions(self) -> int:
        return sum(self.checked.values())


class _PerN:
    def __init__(self, n: int, semantics: type[Semantics], tables: Tables | None) -> None:
        self.enc = Encoding(n, tables)
        self.sem = semantics(self.enc)
        self.pre = self.enc.fresh("pre")
        self.trans: dict[str, Transition] = {c: getattr(self.sem, c)(self.pre, "x") for c in COMMANDS}
        self.init_state = self.enc.fresh("init")
        self.solver = z3.Solver()
        self.cache: dict[Any, z3.BoolRef] = {}
        self.plan = self.sem.frontier_plan(self.pre)


class CrossChecker:
    """Checks traces against the encoding built with `semantics` (mutants: a subclass) and `tables`."""

    def __init__(self, semantics: type[Semantics] = Semantics, tables: Tables | None = None) -> None:
        self.semantics = semantics
        self.tables = tables
        self._cache: dict[int, _PerN] = {}

    def per_n(self, n: int) -> _PerN:
        if n not in self._cache:
            self._cache[n] = _PerN(n, self.semantics, self.tables)
        return self._cache[n]

    def _values(self, enc: Encoding, t: Transition, values: dict[str, Any]) -> z3.BoolRef:
        cs = []
        for k, v in values.items():
            expr = t.args[k]
            if isinstance(v, (bool, int)):
                cs.append(expr == v)
            else:
                cs.append(expr == next(d for d in vars(enc.d).values() if d.sort == expr.sort())(v))
        return z3.And(cs) if cs else z3.BoolVal(True)

    def check_trace(self, number: int, trace: Trace, report: Report) -> None:
        admitted = trace.steps[0].post
        order, needs = step_order(admitted, trace.run_id)
        p = self.per_n(len(order))
        enc, s = p.enc, p.solver
        dag = enc.need_of([[j in needs[i] for j in range(i)] for i in range(enc.n)])
        # Init ↔ admit_workflow
        s.push()
        s.add(dag, enc.init(p.init_state), z3.Not(fix(enc, p.init_state, abstract(admitted, trace.run_id, order))))
        if s.check() != z3.unsat:
            report.mismatches.append(Mismatch(number, 0, "admit_workflow", {}, "Init differs from admission",
                                              abstract(admitted, trace.run_id, order), None))
        s.pop()
        report.checked["admit_workflow"] += 1
        for index, step in enumerate(trace.steps[1:], start=1):
            self.check_step(number, index, step, trace.run_id, order, dag, report)

    def check_step(self, number: int, index: int, step: TraceStep, run_id: str, order: list[str],
                   dag: z3.BoolRef, report: Report) -> None:
        p = self.per_n(len(order))
        enc, s = p.enc, p.solver
        pre = abstract(step.pre, run_id, order)
        post = abstract(step.post, run_id, order)

        def fail(problem: str) -> None:
            report.mismatches.append(Mismatch(number, index, step.name, step.args, problem, pre, post))

        if step.name.endswith("_candidates"):
            self._check_query(p, step, run_id, order, dag, pre, fail)
            report.checked[step.name] += 1
            return
        values: dict[str, Any]
        if step.name == "converge_cancellation_page":
            self._check_page(step, fail)
            candidate = pre["run"]["rs"] == "running" and pre["run"]["reason"] != "none"
            if not candidate:
                if pre != post:
                    fail("a page changed a Run that was not a cancellation candidate")
                report.checked[step.name] += 1
                return
            name, values = "converge_cancellation", {}
        else:
            mapped = abstract_args(step, run_id, order, pre, post)
            if isinstance(mapped, str):
                report.skipped[mapped] += 1
                return
            name, values = mapped
        t = p.trans[name]
        s.push()
        s.add(dag, fix(enc, p.pre, pre, p.cache), self._values(enc, t, values), t.guard)
        refused = step.outcome is not None and not step.outcome.ok
        if refused:
            if s.check() != z3.unsat:
                fail(f"model refused ({step.outcome.error.reason if step.outcome and step.outcome.error else '?'})"
                     " but the guard holds")
            report.refusals[name] += 1
        else:
            expected = fix(enc, t.post, post, p.cache)
            s.push()
            s.add(expected)
            if s.check() != z3.sat:
                fail("the relation does not admit the model's post-state")
            s.pop()
            s.add(z3.Not(expected))  # ... and nothing else (no unconstrained post field)
            if s.check() != z3.unsat:
                fail("the relation admits another post-state as well")
        s.pop()
        report.checked[step.name] += 1

    def _check_query(self, p: _PerN, step: TraceStep, run_id: str, order: list[str], dag: z3.BoolRef, pre: Abs,
                     fail: Any) -> None:
        assert step.outcome is not None and step.outcome.result is not None
        rows = step.outcome.result["candidates"]
        enc, s, sem = p.enc, p.solver, p.sem
        if step.name == "frontier_candidates":
            got = [any(r["runId"] == run_id for r in rows)]
            preds = [p.plan.candidate]
        elif step.name == "cancellation_candidates":
            got = [any(r["runId"] == run_id for r in rows)]
            preds = [z3.And(enc.running(p.pre.run), enc.intent(p.pre.run))]
        elif step.name == "task_candidates":
            got = [any(r["stepRunId"] == sid for r in rows) for sid in order]
            preds = [task_candidate(sem, p.pre, x) for x in p.pre.steps]
        else:
            ids = {r["attemptId"] for r in rows}
            latest = {sid: max((a for a in step.pre.attempts_of_run(run_id) if a["stepRunId"] == sid),
                               key=lambda a: a["attempt"], default=None) for sid in order}
            got = [(last := latest[sid]) is not None and last["id"] in ids for sid in order]
            preds = [z3.And(enc.att_in(x, T.ACTIVE_ATTEMPT), enc.lease_is(x, "expired")) for x in p.pre.steps]
        s.push()
        s.add(dag, fix(enc, p.pre, pre, p.cache))
        if s.check() != z3.sat:  # not `assert`: under -O the check itself would not run
            s.pop()
            fail("the encoding admits no model of the concrete pre-state")
            return
        m = s.model()
        want = [z3.is_true(m.eval(q, model_completion=True)) for q in preds]
        s.pop()
        if want != got:
            fail(f"candidate predicate {want} differs from the query {got}")

    def _check_page(self, step: TraceStep, fail: Any) -> None:
        assert step.outcome is not None and step.outcome.result is not None
        res = step.outcome.result
        want = pages.concrete_counters(res["outcomes"])
        got = (res["scanned"], res["settledRuns"], res["settledAttempts"], res["blocked"])
        if want != got or want != accumulate_page(res["outcomes"]):
            fail(f"page counters {got} differ from the page encoding {want}")


def run(seed: int = 0, traces: int = 80, min_transitions: int = 0, max_steps: int = 5,
        semantics: type[Semantics] = Semantics, tables: Tables | None = None, stop_on_mismatch: bool = False) -> Report:
    """Drive the model with `traces` random traces (more until `min_transitions` are checked)."""
    driver = Driver(seed, max_steps=max_steps)
    checker = CrossChecker(semantics, tables)
    report = Report()
    i = 0
    while i < traces or report.transitions < min_transitions:
        checker.check_trace(i, driver.trace(i), report)
        i += 1
        if stop_on_mismatch and report.mismatches:
            break
    return report
