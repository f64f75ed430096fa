"""The versioned trace format (commands.md §1.2) and recording through the model.

A trace file is one JSON object:

    {"format": "qlwf-trace", "version": 1, "description": "...", "initialClock": 1000,
     "steps": [
       {"op": "advance_time", "deltaMs": 5000},
       {"op": "command", "name": "advance_frontier", "args": {"runId": "run-1"}},
       {"op": "corrupt", "kind": "stepRuns", "key": ["run-1:a"], "patch": {"resultCode": "x"}}
     ]}

`corrupt` is a fault-injection step (drift traces): the backend overwrites one stored record
behind the commands' back and the model mirrors it (conformance/faults.py). Once recorded, every
step also carries what the model did: `clock` (the harness clock after the step), `outcome`
(commands only: {"ok": result} or {"error": {class, code, reason}}), `rules` (the model rule-table
rows that fired) and `state` = {"digest": sha256 of the canonical snapshot, "changes": the records
the step added or changed, each {"kind", "key", "record"}}.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qlwf.model.canonical import canonical_json
from qlwf.model.state import State
from qlwf.model.system import Outcome, advance_time, apply

from .faults import corrupt_state

TRACE_FORMAT = "qlwf-trace"
TRACE_VERSION = 1
STEP_OPS = ("advance_time", "command", "corrupt")
EXPECTATION_KEYS = ("clock", "outcome", "rules", "state")

Record = dict[str, Any]
Snapshot = dict[str, list[Record]]

# The key of every record kind (commands.md §1.3).
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "admissions": ("planDigest",),
    "admissionSteps": ("planDigest", "stepKey"),
    "runs": ("id",),
    "stepRuns": ("id",),
    "mutations": ("mutationId",),
    "events": ("runId", "sequence"),
    "attempts": ("id",),
    "taskReceipts": ("attemptId",),
    "leases": ("attemptId",),
}


class TraceFormatError(ValueError):
    """A trace file that is not a qlwf trace of a known version."""


@dataclass
class Trace:
    description: str
    initial_clock: int
    steps: list[Record] = field(default_factory=list)
    name: str = ""

    @property
    def recorded(self) -> bool:
        return bool(self.steps) and all("clock" in s for s in self.steps)

    @property
    def command_count(self) -> int:
        return sum(1 for s in self.steps if s["op"] == "command")

    def to_json(self) -> Record:
        return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "description": self.description,
                "initialClock": self.initial_clock, "steps": self.steps}

    def inputs(self) -> Trace:
        """The same trace with every recorded expectation stripped."""
        return Trace(self.description, self.initial_clock,
                     [{k: v for k, v in s.items() if k not in EXPECTATION_KEYS} for s in self.steps], self.name)


def command(name: str, args: Any) -> Record:
    return {"op": "command", "name": name, "args": args}


def advance(delta_ms: int) -> Record:
    return {"op": "advance_time", "deltaMs": delta_ms}


def corruption(kind: str, key: list[Any], patch: Record) -> Record:
    return {"op": "corrupt", "kind": kind, "key": key, "patch": patch}


def validate_step(step: Any, index: int) -> None:
    if not isinstance(step, dict) or step.get("op") not in STEP_OPS:
        raise TraceFormatError(f"step {index}: op must be one of {STEP_OPS}")
    op = step["op"]
    required = {"advance_time": ("deltaMs",), "command": ("name", "args"), "corrupt": ("kind", "key", "patch")}[op]
    missing = [k for k in required if k not in step]
    if missing:
        raise TraceFormatError(f"step {index} ({op}): missing {missing}")
    extra = sorted(set(step) - {"op", *required, *EXPECTATION_KEYS})
    if extra:
        raise TraceFormatError(f"step {index} ({op}): unexpected keys {extra}")
    if op == "advance_time" and (type(step["deltaMs"]) is not int or step["deltaMs"] < 0):
        raise TraceFormatError(f"step {index}: deltaMs must be an int >= 0")


def from_json(obj: Any, name: str = "") -> Trace:
    if not isinstance(obj, dict) or obj.get("format") != TRACE_FORMAT:
        raise TraceFormatError(f"not a {TRACE_FORMAT} document")
    if obj.get("version") != TRACE_VERSION:
        raise TraceFormatError(f"unsupported trace version {obj.get('version')!r} (this harness reads {TRACE_VERSION})")
    clock = obj.get("initialClock")
    if type(clock) is not int or clock < 0 or not isinstance(obj.get("steps"), list):
        raise TraceFormatError("initialClock must be an int >= 0 and steps a list")
    for i, step in enumerate(obj["steps"]):
        validate_step(step, i)
    return Trace(str(obj.get("description", "")), clock, list(obj["steps"]), name)


def load(path: str | Path) -> Trace:
    p = Path(path)
    return from_json(json.loads(p.read_text(encoding="utf-8")), p.stem)


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


def model_step(state: State, step: Record) -> ModelStep:
    op = step["op"]
    if op == "advance_time":
        return ModelStep(advance_time(state, step["deltaMs"]), None, ())
    if op == "corrupt":
        return ModelStep(corrupt_state(state, step["kind"], step["key"], step["patch"]), None, ())
    out = apply(state, {"name": step["name"], "args": step["args"]}, state.clock)
    return ModelStep(out.state, outcome_json(out), out.rules)


def record(trace: Trace) -> Trace:
    """Run the trace's inputs through the model and attach every step's expectations."""
    state = State(clock=trace.initial_clock)
    before = state.snapshot()
    steps = []
    for step in trace.inputs().steps:
        done = model_step(state, step)
        after = done.state.snapshot()
        recorded = dict(step)
        recorded["clock"] = done.state.clock
        if done.outcome is not None:
            recorded["outcome"] = done.outcome
            recorded["rules"] = list(done.rules)
        recorded["state"] = {"digest": snapshot_digest(after), "changes": changes(before, after)}
        steps.append(recorded)
        state, before = done.state, after
    return Trace(trace.description, trace.initial_clock, steps, trace.name)
