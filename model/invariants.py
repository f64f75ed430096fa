"""INV-1..INV-31 (state-machines.md §9) as named predicates over a durable State.

Each invariant is a function `(view) -> list[str]` of violation messages, registered with the ADR
clause it comes from. `check_invariants(state)` evaluates all of them and returns explained
violations; an empty list means the state satisfies the whole specification.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple, TypeVar

from . import tables as T
from .admission import admission_ledger, normalized_plan_bundle
from .errors import QlwfError
from .frontier import resolve_frontier
from .memo import trusting_record_identity
from .records import (
    ATTEMPT_LEASE_KEYS,
    Record,
    lease_problem,
    normalize_admission_receipt,
    normalize_plan,
    normalize_step_run,
    normalize_task_receipt,
)
from .state import State
from .steprun import MUTATION_KEYS, mutation_digest
from .values import INT31_MAX, is_identifier, is_portable_id

TERMINAL_EVENT_TYPES = frozenset(f"workflow.{s}" for s in T.TERMINAL_RUN)


# ------------------------------------------------------------------------------------------------
# Incremental evaluation (the explorer; decisions Q-41)
# A committed record is never changed in place (States are immutable values, model/state.py): a step
# replaces the records it writes and shares every other one with the previous state. Within
# `reusing_record_checks()` the per-record parts of the invariants (INV-6's normalizations, INV-5's
# admission bundle, INV-8's mutation digests, INV-26's lease shape) are remembered by the identity of
# the records they read, so a state pays only for what its step wrote. Outside it everything is evaluated in full.
_REUSE: ContextVar[dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] | None] = ContextVar(
    "qlwf_invariant_reuse", default=None)
REUSE_BOUND = 250_000  # entries; past it the memo starts afresh (it pins the records it keys on)
_V = TypeVar("_V")


@contextmanager
def reusing_record_checks(enabled: bool = True, memo: dict[Any, Any] | None = None) -> Iterator[None]:
    """Within: per-record invariant parts are reused for records seen before (same object); with
    enabled=False, within: everything is evaluated in full. `memo` carries the reuse across scopes
    (a caller checking one evolving state step by step). The caller vouches that no record it
    passes is mutated in place meanwhile (the model never does)."""
    token = _REUSE.set((memo if memo is not None else {}) if enabled else None)
    try:
        with trusting_record_identity(enabled):  # the same vouching lets the normalizer memos skip keys
            yield
    finally:
        _REUSE.reset(token)


def _reused(kind: str, inputs: tuple[Any, ...], compute: Callable[[], _V]) -> _V:
    memo = _REUSE.get()
    if memo is None:
        return compute()
    key = (kind, *map(id, inputs))
    hit = memo.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], inputs, strict=True)):
        value: _V = hit[1]
        return value
    value = compute()
    if len(memo) >= REUSE_BOUND:
        memo.clear()
    memo[key] = (inputs, value)  # holding the inputs keeps their ids from being reused
    return value


class Violation(NamedTuple):
    invariant: str
    name: str
    clause: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant} {self.name} [{self.clause}]: {self.message}"


@dataclass
class RunView:
    """Everything one Run owns, gathered once so every invariant reads the same view."""

    state: State
    run: Record

    @cached_property
    def admission(self) -> Record | None:
        found = self.state.admission_of_run(self.run["id"])
        return found[0] if len(found) == 1 else None

    @cached_property
    def plan(self) -> Record | None:
        return self.admission["plan"] if self.admission else None

    @cached_property
    def events(self) -> tuple[Record, ...]:
        return self.state.events_of(self.run["id"])

    @cached_property
    def event_by_id(self) -> dict[str, Record]:
        return {e["id"]: e for e in self.events}

    @cached_property
    def steps(self) -> list[Record]:
        return sorted(self.state.steps_of_run(self.run["id"]), key=lambda s: (s["stepKey"], s["id"]))

    @cached_property
    def step_by_key(self) -> dict[str, Record]:
        return {s["stepKey"]: s for s in self.steps}

    @cached_property
    def attempts(self) -> list[Record]:
        return sorted(self.state.attempts_of_run(self.run["id"]), key=lambda a: a["attempt"])

    @cached_property
    def _ledgers(self) -> dict[str, list[Record]]:
        by: dict[str, list[Record]] = {}
        for m in self.state.mutations.values():  # one pass; each list as State.ledger_of_step orders it
            by.setdefault(m["stepRunId"], []).append(m)
        return {k: sorted(v, key=lambda m: m["stepRun"]["version"]) for k, v in by.items()}

    def ledger_of_step(self, step_run_id: str) -> list[Record]:
        return self._ledgers.get(step_run_id, [])

    def attempts_of_step(self, step_id: str) -> list[Record]:
        return [a for a in self.attempts if a["stepRunId"] == step_id]

    @cached_property
    def cancel_event(self) -> Record | None:
        found = [e for e in self.events if e["type"] == "workflow.cancel_requested"]
        return found[0] if found else None

    @cached_property
    def _events_by_attempt(self) -> dict[str | None, list[Record]]:
        by: dict[str | None, list[Record]] = {}
        for e in self.events:  # one pass; each list in log order
            by.setdefault(e.get("attemptId"), []).append(e)
        return by

    def attempt_events(self, attempt_id: str) -> list[Record]:
        return self._events_by_attempt.get(attempt_id, [])

    @cached_property
    def _step_events(self) -> dict[str | None, list[Record]]:
        by: dict[str | None, list[Record]] = {}
        for e in self.events:
            if e["type"].startswith("step."):
                by.setdefault(e.get("stepRunId"), []).append(e)
        return by

    def step_events(self, step_run_id: str) -> list[Record]:
        """The `step.*` events of one StepRun, in log order."""
        return self._step_events.get(step_run_id, [])

    def reached_starting(self, attempt_id: str) -> bool:
        return any(e["type"] == "workflow.task_attempt.starting" for e in self.attempt_events(attempt_id))

    def terminal_attempt_event(self, attempt_id: str) -> Record | None:
        for e in self.attempt_events(attempt_id):
            if e["type"].startswith("workflow.task_attempt.") and e["type"].rsplit(".", 1)[1] in T.TERMINAL_ATTEMPT:
                return e
        return None

    @property
    def intent(self) -> bool:
        return "cancelRequestedAtMs" in self.run


@dataclass
class SystemView:
    state: State

    @cached_property
    def runs(self) -> list[RunView]:
        return [RunView(self.state, self.state.runs[k]) for k in sorted(self.state.runs)]


Check = Callable[[SystemView], list[str]]
REGISTRY: list[tuple[str, str, str, Check]] = []


def invariant(inv: str, name: str, clause: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        REGISTRY.append((inv, name, clause, fn))
        return fn
    return register


def per_run(fn: Callable[[RunView], list[str]]) -> Check:
    @functools.wraps(fn)
    def check(view: SystemView) -> list[str]:
        return [f"Run {rv.run['id']}: {m}" for rv in view.runs for m in fn(rv)]
    return check


# ------------------------------------------------------------------------------------------------
# Counters and log
@invariant("INV-1", "Counter equality", "ADR-0226 §4; ADR-0228 §4")
@per_run
def inv1(rv: RunView) -> list[str]:
    r = rv.run
    if r["version"] == r["eventSequence"] == len(rv.events):
        return []
    return [f"version {r['version']}, eventSequence {r['eventSequence']}, {len(rv.events)} events"]


@invariant("INV-2", "Contiguous, unique event log", "ADR-0226 §4; ADR-0228 §4")
def inv2(view: SystemView) -> list[str]:
    out = []
    ids = Counter(e["id"] for rv in view.runs for e in rv.events)
    out += [f"event id {i} used {n} times" for i, n in ids.items() if n > 1]
    for rv in view.runs:
        seqs = [e["sequence"] for e in rv.events]
        if seqs != list(range(1, len(seqs) + 1)):
            out.append(f"Run {rv.run['id']}: sequences {seqs} are not 1..n")
        keys = Counter(e.get("dedupeKey") for e in rv.events)
        out += [f"Run {rv.run['id']}: dedupeKey {k} repeated" for k, n in keys.items() if n > 1]
        out += [f"event {e['id']}: dedupeKey differs from id or wrong runId" for e in rv.events
                if e.get("dedupeKey") != e["id"] or e["runId"] != rv.run["id"]]
    return out


@invariant("INV-3", "Portable identifiers", "ADR-0228 §2 (portable ids); D-9")
def inv3(view: SystemView) -> list[str]:
    s = view.state
    out = [f"Run id {r} not portable" for r in s.runs if not is_portable_id(r)]
    out += [f"event id {e['id']} not portable" for rv in view.runs for e in rv.events if not is_portable_id(e["id"])]
    out += [f"attempt id {a} not portable" for a in s.attempts if not is_portable_id(a)]
    out += [f"StepRun id {i} not an IDENTIFIER" for i in s.step_runs if not is_identifier(i)]
    out += [f"mutation id {i} not an IDENTIFIER" for i in s.mutations if not is_identifier(i)]
    out += [f"worker id {a['workerId']} not an IDENTIFIER" for a in s.attempts.values()
            if "workerId" in a and not is_identifier(a["workerId"])]
    return out


@invariant("INV-4", "Time monotonicity", "ADR-0226 §2 (monotonic observation time); D-8")
def inv4(view: SystemView) -> list[str]:
    out = []
    for rv in view.runs:
        times = [e["createdAtMs"] for e in rv.events]
        if times != sorted(times):
            out.append(f"Run {rv.run['id']}: event times decrease")
        if times and (min(times) < rv.run["createdAtMs"] or times[-1] > view.state.clock):
            out.append(f"Run {rv.run['id']}: event time before the Run or after now")
        for s in rv.steps:
            step_events = rv.step_events(s["id"])
            if step_events and step_events[-1]["createdAtMs"] != s["updatedAtMs"]:
                out.append(f"StepRun {s['id']}: updatedAtMs differs from its latest step event")
    return out


@invariant("INV-5", "Frozen admission evidence", "ADR-0226 §5")
@per_run
def inv5(rv: RunView) -> list[str]:
    if rv.admission is None:
        return ["no unique admission"]
    plan = rv.admission["plan"]
    bundle, problem = _reused("bundle", (plan,), lambda: _bundle(plan))
    if bundle is None:
        return [f"stored plan does not build a bundle: {problem}"]
    n = len(bundle["plan"]["steps"])
    out = []
    if list(rv.events[: n + 1]) != [bundle["admissionEvent"], *(m["event"] for m in bundle["stepMutations"])]:
        out.append("admission events differ from the bundle")
    if rv.admission["receipt"] != bundle["receipt"]:
        out.append("admission receipt differs from the bundle")
    for entry in admission_ledger(bundle):
        ledger = rv.ledger_of_step(entry["stepRunId"])
        if not ledger or ledger[0] != entry:
            out.append(f"first ledger entry of {entry['stepRunId']} differs")
    return out


def _bundle(plan: Record) -> tuple[Record | None, str | None]:
    """create_admission_bundle(plan), or the message of its refusal; the plan's normalization is
    INV-6's (the same record, reused by identity where reuse is on)."""
    normalized, problem, _ = _normalized(normalize_plan, plan)
    if normalized is None:
        return None, problem
    try:
        return normalized_plan_bundle(normalized), None
    except QlwfError as e:
        return None, e.message


# ------------------------------------------------------------------------------------------------
# Records
def _normalized(fn: Callable[[Any], Record], value: Any) -> tuple[Record | None, str | None, bool]:
    """fn(value) (or None and the message of its typed refusal), and whether it equals value."""

    def compute() -> tuple[Record | None, str | None, bool]:
        try:
            normalized = fn(value)
        except QlwfError as e:
            return None, e.message, False
        return normalized, None, bool(normalized == value)

    return _reused(fn.__name__, (value,), compute)


def _normalizes(fn: Callable[[Any], Record], value: Any) -> bool:
    return _normalized(fn, value)[2]


@invariant("INV-6", "Record validity", "ADR-0226 §3 (fail-closed records); ADR-0228 §2")
def inv6(view: SystemView) -> list[str]:
    s = view.state
    out = []
    for pd, adm in s.admissions.items():
        if not _normalizes(normalize_plan, adm["plan"]) or adm["plan"]["planDigest"] != pd:
            out.append(f"plan {pd} does not normalize to itself")
        if not _normalizes(normalize_admission_receipt, adm["receipt"]):
            out.append(f"admission receipt of {pd} does not normalize")
    out += [f"StepRun {i} does not normalize" for i, r in s.step_runs.items() if not _normalizes(normalize_step_run, r)]
    out += [f"ledger post-image {i} does not normalize" for i, m in s.mutations.items()
            if not _normalizes(normalize_step_run, m["stepRun"]) or m["stepRunDigest"] != m["stepRun"]["stepRunDigest"]]
    out += [f"task receipt {i} does not normalize" for i, r in s.receipts.items()
            if not _normalizes(normalize_task_receipt, r)]
    return out


@invariant("INV-7", "Step set bijection and immutability", "ADR-0226 §3")
@per_run
def inv7(rv: RunView) -> list[str]:
    if rv.plan is None:
        return ["no plan"]
    plan = rv.plan
    if sorted(s["id"] for s in rv.steps) != sorted(p["stepRunId"] for p in plan["steps"]):
        return ["StepRuns are not in bijection with the plan steps"]
    out = []
    by_id = {s["id"]: s for s in rv.steps}
    for p in plan["steps"]:
        s = by_id[p["stepRunId"]]
        if (s["runId"], s["stepKey"], s["definitionRef"], s["definitionDigest"], s["kind"], s["required"],
                s["parentStepRunId"], s["inputRef"], s["createdAtMs"]) != (
                plan["runId"], p["stepKey"], p["taskDefinitionRef"], p["taskDefinitionDigest"], "task", True,
                None, None, plan["plannedAtMs"]):
            out.append(f"StepRun {s['id']} immutable fields differ from the plan")
    return out


def rebuild_mutation(state: State, entry: Record, previous: Record | None, event: Record | None) -> Record | None:
    """records.md §6.6: the full mutation recovered from its ledger entry (None if the event is missing)."""
    if event is None:
        return None
    prev = previous["stepRun"] if previous else None
    m = {
        "schema": T.SCHEMA_STEP_RUN_MUTATION, "mutationId": entry["mutationId"], "runId": entry["runId"],
        "expectedRunVersion": entry["runVersion"] - 1, "expectedRunEventSequence": entry["eventSequence"] - 1,
        "expectedStepRunVersion": prev["version"] if prev else None,
        "expectedStepRunDigest": prev["stepRunDigest"] if prev else None,
        "previousStatus": prev["status"] if prev else None, "stepRun": entry["stepRun"], "event": event,
    }
    assert tuple(m) == MUTATION_KEYS[:-1]
    return m


def _digest_recomputes(state: State, entry: Record, previous: Record | None, event: Record) -> bool:
    m = rebuild_mutation(state, entry, previous, event)
    return m is not None and mutation_digest(m) == entry["mutationDigest"]


@invariant("INV-8", "StepRun history = mutation ledger = step events", "ADR-0226 §3–§4")
@per_run
def inv8(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        ledger = rv.ledger_of_step(s["id"])
        versions = [m["stepRun"]["version"] for m in ledger]
        # length first: a drifted version near 2^31 must not build a 2^31-entry list
        if len(versions) != s["version"] or versions != list(range(1, len(versions) + 1)):
            out.append(f"StepRun {s['id']}: ledger versions {versions} are not 1..{s['version']}")
            continue
        if ledger[-1]["stepRun"] != s or s["lastMutationId"] != ledger[-1]["mutationId"]:
            out.append(f"StepRun {s['id']}: last ledger post-image differs from the StepRun")
        previous = None
        for entry in ledger:
            e = rv.event_by_id.get(entry["eventId"])
            want = "step.created" if entry["stepRun"]["version"] == 1 else f"step.{entry['stepRun']['status']}"
            if (e is None or e["sequence"] != entry["eventSequence"] or e["type"] != want
                    or e.get("stepRunId") != s["id"]):
                out.append(f"StepRun {s['id']}: ledger entry {entry['mutationId']} has no matching {want} event")
            else:
                if not _reused("mutation", (entry, previous, e), functools.partial(_digest_recomputes, rv.state,
                                                                                   entry, previous, e)):
                    out.append(f"StepRun {s['id']}: mutationDigest of {entry['mutationId']} does not recompute")
            previous = entry
        n_events = len(rv.step_events(s["id"]))
        if n_events != s["version"]:
            out.append(f"StepRun {s['id']}: {n_events} step events for version {s['version']}")
    return out


@invariant("INV-9", "v1 status domain", "D-1; D-12")
def inv9(view: SystemView) -> list[str]:
    out = []
    for s in view.state.step_runs.values():
        if s["status"] in ("waiting_approval", "lost"):
            out.append(f"StepRun {s['id']} is {s['status']} after a commit")
        if s["attemptCount"] not in (0, 1) or (s["attemptCount"] == 1) != (s["startedAtMs"] is not None):
            out.append(f"StepRun {s['id']}: attemptCount {s['attemptCount']} vs startedAtMs {s['startedAtMs']}")
        if s["outputRef"] is not None or s["approvalRequestId"] is not None:
            out.append(f"StepRun {s['id']} carries outputRef or approvalRequestId")
    return out


# ------------------------------------------------------------------------------------------------
# Run status
@invariant("INV-10", "Run shape", "ADR-0226 §4; ADR-0228 §4")
@per_run
def inv10(rv: RunView) -> list[str]:
    r = rv.run
    if r["status"] not in T.RUN_STATUSES:
        return [f"status {r['status']} is not a workflow Run status"]
    if r["status"] == "running":
        return ["running Run carries finishedAtMs/errorCode/errorSummary"] if any(
            k in r for k in ("finishedAtMs", "errorCode", "errorSummary")) else []
    if not rv.events or r.get("finishedAtMs") != rv.events[-1]["createdAtMs"]:
        return ["terminal finishedAtMs differs from the last event time"]
    return []


@invariant("INV-11", "Terminal closure", "ADR-0228 §4; ADR-0226 §3")
@per_run
def inv11(rv: RunView) -> list[str]:
    if rv.run["status"] == "running":
        return []
    out = [f"StepRun {s['id']} is {s['status']} in a terminal Run" for s in rv.steps
           if s["status"] not in T.TERMINAL_STEP]
    out += [f"attempt {a['id']} is active in a terminal Run" for a in rv.attempts if a["status"] in T.ACTIVE_ATTEMPT]
    out += [f"lease of {a['id']} is leased in a terminal Run" for a in rv.attempts
            if rv.state.leases.get(a["id"], {}).get("status") == "leased"]
    return out


@invariant("INV-12", "Parent terminal event is the last event", "ADR-0228 §4 (parent terminalized last)")
@per_run
def inv12(rv: RunView) -> list[str]:
    terminal = [e for e in rv.events if e["type"] in TERMINAL_EVENT_TYPES]
    if rv.run["status"] == "running":
        return [f"running Run has terminal event {terminal[0]['id']}"] if terminal else []
    if len(terminal) != 1 or terminal[0] is not rv.events[-1] or terminal[0]["type"] != f"workflow.{rv.run['status']}":
        return ["terminal Run must have exactly one terminal event, last, of its own status"]
    return []


@invariant("INV-13", "Terminal attribution", "ADR-0226 §3; ADR-0228 §3 (reason mapping); D-5")
@per_run
def inv13(rv: RunView) -> list[str]:
    r = rv.run
    if r["status"] == "running" or not rv.events:
        return []
    last = rv.events[-1]
    if not rv.intent:
        want = T.aggregate([s["status"] for s in rv.steps])
        code = T.FRONTIER_TERMINAL_ERROR_CODE.get(r["status"])
        if r["status"] != want or r.get("errorCode") != code or "errorSummary" in r \
                or last["actorType"] != "reconciler" or "actorId" in last:
            return [f"frontier terminal {r['status']} is not AGG={want} with code {code}"]
        return []
    target = T.CANCEL_REASON_TARGET[r["cancelReason"]]
    if (r["status"], r.get("errorCode"), r.get("errorSummary")) != (target.status, target.error_code,
                                                                     target.error_summary) \
            or (last["actorType"], last.get("actorId")) != ("reconciler", "runtime:cancellation"):
        return [f"cancelled terminal {r['status']} does not follow reason {r['cancelReason']}"]
    return []


# ------------------------------------------------------------------------------------------------
# Cancel intent
@invariant("INV-14", "Intent shape and its single counted event", "ADR-0228 §1; D-4")
@per_run
def inv14(rv: RunView) -> list[str]:
    r = rv.run
    if ("cancelRequestedAtMs" in r) != ("cancelReason" in r):
        return ["cancelRequestedAtMs and cancelReason are not paired"]
    events = [e for e in rv.events if e["type"] == "workflow.cancel_requested"]
    if not rv.intent:
        return ["cancel_requested event without intent"] if events else []
    if len(events) != 1:
        return [f"{len(events)} cancel_requested events"]
    e = events[0]
    if (e["payload"].get("cancel_reason"), e["payload"].get("cancel_requested_at_ms"), e["createdAtMs"]) != (
            r["cancelReason"], r["cancelRequestedAtMs"], r["cancelRequestedAtMs"]):
        return ["cancel_requested event disagrees with the Run's intent"]
    return []


NEW_WORK_TYPES = frozenset({"workflow.task_attempt_admitted", "workflow.task_dispatch_leased",
                            "workflow.task_attempt.starting", "workflow.task_attempt.running"})


@invariant("INV-15", "No new work after intent", "ADR-0228 §1; D-3")
@per_run
def inv15(rv: RunView) -> list[str]:
    if rv.cancel_event is None:
        return []
    after = [e for e in rv.events if e["sequence"] > rv.cancel_event["sequence"]]
    return [f"event {e['id']} ({e['type']}) after intent" for e in after
            if e["type"] in NEW_WORK_TYPES or (e["type"] == "step.ready" and e["payload"].get("from") == "pending")]


# ------------------------------------------------------------------------------------------------
# Dependencies
@invariant("INV-16", "Readiness implies dependencies", "ADR-0226 §3 (ready rule)")
@per_run
def inv16(rv: RunView) -> list[str]:
    if rv.plan is None:
        return []
    out = []
    needs = {p["stepKey"]: p["needs"] for p in rv.plan["steps"]}
    for s in rv.steps:
        if s["readyAtMs"] is not None:
            bad = [d for d in needs.get(s["stepKey"], []) if rv.step_by_key[d]["status"] != "succeeded"]
            if bad:
                out.append(f"StepRun {s['id']} was readied while needs {bad} are not succeeded")
        elif rv.attempts_of_step(s["id"]):
            out.append(f"StepRun {s['id']} has an attempt but no readyAtMs")
    return out


@invariant("INV-17", "Skip justification", "ADR-0226 §3 (transitive skip)")
@per_run
def inv17(rv: RunView) -> list[str]:
    if rv.plan is None:
        return []
    needs = {p["stepKey"]: p["needs"] for p in rv.plan["steps"]}
    out = []
    for s in rv.steps:
        if s["status"] != "skipped":
            continue
        if (s["resultCode"] != T.FRONTIER_SKIP_RESULT_CODE or s["errorSummary"] is not None
                or s["readyAtMs"] is not None):
            out.append(f"StepRun {s['id']}: skipped shape invalid")
        if not any(rv.step_by_key[d]["status"] in T.BLOCKING_STEP for d in needs[s["stepKey"]]):
            out.append(f"StepRun {s['id']} skipped without a blocking direct need")
    return out


@invariant("INV-18", "Pending shape", "ADR-0226 §3")
@per_run
def inv18(rv: RunView) -> list[str]:
    terminal = any(e["type"] in TERMINAL_EVENT_TYPES for e in rv.events)
    return [f"StepRun {s['id']}: pending with attempts, readyAtMs, version > 1 or a terminal Run" for s in rv.steps
            if s["status"] == "pending" and (rv.attempts_of_step(s["id"]) or s["readyAtMs"] is not None
                                             or s["version"] != 1 or terminal)]


# ------------------------------------------------------------------------------------------------
# Attempts
@invariant("INV-19", "At most one active attempt per StepRun", "ADR-0228 §3; ADR-0226 §4")
@per_run
def inv19(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        active = [a["id"] for a in rv.attempts_of_step(s["id"]) if a["status"] in T.ACTIVE_ATTEMPT]
        if len(active) > 1:
            out.append(f"StepRun {s['id']} has active attempts {active}")
        if active and rv.run["status"] != "running":
            out.append(f"active attempt {active} in a {rv.run['status']} Run")
    return out


@invariant("INV-20", "Attempt bookkeeping", "ADR-0226 §4 (ready epoch admission); D-12")
@per_run
def inv20(rv: RunView) -> list[str]:
    out = []
    receipts = [r for r in rv.state.receipts.values() if r["runId"] == rv.run["id"]]
    epochs = Counter((r["stepRunId"], r["stepRunVersion"]) for r in receipts)
    out += [f"epoch {k} admitted {n} times" for k, n in epochs.items() if n > 1]
    for a in rv.attempts:
        r = rv.state.receipts.get(a["id"])
        if r is None or (r["runId"], r["stepRunId"], r["attemptNumber"], r["executorType"], r["admittedAtMs"]) != (
                a["runId"], a["stepRunId"], a["attempt"], a["executorType"], a["createdAtMs"]):
            out.append(f"attempt {a['id']} has no matching receipt")
        admitted = [e for e in rv.events
                    if e["type"] == "workflow.task_attempt_admitted" and e.get("attemptId") == a["id"]]
        if len(admitted) != 1:
            out.append(f"attempt {a['id']} has {len(admitted)} admission events")
    order = sorted(rv.attempts, key=lambda a: next((e["sequence"] for e in rv.events
                                                     if e["type"] == "workflow.task_attempt_admitted"
                                                     and e.get("attemptId") == a["id"]), 0))
    numbers = [a["attempt"] for a in order]
    if numbers != list(range(1, len(numbers) + 1)) or len(numbers) > T.MAX_RUN_ATTEMPTS:
        out.append(f"attempt numbers {numbers} are not 1..n in admission order")
    return out


def _coupling_problem(rv: RunView, a: Record) -> str | None:
    """state-machines.md §7 for one attempt, or the broken row."""
    r = rv.state.receipts.get(a["id"])
    s = rv.state.step_runs.get(a["stepRunId"])
    if r is None or s is None:
        return "no receipt or StepRun"
    lease = rv.state.leases.get(a["id"])
    ls = lease["status"] if lease else None
    worker_released = ls == "released" and lease is not None and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS
    at_epoch = (s["status"] == "ready" and s["version"] == r["stepRunVersion"]
                and s["stepRunDigest"] == r["stepRunDigest"])
    st, cbs = a["status"], a["callbackSequence"]
    if st == "claimed":
        ok = (ls is None or worker_released or ls == "leased") and at_epoch and "startedAtMs" not in a and cbs == 0
    elif st == "starting":
        # §7: the starting row is "same as claimed", which includes "A.startedAtMs absent" (the start
        # barrier sets it only on starting -> running); this conjunct was missing.
        ok = ls == "leased" and at_epoch and "startedAtMs" not in a and cbs == 0
    elif st == "running":
        ok = (ls == "leased" and s["status"] == "running" and s["version"] == r["stepRunVersion"] + 1
              and s["startedAtMs"] == a.get("startedAtMs") and cbs == 1)
    elif st == "lost":
        if ls != "released" or lease is None or lease.get("releaseReason") != "lease_expired":
            return "lost attempt without a lease released as lease_expired"
        if a.get("errorCode") == "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED":
            ok = s["version"] > r["stepRunVersion"] and cbs == 0
        else:
            ok = (s["status"] == "failed" and s["resultCode"] == "cluster_recovery_execution_not_running"
                  and cbs == (1 if "startedAtMs" in a else 0))
    elif ls == "completed":  # worker path: fail_start (never started) or completion
        if "startedAtMs" in a:
            ok = (s["status"] == st and s["version"] == r["stepRunVersion"] + 2
                  and s["startedAtMs"] == a["startedAtMs"] and cbs == 1)
        else:
            ok = st != "succeeded" and s["status"] == st and s["version"] == r["stepRunVersion"] + 1 \
                and s["startedAtMs"] is None and cbs == 1
    else:  # settled by convergence
        ok = (st in ("cancelled", "timed_out") and (ls is None or worker_released) and s["status"] in T.TERMINAL_STEP
              and s["startedAtMs"] is None and cbs == 0)
    return None if ok else f"{st} attempt with lease {ls} and StepRun {s['status']} v{s['version']}"


@invariant("INV-21", "Attempt ↔ StepRun ↔ lease coupling", "ADR-0228 §3 (start barrier); ADR-0226 §4")
@per_run
def inv21(rv: RunView) -> list[str]:
    out = [f"attempt {a['id']}: {p}" for a in rv.attempts if (p := _coupling_problem(rv, a))]
    for s in rv.steps:
        of_step = rv.attempts_of_step(s["id"])
        running = [a for a in of_step if a["status"] == "running"]
        if s["status"] == "running" and len(running) != 1:
            out.append(f"running StepRun {s['id']} has {len(running)} running attempts")
        if s["status"] == "ready":
            active = [a for a in of_step if a["status"] in T.ACTIVE_ATTEMPT]
            if any(a["status"] == "running" for a in active):
                out.append(f"ready StepRun {s['id']} has a running attempt")
    return out


@invariant("INV-22", "No retry after the start barrier", "D-12; ADR-0228 §3")
@per_run
def inv22(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        attempts = rv.attempts_of_step(s["id"])
        for a in attempts[:-1]:
            if a["status"] != "lost" or a.get("errorCode") != "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED" \
                    or "startedAtMs" in a or "deadlineAtMs" in a:
                out.append(f"StepRun {s['id']}: attempt {a['id']} was retried after it crossed or ended")
        if sum(1 for a in attempts if rv.reached_starting(a["id"])) > 1:
            out.append(f"StepRun {s['id']}: more than one attempt reached starting")
    return out


@invariant("INV-23", "Convergence respects execution authority", "ADR-0228 §3; D-7")
@per_run
def inv23(rv: RunView) -> list[str]:
    out = []
    for a in rv.attempts:
        e = rv.terminal_attempt_event(a["id"])
        if e is not None and e["id"].startswith("wca:"):
            lease = rv.state.leases.get(a["id"])
            if "startedAtMs" in a or "deadlineAtMs" in a or (lease is not None and not (
                    lease["status"] == "released" and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS)):
                out.append(f"convergence settled attempt {a['id']} that held execution authority")
    for s in rv.steps:
        if s["lastMutationId"].startswith("wcm:"):
            ledger = rv.ledger_of_step(s["id"])
            prev = ledger[-2]["stepRun"]["status"] if len(ledger) > 1 else None
            if prev == "running" or any(rv.reached_starting(a["id"]) for a in rv.attempts_of_step(s["id"])):
                out.append(f"convergence terminalized StepRun {s['id']} that was executing")
    return out


# ------------------------------------------------------------------------------------------------
# Leases
@invariant("INV-24", "Lease and attempt agree", "ADR-0228 §3; D-7; D-10")
def inv24(view: SystemView) -> list[str]:
    out = []
    s = view.state
    for a in s.attempts.values():
        lease = s.leases.get(a["id"])
        if a["status"] in ("starting", "running") and (lease is None or lease["status"] != "leased"
                                                         or lease["workerId"] != a.get("workerId")):
            out.append(f"{a['status']} attempt {a['id']} without its leased lease")
    for aid, lease in s.leases.items():
        owner = s.attempts.get(aid)
        if owner is None:
            out.append(f"lease {aid} without attempt")
            continue
        st, reason = lease["status"], lease.get("releaseReason")
        if st == "leased" and owner["status"] not in T.ACTIVE_ATTEMPT:
            out.append(f"leased lease of {owner['status']} attempt {aid}")
        if st == "completed":
            rv = RunView(s, s.runs[owner["runId"]])
            e = rv.terminal_attempt_event(aid)
            if owner["status"] not in ("succeeded", "failed", "cancelled", "timed_out") or e is None \
                    or not e["id"].startswith("wxa:"):
                out.append(f"completed lease of attempt {aid} not ended by the worker path")
        if st == "released" and reason == "lease_expired" and owner["status"] != "lost":
            out.append(f"lease of {aid} expired-released but attempt is {owner['status']}")
        if st == "released" and reason in T.WORKER_RELEASE_REASONS and (
                owner["status"] not in ("claimed", "cancelled", "timed_out")
                or any(k in owner for k in ATTEMPT_LEASE_KEYS)):
            out.append(f"worker-released lease of {aid} with attempt {owner['status']} or lease keys")
    return out


@invariant("INV-25", "Lease mirrors on the attempt", "D-10; D-13")
def inv25(view: SystemView) -> list[str]:
    out = []
    for a in view.state.attempts.values():
        lease = view.state.leases.get(a["id"])
        if "workerId" in a:
            if lease is None or (a["workerId"], a["leaseGeneration"], a["leaseVersion"], a["leaseExpiresAtMs"]) != (
                    lease["workerId"], lease["leaseGeneration"], lease["version"], lease["expiresAtMs"]):
                out.append(f"attempt {a['id']} lease mirror disagrees with its lease")
        elif lease is not None and not (lease["status"] == "released"
                                        and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS):
            out.append(f"attempt {a['id']} has no lease keys but lease is {lease['status']}")
    return out


@invariant("INV-26", "Lease shape", "D-13; records.md §6.8")
def inv26(view: SystemView) -> list[str]:
    out = []
    for aid, lease in view.state.leases.items():
        problem = _reused("lease", (lease,), functools.partial(lease_problem, lease))
        if problem:
            out.append(f"lease {aid}: {problem}")
        elif not T.LEASE_DURATION_MIN_MS <= lease["expiresAtMs"] - lease["renewedAtMs"] <= T.LEASE_DURATION_MAX_MS:
            out.append(f"lease {aid}: duration outside 5000..600000")
    return out


# ------------------------------------------------------------------------------------------------
# Bounds, candidates and codes
@invariant("INV-27", "Counter bounds", "D-12; records.md §2.3")
def inv27(view: SystemView) -> list[str]:
    s = view.state
    out = [f"Run {r['id']} counters overflow" for r in s.runs.values()
           if max(r["version"], r["eventSequence"]) > INT31_MAX]
    out += [f"StepRun {x['id']} version/attemptCount out of bounds" for x in s.step_runs.values()
            if x["version"] > INT31_MAX or not 0 <= x["attemptCount"] <= 1]
    out += [f"lease {k} counters overflow" for k, x in s.leases.items()
            if x["version"] > INT31_MAX or x["leaseGeneration"] > INT31_MAX]
    out += [f"attempt {a['id']} number > 8192" for a in s.attempts.values() if a["attempt"] > T.MAX_RUN_ATTEMPTS]
    return out


@invariant("INV-28", "Frontier candidate exactness", "ADR-0226 §1, §4 (bounded candidates, no empty writes)")
def inv28(view: SystemView) -> list[str]:
    # §9 INV-28 is an "iff" about what frontier_candidates returns: every Run, including terminal Runs
    # and Runs with intent (which must never be listed), is checked against the query's own rows. The
    # check used to skip those Runs and test the candidacy predicate instead of the query.
    from .system import frontier_candidate_rows  # the check reads the query itself

    listed = {row["runId"] for _, row in frontier_candidate_rows(view.state)}
    out = []
    for rv in view.runs:
        r = rv.run
        writes = False
        if r["status"] == "running" and not rv.intent and rv.plan is not None:
            now = max([rv.state.clock, *(s["updatedAtMs"] for s in rv.steps)])
            try:
                res = resolve_frontier({"plan": rv.plan, "run": r, "stepRuns": rv.steps, "observedAtMs": now})
            except QlwfError as e:
                out.append(f"Run {r['id']}: frontier resolution fails: {e.message}")
                continue
            writes = bool(res["stepMutations"]) or res["terminalTransition"] is not None
        candidate = r["id"] in listed
        if candidate != writes:
            out.append(f"Run {r['id']}: candidate={candidate} but running without intent and advance would "
                       f"write={writes}")
    return out


@invariant("INV-29", "Task candidate exactness", "ADR-0226 §4 (ready projection is not a claim)")
def inv29(view: SystemView) -> list[str]:
    from .system import apply, task_candidate_rows  # the check drives the command itself

    s = view.state
    epochs = {(r["runId"], r["stepRunId"], r["stepRunVersion"]) for r in s.receipts.values()}
    listed = {row["stepRunId"] for _, row in task_candidate_rows(s)}
    out = []
    for x in s.step_runs.values():
        r = s.runs[x["runId"]]
        want = (r["status"] == "running" and "cancelRequestedAtMs" not in r and x["status"] == "ready"
                and x["attemptCount"] < T.MAX_STEP_RUN_ATTEMPTS and (x["runId"], x["id"], x["version"]) not in epochs)
        if want != (x["id"] in listed):
            out.append(f"StepRun {x['id']}: candidate listing {x['id'] in listed} but predicate {want}")
        if want:
            adm = s.admission_of_run(x["runId"])[0]
            step = next(p for p in adm["plan"]["steps"] if p["stepRunId"] == x["id"])
            binding = consistent_binding(adm["plan"], step)
            now = max(s.clock, *(e["createdAtMs"] for e in s.events_of(x["runId"])))
            try:
                res = apply(s.with_clock(now), {"name": "admit_task_attempt", "args": {
                    "runId": x["runId"], "stepRunId": x["id"], "binding": binding}})
            except Exception as e:
                out.append(f"admitting candidate StepRun {x['id']} crashes: {type(e).__name__}: {e}")
                continue
            exhausted = res.error is not None and res.error.reason == "attempt_numbers_exhausted"
            if not exhausted and (res.error is not None or res.result is None or res.result["status"] != "created"):
                out.append(f"candidate StepRun {x['id']} is not admissible: {res.error}")
    return out


def consistent_binding(plan: Record, step: Record, executor_type: str = "remote_worker") -> Record:
    """A binding that agrees with the plan step (records.md §6.10); digests derive from the step."""
    digest = step["taskDefinitionDigest"]
    return {"resourceTaskId": step["taskId"], "taskReconciliationReceiptDigest": digest,
            "taskId": f"pkg:{plan['target']['packageName']}:{step['taskId']}", "taskRevision": f"qltd:v1:1:{digest}",
            "taskDefinitionDigest": digest, "executorType": executor_type, "executionDigest": digest}


def _expected_step_codes(rv: RunView, s: Record) -> tuple[str | None, str | None] | None:
    """The §8 row for the path that terminalized StepRun s, or None when the path is unknown."""
    mid = s["lastMutationId"]
    if mid.startswith("workflow-frontier:"):
        return T.FRONTIER_SKIP_RESULT_CODE, None
    if mid.startswith("wcm:"):
        timeout = bool(rv.run.get("cancelReason") == "timeout")
        ledger = rv.ledger_of_step(s["id"])
        prev = ledger[-2]["stepRun"]["status"] if len(ledger) > 1 else None
        d = T.CANCEL_STEP_TABLE.get((prev, timeout)) if prev is not None else None
        return (d.result_code, d.error_summary) if d and d.action == "mutate" else None
    if mid.startswith("wrf:"):
        c = T.RECOVERY_PATH_CODES["execution_not_running"]
        return c.step_result_code, c.step_error_summary
    if mid.startswith("wxm:"):
        owner = [a for a in rv.attempts_of_step(s["id"]) if a["status"] == s["status"]]
        if not owner:
            return None
        command = "complete_attempt" if "startedAtMs" in owner[-1] else "fail_start"
        wc = T.WORKER_PATH_CODES.get((command, s["status"]))
        return (wc.step_result_code, wc.step_error_summary) if wc else None
    return None


def _expected_attempt_codes(rv: RunView, a: Record) -> tuple[str | None, str | None] | None:
    e = rv.terminal_attempt_event(a["id"])
    if e is None:
        return None
    if e["id"].startswith("wca:"):
        t = T.CANCEL_REASON_TARGET[rv.run["cancelReason"]]
        return t.error_code, t.error_summary
    if e["id"].startswith("wra:"):
        c = T.RECOVERY_PATH_CODES[e["payload"]["reason"]]
        return c.attempt_error_code, c.attempt_error_summary
    command = "complete_attempt" if "startedAtMs" in a else "fail_start"
    wc = T.WORKER_PATH_CODES.get((command, a["status"]))
    return (wc.attempt_error_code, wc.attempt_error_summary) if wc else None


@invariant("INV-30", "Codes by path", "D-11; ADR-0226 §3; ADR-0228 §3")
@per_run
def inv30(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        if s["status"] in T.TERMINAL_STEP:
            want = (None, None) if s["status"] == "succeeded" else _expected_step_codes(rv, s)
            if want != (s["resultCode"], s["errorSummary"]):
                out.append(f"StepRun {s['id']} {s['status']} carries {s['resultCode']!r}/{s['errorSummary']!r}, "
                           f"path expects {want}")
    for a in rv.attempts:
        if a["status"] in T.TERMINAL_ATTEMPT:
            want = _expected_attempt_codes(rv, a)
            if want != (a.get("errorCode"), a.get("errorSummary")):
                out.append(f"attempt {a['id']} {a['status']} carries {a.get('errorCode')!r}, path expects {want}")
    return out


@invariant("INV-31", "Task timeout requests at most once per attempt", "S-5; D-3")
@per_run
def inv31(rv: RunView) -> list[str]:
    out = []
    requests = Counter(e.get("attemptId") for e in rv.events if e["type"] == "workflow.task_timeout_requested")
    for aid, n in requests.items():
        a = rv.state.attempts.get(aid or "")
        e = next(e for e in rv.events if e["type"] == "workflow.task_timeout_requested" and e.get("attemptId") == aid)
        if n > 1:
            out.append(f"attempt {aid} has {n} timeout requests")
        if a is None or a.get("deadlineAtMs") is None or a["deadlineAtMs"] > e["createdAtMs"]:
            out.append(f"timeout request for {aid} before its deadline")
        if rv.cancel_event is not None and rv.cancel_event["sequence"] < e["sequence"]:
            out.append(f"timeout request for {aid} written under intent")
    return out


INVARIANTS: dict[str, tuple[str, str, Check]] = {inv: (name, clause, fn) for inv, name, clause, fn in REGISTRY}


def check_invariants(state: State, only: tuple[str, ...] | None = None) -> list[Violation]:
    """Evaluate every INV-n (or `only` those) on `state`; [] means all hold."""
    view = SystemView(state)
    out: list[Violation] = []
    for inv, (name, clause, fn) in INVARIANTS.items():
        if only is not None and inv not in only:
            continue
        out += [Violation(inv, name, clause, m) for m in fn(view)]
    return out
