"""Step-by-step conformance: every trace step applied to the model and to a backend, compared after each.

After every step the harness compares (commands.md §1.3) the outcome (result key for key, or the
error's class, code and reason), the read-back snapshot record by record, and evaluates the
model's invariants on the backend's snapshot. A port that tracks its writes (impl/port.py
ChangeTracking) is read back and compared only for the kinds the step wrote (by the port's own
account or the model's); every FULL_EVERY-th step, the last one and every step with recorded
expectations read and compare the whole store, which proves those accounts complete. Invariants
are re-evaluated whenever the compared state or the clock changed; on the very same snapshot at
the same clock the previous (clean) evaluation stands, and a read-back that equals the model's
state exactly (record order, key order and JSON types) has no violation the model's state lacks,
so its verdict needs no evaluation (decisions Q-60). A recorded trace is also checked against its own
expectations (the model must still produce them). The first divergence stops the run and is
reported with the step, both outcomes, a record-level snapshot diff and the model rules that fired.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import orjson
from qlwf.conformance.generate import boundaries
from qlwf.conformance.generate.surface import FULL, Surface
from qlwf.conformance.lockstep.coverage import Coverage
from qlwf.conformance.lockstep.state_diff import RecordDiff, snapshot_diff
from qlwf.conformance.report.paths import first_difference_path
from qlwf.conformance.report.render import show_command
from qlwf.conformance.traces.format import ModelStep, Trace, expectations, first_difference, model_step
from qlwf.impl.port import ChangeTracking, CommandPort, FaultInjection, Snapshot
from qlwf.model.canonical import canonical_json
from qlwf.model.errors import QlwfError
from qlwf.model.state import TABLES, State

Record = dict[str, Any]
InvariantCheck = Callable[[State], list[Any]]


FULL_EVERY = 16  # a whole-store comparison at least every this many steps (ports that track their writes)

# The State field behind each snapshot kind (State's table fields are in TABLES order).
_KIND_FIELDS = tuple(zip(TABLES, [f.name for f in dataclasses.fields(State) if f.name != "clock"], strict=True))


def written_by_model(before: State, after: State) -> frozenset[str]:
    """The kinds whose table a model step replaced: States are copy-on-write, so an untouched table is
    the very same object."""
    return frozenset(kind for kind, name in _KIND_FIELDS if getattr(before, name) is not getattr(after, name))


def _exact_text(records: Any) -> bytes | None:
    """A text that tells apart any two record lists `==` calls equal but a JSON reader would not:
    orjson keeps key order and writes true, 1, 1.0 and -0.0 apart. None when it cannot write them
    (an integer beyond 64 bits, a lone surrogate): such a kind is then never taken as exact."""
    try:
        return orjson.dumps(records)
    except TypeError:  # orjson.JSONEncodeError
        return None


class ExactKinds:
    """Which kinds of the backend's latest read-back are known to equal the model's exactly: same
    records, key order and JSON types, not only `==` (which takes True for 1 and 1.0 for 1).

    A kind is observed whenever it is compared (read afresh); a kind not read afresh is the previous
    read, which the model did not write either, so its status carries over. When every kind is
    exact, the invariants see the very same values on both sides, so the backend has no violation
    that the model's state lacks (decisions Q-60).

    Comparisons go record by record, and a (model record, backend record) pair found exactly equal
    is remembered by identity for the rest of the trace: model records are never changed in place
    (States are copy-on-write) and neither are read-back records (shared between snapshots), so the
    same two objects compare the same way again. The model and the reader hand back unchanged
    records as the same objects, so a step compares and encodes only the records it changed. This
    is exactly the comparison of whole kinds (decisions Q-64): two lists are `==` iff they have the
    same length and their items are pairwise `==`, and their orjson texts are equal iff the items'
    texts are (each item is written as `[item]`, at the depth it has inside the kind's list)."""

    def __init__(self) -> None:
        self.inexact: set[str] = set(TABLES)
        self._pairs: dict[tuple[int, int], tuple[Any, Any]] = {}  # holds both objects: their ids stay theirs

    def compare(self, kinds: Iterable[str], model: Snapshot, backend: Snapshot) -> bool:
        """Whether every kind of `kinds` is `==` on both sides; if so, each is observed as exact or not."""
        exact: dict[str, bool] = {}
        for kind in kinds:
            equal, exact[kind] = self._kind(model[kind], backend[kind])
            if not equal:
                return False
        for kind, same in exact.items():
            if same:
                self.inexact.discard(kind)
            else:
                self.inexact.add(kind)
        return True

    def _kind(self, mine: Any, theirs: Any) -> tuple[bool, bool]:
        """(`mine == theirs`, and exactly so)."""
        if type(mine) is not list or type(theirs) is not list:
            if mine != theirs:
                return False, False
            text = _exact_text(mine)
            return True, text is not None and text == _exact_text(theirs)
        if len(mine) != len(theirs):
            return False, False
        pairs, exact = self._pairs, True
        for m, b in zip(mine, theirs, strict=True):
            key = (id(m), id(b))
            if key in pairs:
                continue
            if not (m is b or m == b):  # what list equality asks of each pair of items
                return False, False
            if exact:
                text = _exact_text([m])
                if text is not None and text == _exact_text([b]):
                    pairs[key] = (m, b)
                else:
                    exact = False
        return True, exact

    def all_exact(self) -> bool:
        return not self.inexact


class ReadBack:
    """The backend's snapshot after each step: read whole, or only the kinds the step wrote (the rest
    is the previous read, which the previous step compared)."""

    def __init__(self, port: CommandPort, full_every: int) -> None:
        self.port = port
        self.tracking = port if full_every > 1 and isinstance(port, ChangeTracking) else None
        self.full_every = full_every
        self.previous: Snapshot | None = None
        self.since_full = 0

    def read(self, model_wrote: frozenset[str], full: bool) -> tuple[Snapshot, frozenset[str] | None]:
        """The snapshot and the kinds read afresh (None: the whole store was read)."""
        if self.tracking is None:
            return self.port.snapshot(), None
        wrote = self.tracking.written_kinds() | model_wrote
        fresh: frozenset[str] | None = None
        if full or self.previous is None or self.since_full + 1 >= self.full_every:
            snap, self.since_full = self.port.snapshot(), 0
        else:
            part = self.tracking.snapshot_kinds(wrote) if wrote else {}
            snap = {kind: part[kind] if kind in wrote else records for kind, records in self.previous.items()}
            fresh, self.since_full = wrote, self.since_full + 1
        self.previous = snap
        return snap, fresh

    def whole(self, snap: Snapshot, fresh: frozenset[str] | None) -> Snapshot:
        """The whole store for a divergence report, exactly as a full read at this step shows it."""
        return snap if fresh is None else self.port.snapshot()


def load_invariant_check() -> InvariantCheck | None:
    """`qlwf.model.invariants.check_invariants` when that module exists, else None (skipped)."""
    try:
        module = importlib.import_module("qlwf.model.invariants")
    except ImportError:
        return None
    check = getattr(module, "check_invariants", None)
    return check if callable(check) else None


@dataclass
class Divergence:
    """The first step where the backend (or the recorded trace) disagrees with the model."""

    trace: str
    step_index: int
    step: Record
    kind: str  # outcome | state | invariant | expectation | backend_crash | fault_injection | driver
    message: str
    model_outcome: Record | None = None
    backend_outcome: Record | None = None
    record_diffs: list[RecordDiff] = field(default_factory=list)
    rules: tuple[str, ...] = ()
    violations: list[str] = field(default_factory=list)
    source: Trace | None = field(default=None, repr=False, compare=False)  # the diverging trace, to save it
    trace_file: str | None = None  # where the runner saved it (printed with the `qlwf show` command)
    compared: str = FULL.describe()  # what the comparison covered (the driver's declared surface)

    @property
    def outcome_difference(self) -> tuple[str, Any, Any] | None:
        """The first path where the two outcomes differ, with both values, for an outcome divergence."""
        if self.kind != "outcome":
            return None
        return first_difference_path(self.model_outcome, self.backend_outcome)

    @property
    def cause(self) -> str:
        """command × first differing field or error kind: the key of the run's per-cause tally."""
        s = self.step
        what = s["name"] if s["op"] == "command" else s["op"]
        found = self.outcome_difference
        if found is not None:
            path = found[0]
            if path in ("", "error", "ok") or path.startswith("error."):
                return f"{what} × {_error_kind(self.model_outcome)} vs {_error_kind(self.backend_outcome)}"
            return f"{what} × {path}"
        if self.kind == "state" and self.record_diffs:
            d = self.record_diffs[0]
            return f"{what} × state {d.kind}.{d.fields[0].path if d.fields else d.status}"
        return f"{what} × {self.kind}"

    def render(self) -> str:
        s = self.step
        what = (f"{s['name']}({json.dumps(s.get('args'), sort_keys=False)})" if s["op"] == "command"
                else json.dumps({k: v for k, v in s.items() if k in ("op", "deltaMs", "kind", "key", "patch")}))
        if "probe" in s:
            what += f"  [probe {s['probe']}]"
        lines = [f"DIVERGENCE in trace {self.trace!r} at step {self.step_index}: {self.kind}",
                 f"  step:            {what}", "  why:             " + self.message.replace("\n", "\n" + " " * 19)]
        lines.append(f"  compared:        {self.compared}")
        if self.model_outcome is not None or self.backend_outcome is not None:
            lines.append(f"  model outcome:   {_compact(self.model_outcome)}")
            lines.append(f"  backend outcome: {_compact(self.backend_outcome)}")
        found = self.outcome_difference
        if found is not None:  # in full, never clipped: the field a reviewer has to see
            path, model, backend = found
            lines.append(f"  differs at:      {path or '(the outcome)'}")
            lines.append(f"    model:         {json.dumps(model, ensure_ascii=False)}")
            lines.append(f"    backend:       {json.dumps(backend, ensure_ascii=False)}")
        if self.rules:
            lines.append(f"  model rules:     {', '.join(self.rules)}")
        if self.record_diffs:
            lines.append(f"  snapshot diff ({len(self.record_diffs)} record(s)):")
            lines += ["    " + d.render().replace("\n", "\n    ") for d in self.record_diffs[:40]]
        if self.violations:
            lines.append("  invariant violations on the backend snapshot:")
            lines += [f"    {v}" for v in self.violations[:20]]
        if self.trace_file:
            lines.append(f"  trace:           {self.trace_file}")
            lines.append(f"  render it:       {show_command(self.trace_file, self.step_index)}")
        return "\n".join(lines)

    def to_json(self) -> Record:
        return {"trace": self.trace, "stepIndex": self.step_index, "step": self.step, "kind": self.kind,
                "message": self.message, "modelOutcome": self.model_outcome, "backendOutcome": self.backend_outcome,
                "recordDiffs": [d.to_json() for d in self.record_diffs], "rules": list(self.rules),
                "violations": self.violations, "traceFile": self.trace_file, "compared": self.compared,
                "cause": self.cause}


def _error_kind(outcome: Record | None) -> str:
    """`ok`, or an error as class/code/reason (what the driver reported of it)."""
    if not isinstance(outcome, dict) or "error" not in outcome:
        return "ok"
    e = outcome["error"]
    return "/".join(str(e[k]) for k in ("class", "code", "reason") if e.get(k))


def _compact(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class LockstepResult:
    trace: str
    steps: int = 0  # steps executed (including the diverging one)
    divergence: Divergence | None = None
    model_seconds: float = 0.0  # the model's apply
    backend_seconds: float = 0.0  # the backend's commands (and fault injections)
    snapshot_seconds: float = 0.0  # reading the backend's store back
    check_seconds: float = 0.0  # model snapshot, comparisons, invariants, expectations
    invariant_checks: int = 0  # steps given an invariant verdict on the backend's snapshot (gate evidence)
    invariant_evaluations: int = 0  # of them, evaluated in full (the rest decided by exact equality, Q-60)

    @property
    def passed(self) -> bool:
        return self.divergence is None


def backend_outcome(port: CommandPort, name: str, args: Any, now: int, step: Record | None = None) -> Record:
    try:
        if step is not None and "evidence" in step:
            port.seed_evidence(step["evidence"])
        return {"ok": port.execute(name, args, now=now)}
    except QlwfError as e:
        return {"error": e.to_json()}


def run_lockstep(trace: Trace, port: CommandPort, *, invariants: InvariantCheck | None = None,
                 invariants_every_step: bool = True, check_expectations: bool = True,
                 coverage: Coverage | None = None, full_every: int = FULL_EVERY,
                 cross_check: bool = False, surface: Surface = FULL) -> LockstepResult:
    """Apply `trace` to a fresh model and to `port` (an empty store); stop at the first divergence.

    `invariants` is evaluated on the backend's read-back snapshot after every step, or only after
    the last one when `invariants_every_step` is False. A step whose read-back equals the model's
    state exactly (ExactKinds) has no violation the model's state lacks, so its verdict is known
    without evaluating (decisions Q-60), except at the last step, which is always evaluated;
    `cross_check` evaluates the steps the shortcut would decide too; a disagreement is a divergence.
    `full_every` = 1 reads and compares the whole store after every step whatever the port offers.
    Outcomes are compared as far as `surface` declares (`Surface.view`: result keys, error detail).
    """
    result = LockstepResult(trace.name or trace.description)
    # A generated trace brings its generator's model run: from the same initial State object every
    # step's result is taken from it (the model is pure, decisions Q-74); any other trace runs the model.
    known = trace.model_run
    state = known.initial if known is not None else State(clock=trace.initial_clock)
    # a port behind a process boundary may send the next step ahead, to run it while this one is checked:
    # behind a command, as soon as the command's answer has arrived (queue_next), else once it is read
    prefetch = getattr(port, "prefetch", None)
    queue_next = getattr(port, "queue_next", None)
    readback = ReadBack(port, full_every)
    clean_at: int | None = None  # the clock of the last clean invariant evaluation, while nothing changed since
    reuse = _record_check_reuse()
    exact = ExactKinds()
    for i, step in enumerate(trace.steps):
        result.steps = i + 1
        last = i == len(trace.steps) - 1
        recorded = check_expectations and "clock" in step

        def diverge(kind: str, message: str, **extra: Any) -> LockstepResult:
            result.divergence = Divergence(result.trace, i, step, kind, message,  # noqa: B023
                                           source=trace, compared=surface.describe(), **extra)
            return result

        t0 = time.perf_counter()
        done = (known.known(i, state, step) if known is not None else None) or model_step(state, step)
        t1 = time.perf_counter()
        got: Record | None = None
        try:
            if step["op"] == "command":
                if queue_next is not None and i + 1 < len(trace.steps):
                    queue_next(trace.steps[i + 1], done.state.clock)
                got = backend_outcome(port, step["name"], step["args"], done.state.clock, step)
            elif step["op"] == "corrupt":
                if not isinstance(port, FaultInjection):
                    return diverge("fault_injection", f"{type(port).__name__} cannot inject drift")
                port.corrupt(step["kind"], step["key"], step["patch"])
            t_read = time.perf_counter()
            backend_snapshot, fresh = readback.read(written_by_model(state, done.state), last or recorded)
        except Exception as e:  # a backend crash is a divergence, not a harness failure
            # an exec driver's protocol breach says so itself (conformance/exec/process.py)
            kind = getattr(e, "divergence_kind", "backend_crash")
            message = str(e) if kind != "backend_crash" else f"{type(e).__name__}: {e}"
            return diverge(kind, message, model_outcome=done.outcome, rules=done.rules)
        t2 = time.perf_counter()
        if prefetch is not None and i + 1 < len(trace.steps):
            prefetch(trace.steps[i + 1], done.state.clock)  # a command runs at the clock this step ends at
        result.model_seconds += t1 - t0
        result.backend_seconds += t_read - t1
        result.snapshot_seconds += t2 - t_read
        model_snapshot = done.state.snapshot()
        if done.outcome is not None and got is not None:
            if coverage is not None:
                coverage.observe(step["name"], got, done.rules)
            if surface is not FULL:  # only what the driver declared it returns
                mine, theirs = surface.view(step["name"], done.outcome), surface.view(step["name"], got)
            else:
                mine, theirs = done.outcome, got
            if canonical_json(mine) != canonical_json(theirs):
                why = "the backend's outcome differs from the model's"
                if "probe" in step:
                    why += (f" (a {step['probe']} probe: the binding is not the one the step's evidence derives, "
                            "and a store that derives the binding refuses it)")
                return diverge("outcome", why, model_outcome=mine,
                               backend_outcome=theirs, rules=done.rules,
                               record_diffs=snapshot_diff(model_snapshot, readback.whole(backend_snapshot, fresh)))
        if fresh is None:  # the whole store: `model_snapshot != backend_snapshot`, kind by kind
            differs = (model_snapshot.keys() != backend_snapshot.keys()
                       or not exact.compare(model_snapshot, model_snapshot, backend_snapshot))
        else:
            differs = not exact.compare(fresh, model_snapshot, backend_snapshot)
        if not differs:
            # what `==` cannot tell (True and 1, 1 and 1.0, -0.0 and 0.0) the canonical text does
            differs = (last or recorded) and not exact.all_exact() and (
                canonical_json(model_snapshot) != canonical_json(backend_snapshot))
        if differs:
            return diverge("state", "the backend's durable state differs from the model's",
                           model_outcome=done.outcome, backend_outcome=got, rules=done.rules,
                           record_diffs=snapshot_diff(model_snapshot, readback.whole(backend_snapshot, fresh)))
        if invariants is not None and (invariants_every_step or last):
            # the same snapshot objects (nothing written, nothing re-read) at the same clock: same verdict
            unchanged = fresh is not None and not fresh and clean_at == done.state.clock
            # the last step is always evaluated: every trace's evidence includes a full evaluation,
            # which also cross-checks the shortcut once per trace
            decided = unchanged or (exact.all_exact() and not cross_check and not last)
            with reuse():
                violations = [] if decided else _backend_only_violations(invariants, backend_snapshot, done.state)
            if exact.all_exact() and violations:
                return diverge("invariant_shortcut", "the read-back equals the model's state exactly, yet the "
                               "backend has invariant violations the model's state lacks (decisions Q-60)",
                               model_outcome=done.outcome, backend_outcome=got, rules=done.rules,
                               violations=violations)
            clean_at = None if violations else done.state.clock
            result.invariant_checks += 1
            result.invariant_evaluations += not decided
            if violations:
                return diverge("invariant", f"{len(violations)} invariant(s) fail on the backend snapshot",
                               model_outcome=done.outcome, backend_outcome=got, rules=done.rules,
                               violations=violations)
        if recorded:
            problem = _expectation_problem(step, done, state.snapshot(), model_snapshot, trace.state_form)
            if problem:
                return diverge("expectation", f"the model no longer produces the recorded step: {problem}",
                               model_outcome=done.outcome, backend_outcome=step.get("outcome"), rules=done.rules)
        if coverage is not None and done.outcome is not None:  # only steps both sides agreed on
            coverage.boundaries.update(boundaries.met(state, step, done.outcome, done.state))
        result.check_seconds += time.perf_counter() - t2
        state = done.state
    return result


def _record_check_reuse() -> Callable[[], AbstractContextManager[None]]:
    """A scope, entered around each invariant evaluation of one trace, in which the invariants reuse
    their per-record parts for records seen before (the read-back of a kind a step did not write,
    and the model's own records, are the same objects); a plain scope if the module lacks it."""
    module = sys.modules.get("qlwf.model.invariants")
    scope = getattr(module, "reusing_record_checks", None)
    if scope is None:
        return contextlib.nullcontext
    memo: dict[Any, Any] = {}
    return lambda: scope(memo=memo)


def _backend_only_violations(check: InvariantCheck, snapshot: dict[str, list[Record]], model: State) -> list[str]:
    """Invariant violations of the backend's read-back state that the model's own state does not have.

    Without injected drift the model state satisfies every invariant, so this is every violation;
    after a `corrupt` step both stores are deliberately invalid in the same way and only a
    difference counts.
    """
    found = [str(v) for v in check(State.from_snapshot(snapshot, model.clock))]
    if not found:
        return []
    expected = {str(v) for v in check(model)}
    return [v for v in found if v not in expected]


def _expectation_problem(step: Record, done: ModelStep, before: dict[str, list[Record]],
                         after: dict[str, list[Record]], state_form: str) -> str | None:
    """Every recorded expectation (time, outcome, rules, digest and each explicit record) against the model."""
    found = first_difference(step, expectations(done, before, after, state_form))
    if found is None:
        return None
    key, recorded, model = found
    if key == "state" and isinstance(recorded, dict) and recorded.get("digest") != model["digest"]:
        return f"state digest {model['digest'][:16]}… != recorded {str(recorded.get('digest'))[:16]}…"
    if key == "state":
        return f"the recorded {state_form} differ from the model's (same digest: the records were edited)"
    return f"{key} {_compact(model, 120)} != recorded {_compact(recorded, 120)}"
