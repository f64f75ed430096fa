"""Exhaustive small-scope exploration of the whole-system model (README §7, state-machines.md §9–§10).

For every DAG shape with 1..K steps (isomorphic DAGs explored once, through a canonical form) a
breadth-first search admits one workflow and applies every choice that matters to every reachable
state, checking INV-1..31 and LIVE-1 (the drain of model/liveness.py) on every distinct state.

State identity (the abstraction, which makes the space finite)
--------------------------------------------------------------
Two concrete states are the same explored state when they agree on
* the Run: status, cancelReason, errorCode;
* every StepRun (by step key): status, version, attemptCount, resultCode, readyAtMs set or not;
* every attempt, by (step key, ordinal within the step) — Run-global attempt numbers only record
  the admission interleaving of independent steps: status, errorCode, startedAtMs set, deadline
  (none / pending / passed), exitCode (none / 0 / non-zero), callbackSequence, whether its StepRun is
  still at the admitted epoch, whether a task timeout request was written, and its lease as (status,
  leaseGeneration, releaseReason, live or expired);
* time, abstracted to what changes behaviour: which lease expiries and task deadlines have passed,
  the order (with ties) of the pending ones, and whether some pending timer was set at the current
  instant (a timer set now ties with another one set now, and with nothing set earlier).
Forgotten: timestamps (replaced by the above), identifiers and digests (functions of the rest and of
time), Run version/eventSequence and lease versions (event and renew counts), worker identities
(the two workers are symmetric: only "the holder" and "the other one" matter to every fence).

Finiteness: one Run per shape; the worker pair {w1, w2}; lease duration = task timeout = D (so
timers expire in the order they were set); at most `max_attempts` attempts per StepRun (one requeue
with the default 2) and `max_generations` lease generations per attempt; cancel reasons `user` and
`timeout`; exit codes 0 and 1; release reason `declined`; recovery evidence not_running, running and
unknown. Time moves only by `tick` (half-way to the next timer, offered while a timer set at the
current instant exists) and `expire` (to the next pending timer instant).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import tables as T
from .invariants import check_invariants, consistent_binding
from .liveness import drain
from .records import Record, sign_plan, task_definition_ref
from .state import State
from .system import advance_time, apply

Edge = tuple[int, int]
Shape = tuple[int, tuple[Edge, ...]]  # (number of steps, canonical need -> dependent edges)
TraceStep = dict[str, Any]
Key = tuple[Any, ...]

INITIAL_CLOCK = 1_000_000
LEASE_MS = 600_000
RUN_ID = "run-x"
PLAN_ID = "plan-x"
WORKERS = ("w1", "w2")
CANCEL_ACTOR: Record = {"type": "user", "id": "operator"}
NO_WRITE = frozenset({"existing", "idempotent", "leased", "not_eligible", "already_released", "already_starting",
                      "already_running", "already_terminal", "settled", "unchanged", "retry", "manual"})


def _d(c: str) -> str:
    return c * 64


def build_plan(run_id: str, plan_id: str, needs: dict[str, tuple[str, ...]], planned_at_ms: int,
               package: str = "demo-pkg") -> Record:
    """A signed plan (harness alphabet, records.md §3) whose step `k` needs `needs[k]`."""
    mrd = _d("3")
    steps = [{"stepRunId": f"{run_id}:{k}", "stepKey": k, "taskId": k, "taskDefinitionRef": task_definition_ref(mrd, k),
              "taskDefinitionDigest": _d("6"), "needs": sorted(n), "initialStatus": "pending" if n else "ready",
              "required": True} for k, n in needs.items()]
    target = {"projectId": "proj-1", "packageName": package, "installationId": "inst-1", "lockDigest": _d("1"),
              "generation": 1, "generationDigest": _d("2"), "materializedRevisionDigest": mrd,
              "publicationDigest": _d("4"), "workflowId": "nightly", "workflowDefinitionDigest": _d("5")}
    return sign_plan({"schema": T.SCHEMA_PLAN, "planId": plan_id, "runId": run_id, "target": target, "steps": steps,
                      "plannedAtMs": planned_at_ms})


# ------------------------------------------------------------------------------------------------
# DAG shapes up to isomorphism
def canonical_edges(n: int, edges: tuple[Edge, ...]) -> tuple[Edge, ...]:
    """The lexicographically least relabelling of `edges` over all permutations of n nodes."""
    return min(tuple(sorted((p[a], p[b]) for a, b in edges)) for p in itertools.permutations(range(n)))


def dag_shapes(n: int) -> list[Shape]:
    """Every DAG on n nodes up to isomorphism (each DAG has a labelling with edges i -> j, i < j)."""
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    forms = {canonical_edges(n, tuple(e for e, bit in zip(pairs, bits, strict=True) if bit))
             for bits in itertools.product((0, 1), repeat=len(pairs))}
    return sorted(((n, f) for f in forms), key=lambda s: (len(s[1]), s[1]))


def step_key(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i]


def shape_needs(shape: Shape) -> dict[str, tuple[str, ...]]:
    n, edges = shape
    return {step_key(j): tuple(sorted(step_key(a) for a, b in edges if b == j)) for j in range(n)}


def shape_name(shape: Shape) -> str:
    n, edges = shape
    return f"{n}:" + (",".join(f"{step_key(a)}>{step_key(b)}" for a, b in edges) or "-")


# ------------------------------------------------------------------------------------------------
# The abstraction
@dataclass(frozen=True)
class Config:
    max_steps: int
    max_depth: int | None = None
    max_attempts: int = 2
    max_generations: int = 2
    lease_ms: int = LEASE_MS
    cancel_reasons: tuple[str, ...] = ("user", "timeout")
    exit_codes: tuple[int, ...] = (0, 1)
    evidence: tuple[str, ...] = ("not_running", "running", "unknown")
    check_liveness: bool = True
    stop_on_violation: bool = False


def _timers(state: State) -> list[tuple[int, Key]]:
    """Pending timers: (instant, (stepRunId, attempt ordinal, 'lease' | 'deadline'))."""
    out = []
    for step_id, attempts in _attempts_by_step(state).items():
        for i, a in enumerate(attempts):
            lease = state.leases.get(a["id"])
            if lease is not None and lease["status"] == "leased" and lease["expiresAtMs"] > state.clock:
                out.append((lease["expiresAtMs"], (step_id, i, "lease")))
            if a["status"] in T.ACTIVE_ATTEMPT and a.get("deadlineAtMs", 0) > state.clock:
                out.append((a["deadlineAtMs"], (step_id, i, "deadline")))
    return out


def _attempts_by_step(state: State) -> dict[str, list[Record]]:
    by: dict[str, list[Record]] = {}
    for a in sorted(state.attempts.values(), key=lambda a: a["attempt"]):
        by.setdefault(a["stepRunId"], []).append(a)
    return by


def _attempt_key(state: State, a: Record, step: Record, timeout_requested: set[str]) -> Key:
    receipt = state.receipts[a["id"]]
    lease = state.leases.get(a["id"])
    lease_key = None if lease is None else (
        lease["status"], lease["leaseGeneration"], lease.get("releaseReason"),
        lease["status"] == "leased" and lease["expiresAtMs"] > state.clock)
    deadline = a.get("deadlineAtMs")
    exit_code = a.get("exitCode")
    return (a["status"], a.get("errorCode"), "startedAtMs" in a,
            None if deadline is None else deadline <= state.clock,
            None if exit_code is None else exit_code == 0, a["callbackSequence"],
            (step["version"], step["stepRunDigest"]) == (receipt["stepRunVersion"], receipt["stepRunDigest"]),
            a["id"] in timeout_requested, lease_key)


def abstract_state(state: State, lease_ms: int = LEASE_MS) -> Key:
    """The explored state's identity (see the module docstring)."""
    timeout_requested = {e.get("attemptId", "") for events in state.events.values() for e in events
                         if e["type"] == "workflow.task_timeout_requested"}
    by_step = _attempts_by_step(state)
    runs = tuple((r["id"], r["status"], r.get("cancelReason"), r.get("errorCode"))
                 for r in sorted(state.runs.values(), key=lambda r: r["id"]))
    steps = tuple(
        (s["id"], s["status"], s["version"], s["attemptCount"], s["resultCode"], s["readyAtMs"] is not None,
         tuple(_attempt_key(state, a, s, timeout_requested) for a in by_step.get(s["id"], [])))
        for s in sorted(state.step_runs.values(), key=lambda s: s["id"]))
    timers = _timers(state)
    instants = sorted({t for t, _ in timers})
    order = tuple(sorted((k, instants.index(t)) for t, k in timers))
    fresh = bool(instants) and instants[-1] == state.clock + lease_ms
    return runs, steps, order, fresh


# ------------------------------------------------------------------------------------------------
# The choices that matter
@dataclass(frozen=True)
class Action:
    step: TraceStep  # the trace step ({"op": "command", ...} or {"op": "advance_time", ...})


def _command(name: str, **args: Any) -> Action:
    return Action({"op": "command", "name": name, "args": args})


def time_actions(state: State, lease_ms: int) -> Iterator[Action]:
    timers = _timers(state)
    if not timers:
        return
    earliest = min(t for t, _ in timers)
    yield Action({"op": "advance_time", "deltaMs": earliest - state.clock})
    if max(t for t, _ in timers) == state.clock + lease_ms:
        gap = earliest - state.clock
        if gap < 2:
            raise RuntimeError("explorer time abstraction cannot be realized: no room for a tick")
        yield Action({"op": "advance_time", "deltaMs": gap // 2})


def run_actions(run: Record, cfg: Config) -> Iterator[Action]:
    rid = run["id"]
    yield _command("advance_frontier", runId=rid)
    for reason in cfg.cancel_reasons:
        yield _command("request_cancel", runId=rid, reason=reason, actor=CANCEL_ACTOR)
    yield _command("converge_cancellation", runId=rid)
    yield _command("converge_cancellation_page", limit=8)


def attempt_actions(state: State, a: Record, cfg: Config) -> Iterator[Action]:
    aid, st = a["id"], a["status"]
    lease = state.leases.get(aid)
    generation = 0 if lease is None else lease["leaseGeneration"]
    if st == "claimed" and generation < cfg.max_generations:
        for w in WORKERS:
            yield _command("claim_lease", attemptId=aid, workerId=w, durationMs=cfg.lease_ms)
    if lease is None or lease["status"] != "leased":
        return
    if lease["expiresAtMs"] <= state.clock:
        for ev in cfg.evidence if st != "claimed" else cfg.evidence[:1]:
            yield _command("recover_attempt", attemptId=aid, evidence=ev)
        return
    fence = {"attemptId": aid, "workerId": lease["workerId"], "leaseGeneration": generation}
    yield _command("renew_lease", **fence, durationMs=cfg.lease_ms)
    if st == "claimed":
        yield _command("release_lease", **fence, reason="declined")
        yield _command("start_attempt", **fence, timeoutMs=None)
        yield _command("start_attempt", **fence, timeoutMs=cfg.lease_ms)
    if st == "starting":
        yield _command("record_running", **fence)
        yield _command("fail_start", **fence)
    if st in ("starting", "running"):
        for code in cfg.exit_codes:
            yield _command("complete_attempt", **fence, exitCode=code)


def actions(state: State, cfg: Config) -> list[Action]:
    out: list[Action] = []
    by_step = _attempts_by_step(state)
    for run in sorted(state.runs.values(), key=lambda r: r["id"]):
        out += run_actions(run, cfg)
        plan = state.admission_of_run(run["id"])[0]["plan"]
        for p in plan["steps"]:
            s = state.step_runs[p["stepRunId"]]
            if s["status"] == "ready" and len(by_step.get(s["id"], [])) < cfg.max_attempts:
                out.append(_command("admit_task_attempt", runId=run["id"], stepRunId=s["id"],
                                    binding=consistent_binding(plan, p)))
    for attempts in by_step.values():
        for a in attempts:
            if a["status"] in T.ACTIVE_ATTEMPT:
                out += attempt_actions(state, a, cfg)
    out += time_actions(state, cfg.lease_ms)
    return out


def take(state: State, action: Action) -> tuple[State, Any]:
    """Apply one action; returns (new state, Outcome or None for a time step)."""
    if action.step["op"] == "advance_time":
        return advance_time(state, action.step["deltaMs"]), None
    out = apply(state, {"name": action.step["name"], "args": action.step["args"]})
    return out.state, out


# ------------------------------------------------------------------------------------------------
# Breadth-first search
@dataclass
class Finding:
    shape: str
    kind: str  # "invariant" | "LIVE-1" | "no-write"
    message: str
    trace_steps: list[TraceStep]

    def trace(self) -> Record:
        return {"format": "qlwf-trace", "version": 1,
                "description": f"explorer counterexample, shape {self.shape}: {self.kind}: {self.message}",
                "initialClock": INITIAL_CLOCK, "steps": self.trace_steps}


@dataclass
class ShapeReport:
    shape: str
    distinct_states: int = 0
    transitions: int = 0
    refusals: int = 0
    depth: int = 0
    findings: list[Finding] = field(default_factory=list)
    rules: set[str] = field(default_factory=set)


@dataclass
class ExploreReport:
    max_steps: int
    shapes: list[ShapeReport]
    seconds: float

    @property
    def distinct_states(self) -> int:
        return sum(s.distinct_states for s in self.shapes)

    @property
    def transitions(self) -> int:
        return sum(s.transitions for s in self.shapes)

    @property
    def refusals(self) -> int:
        return sum(s.refusals for s in self.shapes)

    @property
    def depth(self) -> int:
        return max((s.depth for s in self.shapes), default=0)

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.shapes for f in s.findings]

    @property
    def rules(self) -> set[str]:
        return set().union(*(s.rules for s in self.shapes)) if self.shapes else set()

    def summary(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "shapes": len(self.shapes), "distinct_states": self.distinct_states,
                "transitions": self.transitions, "refusals": self.refusals, "depth": self.depth,
                "seconds": round(self.seconds, 3),
                "states_per_second": round(self.distinct_states / self.seconds, 1) if self.seconds else None,
                "violations": len(self.findings)}


def _path(parents: dict[Key, tuple[Key | None, TraceStep]], key: Key) -> list[TraceStep]:
    steps: list[TraceStep] = []
    cur: Key | None = key
    while cur is not None:
        parent, step = parents[cur]
        steps.append(step)
        cur = parent
    return steps[::-1]


def _check_state(state: State, cfg: Config) -> list[tuple[str, str, list[TraceStep]]]:
    found = [("invariant", str(v), []) for v in check_invariants(state)]
    if cfg.check_liveness:
        report = drain(state)
        if not report.ok:
            found.append(("LIVE-1", report.explain(), list(report.steps)))
    return found


def explore_shape(shape: Shape, cfg: Config) -> ShapeReport:
    report = ShapeReport(shape_name(shape))
    plan = build_plan(RUN_ID, PLAN_ID, shape_needs(shape), INITIAL_CLOCK)
    admit: TraceStep = {"op": "command", "name": "admit_workflow", "args": {"plan": plan}}
    out = apply(State(clock=INITIAL_CLOCK), {"name": "admit_workflow", "args": {"plan": plan}})
    if out.error is not None:
        raise RuntimeError(f"shape {report.shape} does not admit: {out.error}")
    report.rules |= set(out.rules)
    root = abstract_state(out.state, cfg.lease_ms)
    parents: dict[Key, tuple[Key | None, TraceStep]] = {root: (None, admit)}
    queue: deque[tuple[State, Key, int]] = deque([(out.state, root, 0)])
    while queue:
        state, key, depth = queue.popleft()
        report.distinct_states += 1
        report.depth = max(report.depth, depth)
        for kind, message, extra in _check_state(state, cfg):
            report.findings.append(Finding(report.shape, kind, message, _path(parents, key) + extra))
        if report.findings and cfg.stop_on_violation:
            return report
        if cfg.max_depth is not None and depth >= cfg.max_depth:
            continue
        for action in actions(state, cfg):
            new, outcome = take(state, action)
            report.transitions += 1
            if outcome is not None:
                if outcome.error is not None:
                    report.refusals += 1
                    continue
                report.rules |= set(outcome.rules)
                status = outcome.result.get("status") if outcome.result else None
                if status in NO_WRITE and new is not state:
                    report.findings.append(Finding(report.shape, "no-write", f"{status} changed the state",
                                                   _path(parents, key) + [action.step]))
            new_key = abstract_state(new, cfg.lease_ms)
            if new_key not in parents:
                parents[new_key] = (key, action.step)
                queue.append((new, new_key, depth + 1))
    return report


def explore(cfg: Config, progress: Callable[[ShapeReport], None] | None = None) -> ExploreReport:
    start = time.perf_counter()
    shapes: list[ShapeReport] = []
    for n in range(1, cfg.max_steps + 1):
        for shape in dag_shapes(n):
            r = explore_shape(shape, cfg)
            shapes.append(r)
            if progress is not None:
                progress(r)
            if r.findings and cfg.stop_on_violation:
                return ExploreReport(cfg.max_steps, shapes, time.perf_counter() - start)
    return ExploreReport(cfg.max_steps, shapes, time.perf_counter() - start)
