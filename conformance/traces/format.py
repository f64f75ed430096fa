"""The versioned trace format (commands.md §1.2) and recording through the model.

A trace file is one JSON object:

    {"format": "qlwf-trace", "version": 1, "description": "...", "initialClock": 1000,
     "steps": [
       {"op": "advance_time", "deltaMs": 5000},
       {"op": "command", "name": "advance_frontier", "args": {"runId": "run-1"}},
       {"op": "corrupt", "kind": "stepRuns", "key": ["run-1:a"], "patch": {"resultCode": "x"}}
     ]}

Version 2 adds `evidence` to `admit_task_attempt` command steps: the ql3 records the step's binding
derives from ({"taskReconciliation": receipt, "execution": revision}, task-attempts.md §3A), or null
where the binding is deliberately not derivable. A content-addressed store seeds its rows from it;
`qlwf traces check` holds binding = derived(evidence). Version 1 files are still read.

Such a step may also be a probe of a store that derives the binding (a surface with
`admissionEvidence`, conformance/generate/surface.py): `"probe": "foreign-binding"` marks a binding
that deliberately differs from the one its (real) evidence derives. The model side then expects
what such a store answers, the §3A refusal (model/evidence.py `foreign_binding_refusal`), instead of
running the command; a store that takes the binding as given cannot run it (not applicable).

`corrupt` is a fault-injection step (drift traces): the backend overwrites one stored record
behind the commands' back and the model mirrors it (conformance/traces/drift_mirror.py). Once recorded, every
step also carries what the model did: `clock` (the harness clock after the step), `outcome`
(commands only: {"ok": result} or {"error": {class, code, reason}}), `rules` (the model rule-table
rows that fired) and `state` = {"digest": sha256 of the canonical snapshot, "changes": the records
the step added or changed, each {"kind", "key", "record"}}.

A recorded trace is self-contained (docs/traces.md, schema conformance/exec/schema/trace.json,
decisions Q-20): it also carries `stateForm` ("changes": each step's `state.changes` is the diff
against the previous state, a removed record being `record: null`; "snapshot": each step's
`state.snapshot` is the whole durable state), `recordKeys` (the key fields of every record kind)
and `initialState` (the empty store), and every step its absolute time `atMs`. Recorded traces
written before these keys existed still load: their form is "changes" and their steps lack `atMs`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qlwf.conformance.traces.drift_mirror import corrupt_state
from qlwf.model import strict_json
from qlwf.model.canonical import canonical_json
from qlwf.model.evidence import foreign_binding_refusal
from qlwf.model.records import KIND_KEYS  # the key of every record kind (commands.md §1.3)
from qlwf.model.state import State
from qlwf.model.system import COMMANDS, Outcome, advance_time, apply

TRACE_FORMAT = "qlwf-trace"
TRACE_VERSION = 2
READ_VERSIONS = (1, 2)  # version 1: no `evidence` on admit_task_attempt steps
EVIDENCE_COMMAND = "admit_task_attempt"  # the one command whose steps carry ql3 evidence
FOREIGN_BINDING = "foreign-binding"  # the probe: a binding its step's evidence does not derive
PROBES = (FOREIGN_BINDING,)
STEP_OPS = ("advance_time", "command", "corrupt")
# Everything the model derives from a step's inputs; `atMs` is derived too (initialClock plus the
# advances so far), so a hand-edited time is caught like any other expectation.
EXPECTATION_KEYS = ("atMs", "clock", "outcome", "rules", "state")
STATE_FORMS = ("changes", "snapshot")

Record = dict[str, Any]
Snapshot = dict[str, list[Record]]

class TraceFormatError(ValueError):
    """A trace file that is not a qlwf trace of a known version."""


@dataclass
class Trace:
    description: str
    initial_clock: int
    steps: list[Record] = field(default_factory=list)
    name: str = ""
    state_form: str = "changes"  # how recorded steps carry the state after them (STATE_FORMS)
    # What the model did on every step, kept by the generator that already ran it (never saved or pickled)
    model_run: ModelRun | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "model_run"} | {"model_run": None}

    @property
    def recorded(self) -> bool:
        return bool(self.steps) and all("clock" in s for s in self.steps)

    @property
    def command_count(self) -> int:
        return sum(1 for s in self.steps if s["op"] == "command")

    def to_json(self) -> Record:
        head: Record = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "description": self.description,
                        "initialClock": self.initial_clock}
        if self.recorded:  # the self-contained header: what a replayer needs besides the steps
            head |= {"stateForm": self.state_form, "recordKeys": {k: list(v) for k, v in KIND_KEYS.items()},
                     "initialState": empty_snapshot()}
        return head | {"steps": self.steps}

    def inputs(self) -> Trace:
        """The same trace with every recorded expectation stripped."""
        return Trace(self.description, self.initial_clock,
                     [{k: v for k, v in s.items() if k not in EXPECTATION_KEYS} for s in self.steps], self.name,
                     self.state_form)


_NO_EVIDENCE: Any = object()


def command(name: str, args: Any, evidence: Any = _NO_EVIDENCE, *, probe: str | None = None) -> Record:
    """A command step; `evidence` ({"taskReconciliation", "execution"} or None) and `probe` (PROBES) only
    for admit_task_attempt."""
    step: Record = {"op": "command", "name": name, "args": args}
    if evidence is not _NO_EVIDENCE:
        step["evidence"] = evidence
    if probe is not None:
        step["probe"] = probe
    return step


def advance(delta_ms: int) -> Record:
    return {"op": "advance_time", "deltaMs": delta_ms}


def corruption(kind: str, key: list[Any], patch: Record) -> Record:
    return {"op": "corrupt", "kind": kind, "key": key, "patch": patch}


def validate_step(step: Any, index: int, version: int = TRACE_VERSION) -> None:
    if not isinstance(step, dict) or step.get("op") not in STEP_OPS:
        raise TraceFormatError(f"step {index}: op must be one of {STEP_OPS}")
    op = step["op"]
    required = {"advance_time": ("deltaMs",), "command": ("name", "args"), "corrupt": ("kind", "key", "patch")}[op]
    missing = [k for k in required if k not in step]
    if missing:
        raise TraceFormatError(f"step {index} ({op}): missing {missing}")
    evidence_step = version >= 2 and op == "command" and step.get("name") == EVIDENCE_COMMAND
    optional = {"evidence", "probe"} if evidence_step else set()
    extra = sorted(set(step) - {"op", *required, *optional, *EXPECTATION_KEYS})
    if extra:
        raise TraceFormatError(f"step {index} ({op}): unexpected keys {extra}")
    if op == "command" and (type(step["name"]) is not str or step["name"] not in COMMANDS):
        raise TraceFormatError(f"step {index}: {step['name']!r} is not a command (commands.md: {', '.join(COMMANDS)})")
    if op == "advance_time" and (type(step["deltaMs"]) is not int or step["deltaMs"] < 0):
        raise TraceFormatError(f"step {index}: deltaMs must be an int >= 0")
    if "atMs" in step and (type(step["atMs"]) is not int or step["atMs"] < 0):
        raise TraceFormatError(f"step {index}: atMs must be an int >= 0")
    evidence = step.get("evidence")
    if evidence is not None and not (isinstance(evidence, dict) and set(evidence) == {"taskReconciliation", "execution"}
                                     and all(isinstance(v, dict) for v in evidence.values())):
        raise TraceFormatError(f"step {index}: evidence must be null or {{taskReconciliation, execution}} objects")
    if "probe" in step and (step["probe"] not in PROBES or evidence is None):
        raise TraceFormatError(f"step {index}: probe must be one of {list(PROBES)}, on a step with evidence")


def from_json(obj: Any, name: str = "") -> Trace:
    if not isinstance(obj, dict) or obj.get("format") != TRACE_FORMAT:
        raise TraceFormatError(f"not a {TRACE_FORMAT} document")
    version = obj.get("version")
    if type(version) is not int or version not in READ_VERSIONS:
        raise TraceFormatError(f"unsupported trace version {version!r} (this harness reads "
                               f"{', '.join(map(str, READ_VERSIONS))})")
    clock = obj.get("initialClock")
    if type(clock) is not int or clock < 0 or not isinstance(obj.get("steps"), list):
        raise TraceFormatError("initialClock must be an int >= 0 and steps a list")
    for i, step in enumerate(obj["steps"]):
        validate_step(step, i, version)
    form = obj.get("stateForm", "changes")
    if form not in STATE_FORMS:
        raise TraceFormatError(f"stateForm must be one of {STATE_FORMS}, got {form!r}")
    # The harness starts every trace from the empty store (commands.md §1.1) and knows one key set.
    if "initialState" in obj and obj["initialState"] != empty_snapshot():
        raise TraceFormatError("initialState must be the empty store (commands.md §1.1: no records)")
    if "recordKeys" in obj and obj["recordKeys"] != {k: list(v) for k, v in KIND_KEYS.items()}:
        raise TraceFormatError("recordKeys differ from the record keys of commands.md §1.3")
    return Trace(str(obj.get("description", "")), clock, list(obj["steps"]), name, form)


def read_json_file(path: str | Path) -> Any:
    """The JSON value of a trace file; TraceFormatError (one line) if it cannot be read or is not strict
    JSON (model/strict_json.py: no NaN or infinities, no name repeated in an object, no lone surrogate,
    no nesting deeper than the decoder's recursion limit)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TraceFormatError(f"unreadable: {e}") from e
    try:
        return strict_json.loads(text)
    except ValueError as e:
        raise TraceFormatError(f"not JSON: {e}") from e


def load(path: str | Path) -> Trace:
    return from_json(read_json_file(path), Path(path).stem)


def dumps(trace: Trace) -> str:
    """Stable text: one step per line, so corpus diffs stay readable."""
    head = {k: v for k, v in trace.to_json().items() if k != "steps"}
    lines = [json.dumps(s, ensure_ascii=False, separators=(",", ":")) for s in trace.steps]
    body = ",\n  ".join(lines)
    text = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1]
    return f'{text},"steps":[\n  {body}\n]}}\n'


def save(trace: Trace, path: str | Path) -> None:
    Path(path).write_text(dumps(trace), encoding="utf-8")


# ------------------------------------------------------------------------------------------------
# Snapshots, digests and changes
def empty_snapshot() -> Snapshot:
    return {kind: [] for kind in KIND_KEYS}


def snapshot_digest(snapshot: Snapshot) -> str:
    return hashlib.sha256(canonical_json(snapshot)).hexdigest()


def record_key(kind: str, record: Record) -> tuple[Any, ...]:
    return tuple(record.get(k) for k in KIND_KEYS[kind])


def index(snapshot: Snapshot) -> dict[str, dict[tuple[Any, ...], Record]]:
    return {kind: {record_key(kind, r): r for r in records} for kind, records in snapshot.items()}


def changes(before: Snapshot, after: Snapshot) -> list[Record]:
    """Records added, changed (record = the new one) or removed (record = null), in kind then key order."""
    old, new = index(before), index(after)
    out: list[Record] = []
    for kind in KIND_KEYS:
        o, n = old.get(kind, {}), new.get(kind, {})
        for key in sorted(set(o) | set(n), key=lambda k: tuple(str(x) for x in k)):
            if key not in n:
                out.append({"kind": kind, "key": list(key), "record": None})
            elif key not in o or (o[key] is not n[key] and canonical_json(o[key]) != canonical_json(n[key])):
                out.append({"kind": kind, "key": list(key), "record": n[key]})
    return out


def outcome_json(outcome: Outcome) -> Record:
    return {"ok": outcome.result} if outcome.error is None else {"error": outcome.error.to_json()}


# ------------------------------------------------------------------------------------------------
# Driving the model
@dataclass
class ModelStep:
    """What the model did on one step."""

    state: State
    outcome: Record | None  # None for harness steps
    rules: tuple[str, ...]
    raw: Outcome | None = field(default=None, compare=False, repr=False)  # the command's Outcome itself


def model_step(state: State, step: Record) -> ModelStep:
    op = step["op"]
    if op == "advance_time":
        return ModelStep(advance_time(state, step["deltaMs"]), None, ())
    if op == "corrupt":
        return ModelStep(corrupt_state(state, step["kind"], step["key"], step["patch"]), None, ())
    if step.get("probe") == FOREIGN_BINDING:
        return _foreign_binding(state, step)
    out = apply(state, {"name": step["name"], "args": step["args"]}, state.clock)
    return ModelStep(out.state, outcome_json(out), out.rules, out)


def plan_step_of(state: State, args: Any) -> tuple[Record, str] | None:
    """(the admitted plan, the stepKey) behind an admit_task_attempt's runId and stepRunId, when one
    admitted plan holds that StepRun: what evidence belongs to."""
    args = args if isinstance(args, dict) else {}
    run_id, step_run_id = args.get("runId"), args.get("stepRunId")
    admitted = state.admission_of_run(run_id) if isinstance(run_id, str) else []
    step_run = state.step_runs.get(step_run_id) if isinstance(step_run_id, str) else None
    if len(admitted) != 1 or step_run is None:
        return None
    return admitted[0]["plan"], step_run["stepKey"]


def _foreign_binding(state: State, step: Record) -> ModelStep:
    """A foreign-binding probe: what a store that derives the binding from the step's evidence answers.
    Not the command's semantics (which take the binding as given, D-1): the §3A refusal, nothing written,
    no rule fired. ValueError for a probe that probes nothing (its binding is the derived one)."""
    backed = plan_step_of(state, step["args"])
    if backed is None:
        raise ValueError("a foreign-binding probe on a step whose Run and StepRun no admitted plan backs")
    refusal = foreign_binding_refusal(*backed, step["args"].get("binding"), step.get("evidence"))
    if refusal is None:
        raise ValueError("a foreign-binding probe whose binding is the one its evidence derives")
    return ModelStep(state, {"error": refusal.to_json()}, (), Outcome(None, refusal, state, ()))


@dataclass(frozen=True)
class ModelRun:
    """`model_step` over a trace's steps from `initial`, as its generator ran them (decisions Q-74).

    The model is a pure function of its inputs, so a lockstep run that holds the very same pre-state
    object and step record may take the step's result instead of computing it again: `known(i, state)`
    answers only then, and None otherwise (any other State, another step list, a shorter run)."""

    initial: State
    steps: tuple[Record, ...]
    done: tuple[ModelStep, ...]

    def known(self, i: int, state: State, step: Record) -> ModelStep | None:
        if i >= len(self.done) or self.steps[i] is not step:
            return None
        before = self.done[i - 1].state if i else self.initial
        return self.done[i] if before is state else None


def expectations(done: ModelStep, before: Snapshot, after: Snapshot, state_form: str = "changes") -> Record:
    """The recorded expectation keys of one step, in file order, from what the model did."""
    out: Record = {"atMs": done.state.clock, "clock": done.state.clock}
    if done.outcome is not None:
        out["outcome"] = done.outcome
        out["rules"] = list(done.rules)
    body = changes(before, after) if state_form == "changes" else after
    out["state"] = {"digest": snapshot_digest(after), state_form: body}
    return out


def first_difference(recorded: Record, derived: Record) -> tuple[str, Any, Any] | None:
    """The first expectation key (and its two values) where a recorded step differs from `derived`.

    Keys the recorded step lacks are not compared: recorded traces older than `atMs` still pass."""
    for key, value in derived.items():
        if key in recorded and canonical_json(recorded[key]) != canonical_json(value):
            return key, recorded[key], value
    for key in sorted(set(recorded) & set(EXPECTATION_KEYS) - set(derived)):
        return key, recorded[key], None  # e.g. an outcome recorded on a harness step
    return None


def record(trace: Trace, state_form: str | None = None) -> Trace:
    """Run the trace's inputs through the model and attach every step's expectations."""
    form = state_form or trace.state_form
    if form not in STATE_FORMS:
        raise ValueError(f"state form must be one of {STATE_FORMS}, got {form!r}")
    state = State(clock=trace.initial_clock)
    before = state.snapshot()
    steps = []
    for step in trace.inputs().steps:
        done = model_step(state, step)
        after = done.state.snapshot()
        steps.append(dict(step) | expectations(done, before, after, form))
        state, before = done.state, after
    return Trace(trace.description, trace.initial_clock, steps, trace.name, form)
