"""Exhaustive small-scope exploration of the whole-system model (README §7, state-machines.md §9–§10).

For every DAG shape with 1..K steps (isomorphic DAGs explored once, through a canonical form) a
breadth-first search admits one workflow and applies every choice that matters to every reachable
state, checking INV-1..31 and LIVE-1 (the drain of conformance/checkers/liveness.py) on every explored state.

State identity (the abstraction that makes the space finite)
-------------------------------------------------------------
The *detailed* identity of a state is
* the Run: status, cancelReason, errorCode;
* every StepRun (by id): status, version, attemptCount, resultCode, readyAtMs set or not;
* every attempt, by (StepRun, ordinal within it) -- Run-global attempt numbers only record the
  admission interleaving of independent steps: status, errorCode, startedAtMs set, exitCode (none /
  0 / non-zero), callbackSequence, whether its StepRun is still at the admitted epoch, how many task
  timeout requests were written for it, its deadline (none; pending or passed while the attempt is
  active; just "set" once it ended), and its lease as (status, leaseGeneration, releaseReason, live
  or expired while `leased`);
taken up to the automorphisms of the shape (symmetric steps are interchangeable). The *explored*
identity is the detailed one with every terminal StepRun reduced to its status: nothing a terminal
StepRun or its ended attempts carry can change or influence a later command (the frontier and AGG
read statuses only, ended attempts and their leases are final), so states that differ only there
behave alike. Such merged variants are still invariant-checked (`checked_variants`), they are just
not expanded again. Forgotten altogether: timestamps (time is reduced to the bits above),
identifiers and digests (functions of the rest and of time), Run version/eventSequence and lease
versions (event and renew counts), worker identities (the two workers are symmetric: every fence
only asks "the holder or the other one").

Time discipline. Leases last L = 600000 ms, task timeouts are S = 10000 ms, and time moves only by
two harness steps: `deadlines` (to the last pending task deadline, offered while one is pending) and
`expire` (to the last pending instant of any timer: every lease and deadline passes). A lease is
always set after the last `expire` and at most one `deadlines` step follows each start, so with
L > (starts + 1) x S no lease passes during a `deadlines` step (asserted). Under this discipline the
bits above determine every enabled command and its outcome, so the abstraction is exact, and every
time-driven situation that changes behaviour (a lease live or expired, a deadline passed or not, a
deadline passed while the lease is still live) is reachable.

Choices (see `Alphabet`): the admission replay (on the fresh Run), advance_frontier, request_cancel (`user`, `timeout`),
converge_cancellation and a convergence page on the Run; admit_task_attempt on every ready StepRun; for every attempt:
claim_lease by each of two workers, and for the live holder renew, release (`declined`), start
(without timeout or with S), record_running, fail_start, complete (exit 0 or 1); recover_attempt with
each evidence once the lease expired; and the replays of durable commands by the holder of every
lease (release; completion and start failure; start and record_running), which must write nothing.
Refused commands are counted, and must leave the state unchanged.

Finiteness and scope: one Run per shape; two workers; per shape size, at most `max_attempts`
attempts per StepRun and `max_generations` lease generations per attempt, with or without task
deadlines and renewals. The richness shrinks as shapes grow so that the product of independent
steps stays explorable: one step gets every choice (FULL: two attempts, two generations, deadlines,
renew); two steps keep requeues and deadlines (PAIR); three or more steps explore the coupling of
the frontier, cancellation and recovery across steps (COUPLING: one attempt and one generation per
step, no deadlines, no renew).
"""

from __future__ import annotations

import functools
import itertools
import json
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from qlwf.conformance.processes.fork_pool import ForkPool
from qlwf.model import tables as T
from qlwf.model.invariants import Violation, check_invariants, consistent_binding, reusing_record_checks
from qlwf.model.records import Record, sign_plan, task_definition_ref
from qlwf.model.state import State
from qlwf.model.system import advance_time, apply

from .liveness import drain, lease_horizon

Edge = tuple[int, int]
Shape = tuple[int, tuple[Edge, ...]]  # (number of steps, canonical need -> dependent edges)
TraceStep = dict[str, Any]
Key = tuple[Any, ...]

INITIAL_CLOCK = 1_000_000
LEASE_MS = 600_000
TIMEOUT_MS = 10_000
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


# The largest shape the explorer takes (decisions Q-128). There are 302 shapes of 5 steps, listed in
# 0.04 s and explored to the end in about 23 minutes on two cores; 5,984 of 6, listed in about 5 s, for
# deadline-bound campaigns and --depth-bound searches; 243,668 of 7, whose listing alone relabels each in
# 5,040 ways (1.2 billion images: tens of minutes at the 6-step rate, with no output) before a search that
# could not end.
MAX_SHAPE_STEPS = 6


def dag_shapes(n: int) -> list[Shape]:
    """Every DAG on n nodes up to isomorphism (each DAG has a labelling with edges i -> j, i < j).

    Every such labelled edge set is visited in turn; the first of each isomorphism class is relabelled
    in every way, which gives its canonical form (the least image, as `canonical_edges` takes it) and
    every other labelling of the class with edges i -> j, i < j, which is then skipped (decisions Q-129)."""
    if n > MAX_SHAPE_STEPS:
        raise ValueError(f"shapes of {n} steps: the explorer takes at most {MAX_SHAPE_STEPS}")
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    bit = {pair: 1 << k for k, pair in enumerate(pairs)}
    # per relabelling, the image of each pair (by the pair's index)
    relabelled = [[(p[a], p[b]) for a, b in pairs] for p in itertools.permutations(range(n))]
    seen: set[int] = set()
    forms: list[tuple[Edge, ...]] = []
    for mask in range(1 << len(pairs)):
        if mask in seen:
            continue
        present = [k for k in range(len(pairs)) if mask >> k & 1]
        images = [sorted(map(image.__getitem__, present)) for image in relabelled]
        forms.append(tuple(min(images)))
        seen.update(sum(map(bit.__getitem__, image)) for image in images if all(a < b for a, b in image))
    return sorted(((n, f) for f in forms), key=lambda s: (len(s[1]), s[1]))


def chain(n: int) -> Shape:
    """The n-step chain a -> b -> ... (one step waits for the previous one)."""
    return n, canonical_edges(n, tuple((i, i + 1) for i in range(n - 1)))


def chains_and_diamonds(n: int) -> list[Shape]:
    """The n-step chain and the n-step diamonds: one source fanning out to m >= 2 middle steps that all
    join into one sink (1-m-1), the other n - m - 2 steps as a chain before the source, a chain after
    the sink, or free steps (each split once). For n = 5: the chain, the 1-3-1 diamond, and the 1-2-1
    diamond with a head, with a tail, or beside a free step. Ordered as dag_shapes orders shapes."""
    forms = {chain(n)[1]} if n > 1 else set()
    for m in range(2, n - 1):
        rest = n - m - 2
        for head in range(rest + 1):
            for tail in range(rest - head + 1):
                source = head
                middle = range(source + 1, source + 1 + m)
                sink = source + 1 + m
                edges = [(i, i + 1) for i in range(head)]  # the head chain ends in the source
                edges += [(source, j) for j in middle] + [(j, sink) for j in middle]
                edges += [(i, i + 1) for i in range(sink, sink + tail)]  # the rest of the nodes are free
                forms.add(canonical_edges(n, tuple(edges)))
    return sorted(((n, f) for f in forms), key=lambda s: (len(s[1]), s[1]))


def step_key(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i]


def shape_needs(shape: Shape) -> dict[str, tuple[str, ...]]:
    n, edges = shape
    return {step_key(j): tuple(sorted(step_key(a) for a, b in edges if b == j)) for j in range(n)}


def shape_name(shape: Shape) -> str:
    n, edges = shape
    return f"{n}:" + (",".join(f"{step_key(a)}>{step_key(b)}" for a, b in edges) or "-")


@functools.cache
def _shape_set(n: int) -> frozenset[Shape]:
    return frozenset(dag_shapes(n))


def parse_shape(text: str) -> Shape:
    """The shape a name describes, as `shape_name` writes it ("3:a>b,c>b", "2:-") or any relabelling of
    it ("3:b>c" is "3:a>b"): steps are the first N letters, edges need>dependent. ValueError says why
    a name describes no shape the explorer takes."""
    count, sep, edges_text = text.strip().partition(":")
    if not sep or not count.isdigit() or not 1 <= int(count) <= MAX_SHAPE_STEPS:
        raise ValueError(f"expected N:EDGES with 1 <= N <= {MAX_SHAPE_STEPS}, e.g. '2:a>b' or '3:-', got {text!r}")
    n = int(count)
    steps = {step_key(i): i for i in range(n)}
    edges: set[Edge] = set()
    for part in ([] if edges_text == "-" else edges_text.split(",")):
        need, arrow, dependent = part.strip().partition(">")
        if not arrow or need not in steps or dependent not in steps or need == dependent:
            raise ValueError(f"{part!r} in {text!r} is not an edge X>Y between two of the steps "
                             f"{', '.join(steps)}")
        edges.add((steps[need], steps[dependent]))
    form = canonical_edges(n, tuple(sorted(edges)))
    if (n, form) not in _shape_set(n):
        raise ValueError(f"{text!r} has a cycle: a workflow's steps form a DAG")
    return n, form


# ------------------------------------------------------------------------------------------------
# The abstraction
@dataclass(frozen=True)
class Alphabet:
    """The bounded choices offered to the workers and the operator for one shape."""

    max_attempts: int  # attempts per StepRun (requeues + 1)
    max_generations: int  # lease generations per attempt (claims)
    deadlines: bool  # start_attempt also with timeoutMs = S, and the `deadlines` time step
    renew: bool  # renew_lease by the holder
    evidence: tuple[str, ...] = ("not_running", "running", "unknown")
    exit_codes: tuple[int, ...] = (0, 1)
    cancel_reasons: tuple[str, ...] = ("user", "timeout")
    workers: tuple[str, ...] = WORKERS


FULL = Alphabet(max_attempts=2, max_generations=2, deadlines=True, renew=True)
PAIR = Alphabet(max_attempts=2, max_generations=1, deadlines=True, renew=False)
COUPLING = Alphabet(max_attempts=1, max_generations=1, deadlines=False, renew=False)


def default_alphabet(n_steps: int) -> Alphabet:
    """Richness shrinks as shapes grow so that the product of independent steps stays explorable."""
    return FULL if n_steps == 1 else PAIR if n_steps == 2 else COUPLING


@dataclass(frozen=True)
class Config:
    max_steps: int
    max_depth: int | None = None
    check_liveness: bool = True
    stop_on_violation: bool = False
    alphabet: Callable[[int], Alphabet] = default_alphabet
    shapes: tuple[Shape, ...] | None = None  # explore exactly these (default: every shape of 1..max_steps)
    lease_ms: int = LEASE_MS
    timeout_ms: int = TIMEOUT_MS
    # Evaluate the invariants incrementally: per-record parts are reused for the records a step left
    # untouched (model/invariants.py `reusing_record_checks`); False evaluates every state in full.
    incremental: bool = True
    # Also evaluate every checked state in full and report a disagreement as an `incremental` finding;
    # likewise drain every state whose LIVE-1 verdict was taken from the memo (reuse_liveness).
    cross_check: bool = False
    # LIVE-1 verdicts by the explored identity of the drain's starting point (see LivenessMemo).
    reuse_liveness: bool = True


def _timers(state: State) -> tuple[list[int], list[int]]:
    """Instants of the pending lease expiries and of the pending task deadlines of active attempts."""
    leases = [lease["expiresAtMs"] for lease in state.leases.values()
              if lease["status"] == "leased" and lease["expiresAtMs"] > state.clock]
    deadlines = [a["deadlineAtMs"] for a in state.attempts.values()
                 if a["status"] in T.ACTIVE_ATTEMPT and a.get("deadlineAtMs", 0) > state.clock]
    return leases, deadlines


def _attempts_by_step(state: State) -> dict[str, list[Record]]:
    by: dict[str, list[Record]] = {}
    for a in sorted(state.attempts.values(), key=lambda a: a["attempt"]):
        by.setdefault(a["stepRunId"], []).append(a)
    return by


def _attempt_key(state: State, a: Record, step: Record, timeout_requested: Counter[str]) -> Key:
    receipt = state.receipts[a["id"]]
    lease = state.leases.get(a["id"])
    lease_key = None if lease is None else (
        lease["status"], lease["leaseGeneration"], lease.get("releaseReason"),
        lease["status"] == "leased" and lease["expiresAtMs"] > state.clock)
    deadline = a.get("deadlineAtMs")
    if deadline is not None:
        deadline = "passed" if deadline <= state.clock else "pending" if a["status"] in T.ACTIVE_ATTEMPT else "set"
    exit_code = a.get("exitCode")
    return (a["status"], a.get("errorCode"), "startedAtMs" in a, deadline,
            None if exit_code is None else exit_code == 0, a["callbackSequence"],
            (step["version"], step["stepRunDigest"]) == (receipt["stepRunVersion"], receipt["stepRunDigest"]),
            timeout_requested[a["id"]], lease_key)


def automorphisms(shape: Shape) -> list[tuple[int, ...]]:
    """Node permutations that map the shape's edge set onto itself (the identity first)."""
    n, edges = shape
    edge_set = set(edges)
    return [p for p in itertools.permutations(range(n)) if {(p[a], p[b]) for a, b in edges} == edge_set]


def _rename(key: Key, names: dict[str, str]) -> Key:
    runs, steps = key
    return runs, tuple(sorted(((names[s[0]], *s[1:]) for s in steps), key=lambda s: s[0]))


def canonical_key(key: Key, renamings: list[dict[str, str]]) -> Key:
    """The least of the key's images under the shape's automorphisms, images ordered by their StepRun
    entries as (new name, repr of the other facts), in name order: a total order on strings (facts
    mix None with str and int, which tuples cannot compare), each entry's repr built once."""
    if len(renamings) <= 1:
        return key
    steps = key[1]
    facts = [(s[0], repr(s[1:])) for s in steps]
    best, best_names = None, renamings[0]
    for names in renamings:
        order = sorted((names[name], rest) for name, rest in facts)  # names are unique: rest never decides
        if best is None or order < best:
            best, best_names = order, names
    return _rename(key, best_names)


def detailed_state(state: State) -> Key:
    """Every abstracted fact, terminal StepRuns included, before symmetry reduction."""
    timeout_requested = Counter(e.get("attemptId", "") for events in state.events.values() for e in events
                                if e["type"] == "workflow.task_timeout_requested")
    by_step = _attempts_by_step(state)
    runs = tuple((r["id"], r["status"], r.get("cancelReason"), r.get("errorCode"))
                 for r in sorted(state.runs.values(), key=lambda r: r["id"]))
    steps = tuple(
        (s["id"], s["status"], s["version"], s["attemptCount"], s["resultCode"], s["readyAtMs"] is not None,
         tuple(_attempt_key(state, a, s, timeout_requested) for a in by_step.get(s["id"], [])))
        for s in sorted(state.step_runs.values(), key=lambda s: s["id"]))
    return runs, steps


def collapse(detailed: Key) -> Key:
    """The explored identity: a terminal StepRun only by its status (nothing else of it matters later)."""
    runs, steps = detailed
    return runs, tuple(s[:2] if s[1] in T.TERMINAL_STEP else s for s in steps)


def abstract_state(state: State) -> Key:
    """The explored state's identity before symmetry reduction (see the module docstring)."""
    return collapse(detailed_state(state))


# ------------------------------------------------------------------------------------------------
# The choices that matter
@dataclass(frozen=True)
class Action:
    step: TraceStep  # the trace step ({"op": "command", ...} or {"op": "advance_time", ...})


def _command(name: str, **args: Any) -> Action:
    return Action({"op": "command", "name": name, "args": args})


def time_actions(state: State) -> Iterator[Action]:
    leases, deadlines = _timers(state)
    if deadlines:
        last = max(deadlines)
        if leases and min(leases) <= last:
            raise RuntimeError("explorer time discipline broken: a lease would pass during a deadlines step")
        yield Action({"op": "advance_time", "deltaMs": last - state.clock})
    if leases and (not deadlines or max(leases) > max(deadlines)):
        yield Action({"op": "advance_time", "deltaMs": max(leases) - state.clock})


def run_actions(state: State, run: Record, cfg: Alphabet) -> Iterator[Action]:
    rid = run["id"]
    plan = state.admission_of_run(rid)[0]["plan"]
    if run["version"] == len(plan["steps"]) + 1:  # fresh from admission: its replay answers `existing`
        yield _command("admit_workflow", plan=plan)
    yield _command("advance_frontier", runId=rid)
    for reason in cfg.cancel_reasons:
        yield _command("request_cancel", runId=rid, reason=reason, actor=CANCEL_ACTOR)
    yield _command("converge_cancellation", runId=rid)
    yield _command("converge_cancellation_page", limit=8)


def attempt_actions(state: State, a: Record, cfg: Alphabet, lease_ms: int, timeout_ms: int) -> Iterator[Action]:
    aid, st = a["id"], a["status"]
    lease = state.leases.get(aid)
    generation = 0 if lease is None else lease["leaseGeneration"]
    if st == "claimed" and generation < cfg.max_generations:
        for w in cfg.workers:
            yield _command("claim_lease", attemptId=aid, workerId=w, durationMs=lease_ms)
    if lease is None or lease["status"] != "leased":
        return
    if lease["expiresAtMs"] <= state.clock:
        for ev in cfg.evidence if st != "claimed" else cfg.evidence[:1]:
            yield _command("recover_attempt", attemptId=aid, evidence=ev)
        return
    fence = {"attemptId": aid, "workerId": lease["workerId"], "leaseGeneration": generation}
    if cfg.renew:
        yield _command("renew_lease", **fence, durationMs=lease_ms)
    if st == "claimed":
        yield _command("release_lease", **fence, reason="declined")
        yield _command("start_attempt", **fence, timeoutMs=None)
        if cfg.deadlines:
            yield _command("start_attempt", **fence, timeoutMs=timeout_ms)
    if st == "starting":
        yield _command("record_running", **fence)
        yield _command("fail_start", **fence)
    if st in ("starting", "running"):
        for code in cfg.exit_codes:
            yield _command("complete_attempt", **fence, exitCode=code)


def replay_actions(state: State, a: Record) -> Iterator[Action]:
    """The holder repeating a command whose effect is durable: replay answers, which must write nothing."""
    lease = state.leases.get(a["id"])
    if lease is None or lease.get("releaseReason") == "lease_expired":
        return
    fence = {"attemptId": a["id"], "workerId": lease["workerId"], "leaseGeneration": lease["leaseGeneration"]}
    if lease["status"] == "released":
        yield _command("release_lease", **fence, reason=lease["releaseReason"])
    elif lease["status"] == "completed":
        yield _command("complete_attempt", **fence, exitCode=0)
        yield _command("fail_start", **fence)
    elif a["status"] in ("starting", "running"):
        yield _command("start_attempt", **fence, timeoutMs=None)
        if a["status"] == "running":
            yield _command("record_running", **fence)


def actions(state: State, cfg: Alphabet, lease_ms: int = LEASE_MS, timeout_ms: int = TIMEOUT_MS) -> list[Action]:
    """Every choice offered in `state` (commands first, then the time steps)."""
    out: list[Action] = []
    by_step = _attempts_by_step(state)
    for run in sorted(state.runs.values(), key=lambda r: r["id"]):
        out += run_actions(state, run, cfg)
        plan = state.admission_of_run(run["id"])[0]["plan"]
        for p in plan["steps"]:
            s = state.step_runs[p["stepRunId"]]
            if s["status"] == "ready" and len(by_step.get(s["id"], [])) < cfg.max_attempts:
                out.append(_command("admit_task_attempt", runId=run["id"], stepRunId=s["id"],
                                    binding=consistent_binding(plan, p)))
    for attempts in by_step.values():
        for a in attempts:
            if a["status"] in T.ACTIVE_ATTEMPT:
                out += attempt_actions(state, a, cfg, lease_ms, timeout_ms)
            out += replay_actions(state, a)
    out += time_actions(state)
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
    kind: str  # "invariant" | "LIVE-1" | "no-write" | "postcondition" | "incremental"
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
    checked_variants: int = 0  # detailed variants of explored states, invariant-checked but not expanded
    depth: int = 0
    cross_checked: int = 0  # states whose incremental evaluation was compared with a full one (Config.cross_check)
    drains: int = 0  # LIVE-1 drains run; the other explored states took a passed verdict from LivenessMemo
    findings: list[Finding] = field(default_factory=list)
    rules: set[str] = field(default_factory=set)
    observed: set[str] = field(default_factory=set)


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
    def checked_variants(self) -> int:
        return sum(s.checked_variants for s in self.shapes)

    @property
    def depth(self) -> int:
        return max((s.depth for s in self.shapes), default=0)

    @property
    def cross_checked(self) -> int:
        return sum(s.cross_checked for s in self.shapes)

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.shapes for f in s.findings]

    @property
    def rules(self) -> set[str]:
        return set().union(*(s.rules for s in self.shapes)) if self.shapes else set()

    @property
    def observed(self) -> set[str]:
        return set().union(*(s.observed for s in self.shapes)) if self.shapes else set()

    def summary(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "shapes": len(self.shapes), "distinct_states": self.distinct_states,
                "transitions": self.transitions, "refusals": self.refusals, "checked_variants": self.checked_variants,
                "depth": self.depth,
                "seconds": round(self.seconds, 3),
                "states_per_second": round(self.distinct_states / self.seconds, 1) if self.seconds else None,
                "violations": len(self.findings)}


COUNT_KEYS = ("distinct_states", "transitions", "refusals", "checked_variants", "depth")


def shape_size(name: str) -> int:
    return int(name.split(":", 1)[0])


def manifest_counts(report: ExploreReport) -> dict[str, Any]:
    """Per-shape counts, the totals for every K up to report.max_steps, and the totals of the selected
    families of larger K the report explored (conformance/checkers/explore_manifest.json)."""
    return counts_of_shapes({r.shape: {k: getattr(r, k) for k in COUNT_KEYS} for r in report.shapes},
                            report.max_steps)


def _total(rows: list[dict[str, int]]) -> dict[str, int]:
    total = {key: (max if key == "depth" else sum)(c[key] for c in rows) for key in COUNT_KEYS}
    total["shapes"] = len(rows)
    return total


def counts_of_shapes(shapes: dict[str, dict[str, int]], max_steps: int) -> dict[str, Any]:
    """The manifest's totals for K = 1..max_steps over per-shape counts (every shape of K steps or fewer),
    and, for each selected K beyond max_steps whose family is all among the shapes, that family's totals."""
    totals = {str(k): _total([c for name, c in shapes.items() if shape_size(name) <= k])
              for k in range(1, max_steps + 1)}
    selected = {}
    for k, (family, members) in sorted(SELECTED.items()):
        names = [shape_name(s) for s in members(k)]
        if k > max_steps and all(n in shapes for n in names):
            selected[str(k)] = {"family": family, **_total([shapes[n] for n in names])}
    return {"totals": totals, **({"selected": selected} if selected else {}), "shapes": shapes}


# Beyond every shape of K <= the manifest's largest K, chosen families of larger K (issue 15): their
# shapes' counts are pinned with the others and their totals under "selected".
SELECTED: dict[int, tuple[str, Callable[[int], list[Shape]]]] = {5: ("chains and diamonds", chains_and_diamonds)}


def scope_shapes(max_steps: int, selected: Iterable[int] = ()) -> tuple[Shape, ...]:
    """Every shape of 1..max_steps steps, then the selected families of the given larger K."""
    return (*(s for n in range(1, max_steps + 1) for s in dag_shapes(n)),
            *(s for k in selected for s in SELECTED[k][1](k)))


def _path(parents: dict[Key, tuple[Key | None, TraceStep]], key: Key) -> list[TraceStep]:
    steps: list[TraceStep] = []
    cur: Key | None = key
    while cur is not None:
        parent, step = parents[cur]
        steps.append(step)
        cur = parent
    return steps[::-1]


def _invariants(state: State, cfg: Config, report: ShapeReport) -> tuple[list[Violation], str | None]:
    """The violations of `state` and, under cfg.cross_check, how the full evaluation disagrees."""
    found = check_invariants(state)
    if not cfg.cross_check:
        return found, None
    with reusing_record_checks(False):
        full = check_invariants(state)
    report.cross_checked += 1
    if full == found:
        return found, None
    return found, f"incremental evaluation {[str(v) for v in found]} != full {[str(v) for v in full]}"


class LivenessMemo:
    """LIVE-1 verdicts of one shape, by the explored identity of the state the drain starts from.

    The drain first moves the clock to T* (every `leased` lease expired) and is a function of the
    state it reaches there; the explorer's abstraction is exact (module docstring), which is what
    lets it drain one representative per explored identity and not its merged variants. States
    whose T*-state has an identity already drained with a passing verdict therefore pass without a
    drain of their own: states that differ only in a live or expired lease, or a pending or passed
    deadline, reach the same T*-state. Only passing verdicts are kept, so every failure is found by
    a drain of its own state and reported with that drain's steps. `Config.cross_check` drains
    every reused state as well and reports a disagreement."""

    def __init__(self, identity: Callable[[State], Key]) -> None:
        self.identity = identity
        self.passed: set[Key] = set()

    def check(self, state: State, cfg: Config, report: ShapeReport) -> list[tuple[str, str, list[TraceStep]]]:
        start = None
        if cfg.reuse_liveness:
            start = self.identity(advance_time(state, lease_horizon(state) - state.clock))
            if start in self.passed and not cfg.cross_check:
                return []
        drained = drain(state)
        report.drains += 1
        if drained.ok:
            if start is not None:
                self.passed.add(start)
            return []
        found = [("LIVE-1", drained.explain(), list(drained.steps))]
        if start in self.passed:  # only under cross_check: the memo would have passed this state
            found.append(("incremental", f"LIVE-1 reused a passing verdict, the state's own drain fails: "
                                         f"{drained.failures}", list(drained.steps)))
        return found


def _check_state(state: State, cfg: Config, report: ShapeReport,
                 liveness: LivenessMemo) -> list[tuple[str, str, list[TraceStep]]]:
    violations, disagreement = _invariants(state, cfg, report)
    found: list[tuple[str, str, list[TraceStep]]] = [("invariant", str(v), []) for v in violations]
    if disagreement is not None:
        found.append(("incremental", disagreement, []))
    if cfg.check_liveness:
        found += liveness.check(state, cfg, report)
    return found


# `observer(state, step, outcome)` sees every committed command transition; what it returns is
# collected in ShapeReport.observed. A module-level function, so that it also works in --jobs workers.
Observer = Callable[[State, TraceStep, Any], Iterable[str]]
# `checker(state, step, outcome)` returns the postconditions one command transition violates (for
# example the harness's restatement of the command contracts); each becomes a finding.
Checker = Callable[[State, TraceStep, Any], list[str]]


def explore_shape(shape: Shape, cfg: Config, observer: Observer | None = None,
                  checker: Checker | None = None) -> ShapeReport:
    """Breadth-first search over every reachable explored state of one shape."""
    with reusing_record_checks(cfg.incremental):  # the explorer never mutates a record it holds
        return _explore_shape(shape, cfg, observer, checker)


def _explore_shape(shape: Shape, cfg: Config, observer: Observer | None, checker: Checker | None) -> ShapeReport:
    report = ShapeReport(shape_name(shape))
    alphabet = cfg.alphabet(shape[0])
    plan = build_plan(RUN_ID, PLAN_ID, shape_needs(shape), INITIAL_CLOCK)
    admit: TraceStep = {"op": "command", "name": "admit_workflow", "args": {"plan": plan}}
    out = apply(State(clock=INITIAL_CLOCK), {"name": "admit_workflow", "args": {"plan": plan}})
    if out.error is not None:
        raise RuntimeError(f"shape {report.shape} does not admit: {out.error}")
    report.rules |= set(out.rules)
    if observer is not None:
        report.observed.update(observer(State(clock=INITIAL_CLOCK), admit, out))
    renamings = [{f"{RUN_ID}:{step_key(i)}": f"{RUN_ID}:{step_key(p[i])}" for i in range(shape[0])}
                 for p in automorphisms(shape)]

    canonical: dict[Key, tuple[Key, Key]] = {}  # detailed key -> its canonical (explored, detailed) keys

    def identities(s: State) -> tuple[Key, Key]:
        # Most transitions reach a detailed state seen before, often in the same labelling: one
        # lookup then replaces the two searches over the shape's automorphisms.
        detailed = detailed_state(s)
        keys = canonical.get(detailed)
        if keys is None:
            keys = canonical[detailed] = (canonical_key(collapse(detailed), renamings),
                                          canonical_key(detailed, renamings))
        return keys

    liveness = LivenessMemo(lambda s: canonical_key(abstract_state(s), renamings))
    root, root_detail = identities(out.state)
    parents: dict[Key, tuple[Key | None, TraceStep]] = {root: (None, admit)}
    checked: set[Key] = {root_detail}
    queue: deque[tuple[State, Key, Key, int]] = deque([(out.state, root, root_detail, 0)])
    while queue:
        state, key, state_detail, depth = queue.popleft()
        report.distinct_states += 1
        report.depth = max(report.depth, depth)
        for kind, message, extra in _check_state(state, cfg, report, liveness):
            report.findings.append(Finding(report.shape, kind, message, _path(parents, key) + extra))
        if report.findings and cfg.stop_on_violation:
            return report
        if cfg.max_depth is not None and depth >= cfg.max_depth:
            continue
        for action in actions(state, alphabet, cfg.lease_ms, cfg.timeout_ms):
            new, outcome = take(state, action)
            report.transitions += 1
            if outcome is not None and checker is not None:
                report.findings += [Finding(report.shape, "postcondition", p, [*_path(parents, key), action.step])
                                    for p in checker(state, action.step, outcome)]
            if outcome is not None:
                if outcome.error is not None:
                    report.refusals += 1
                    if new is not state:
                        report.findings.append(Finding(report.shape, "no-write", f"error {outcome.error} changed "
                                                       "the state", [*_path(parents, key), action.step]))
                    continue
                report.rules |= set(outcome.rules)
                if observer is not None:
                    report.observed.update(observer(state, action.step, outcome))
                status = outcome.result.get("status") if outcome.result else None
                if status in NO_WRITE and new is not state:
                    report.findings.append(Finding(report.shape, "no-write", f"{status} changed the state",
                                                   [*_path(parents, key), action.step]))
            # A refusal or a replay hands back the very State it was given (model/system.py apply):
            # same identities, and nothing to check again.
            new_key, detail = (key, state_detail) if new is state else identities(new)
            if new_key not in parents:
                parents[new_key] = (key, action.step)
                queue.append((new, new_key, detail, depth + 1))
            elif detail not in checked:  # merged into an explored state: its own details are still checked
                report.checked_variants += 1
                violations, disagreement = _invariants(new, cfg, report)
                path = [*_path(parents, key), action.step]
                report.findings += [Finding(report.shape, "invariant", str(v), path) for v in violations]
                if disagreement is not None:
                    report.findings.append(Finding(report.shape, "incremental", disagreement, path))
            checked.add(detail)
            if report.findings and cfg.stop_on_violation:
                return report
    return report


def _explore_one(job: tuple[int, Shape, Config, Observer | None, Checker | None]) -> tuple[int, ShapeReport]:
    index, shape, cfg, observer, checker = job
    return index, explore_shape(shape, cfg, observer, checker)


def _pinned_transitions() -> dict[str, int]:
    """Per shape, the transitions the manifest pins (only to hand out the largest shapes first)."""
    from importlib import resources
    try:
        manifest = resources.files("qlwf.conformance.checkers").joinpath("explore_manifest.json")
        text = manifest.read_text(encoding="utf-8")
        return {name: int(c["transitions"]) for name, c in json.loads(text)["shapes"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def dispatch_order(shapes: list[Shape]) -> list[int]:
    """Indexes of `shapes`, largest expected work first, so that two workers finish together: the
    manifest's transitions where it pins the shape, else more steps and fewer edges first."""
    pinned = _pinned_transitions()
    return sorted(range(len(shapes)), key=lambda i: (-pinned.get(shape_name(shapes[i]), 1 << 40),
                                                     -shapes[i][0], len(shapes[i][1]), i))


def explore(cfg: Config, progress: Callable[[ShapeReport], None] | None = None,
            observer: Observer | None = None, jobs: int = 1, checker: Checker | None = None) -> ExploreReport:
    """Explore every shape of 1..cfg.max_steps steps (or cfg.shapes), in `jobs` forked processes.

    The report lists the shapes in their order whatever the number of jobs; under stop_on_violation
    it ends with the first shape (in that order) that has a finding, as a single process would."""
    start = time.perf_counter()
    todo = list(cfg.shapes) if cfg.shapes is not None else [s for n in range(1, cfg.max_steps + 1)
                                                            for s in dag_shapes(n)]
    done: dict[int, ShapeReport] = {}

    def first_failing() -> int | None:
        return min((i for i, r in done.items() if r.findings), default=None) if cfg.stop_on_violation else None

    def settled() -> bool:  # every shape before the first failing one is in: nothing later can matter
        stop = first_failing()
        return stop is not None and all(i in done for i in range(stop))

    if jobs > 1 and len(todo) > 1:
        work = [(i, todo[i], cfg, observer, checker) for i in dispatch_order(todo)]
        with ForkPool(_explore_one, min(jobs, len(work))) as pool:  # leaving it kills what still runs
            for _, (i, r) in pool.unordered(work):
                done[i] = r
                if progress is not None:
                    progress(r)
                if settled():
                    break
    else:
        for i, shape in enumerate(todo):
            done[i] = _explore_one((i, shape, cfg, observer, checker))[1]
            if progress is not None:
                progress(done[i])
            if settled():
                break
    stop = first_failing()
    last = len(todo) - 1 if stop is None else stop
    shapes = [done[i] for i in range(last + 1) if i in done]
    return ExploreReport(cfg.max_steps, shapes, time.perf_counter() - start)
