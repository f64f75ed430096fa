"""`qlwf traces check`: a trace file against the qlwf-trace schema, then every expectation against the model.

A file is *invalid* (not judged) when it is unreadable, not JSON, breaks conformance/exec/schema/trace.json
or holds a step the model cannot run at all (e.g. a corrupt step on a record that does not exist).
Otherwise the model re-derives every step from the inputs alone (initialClock, the steps' op,
name/args, deltaMs, corrupt kind/key/patch) and the file is *wrong* at the first step where a
recorded value (atMs, clock, outcome, rules, the state's digest or one of its records) differs. The
report names that step, the first differing key with both values, and a record-level diff of the
state the file claims against the model's (conformance/lockstep/state_diff.py). An admit_task_attempt
step's `evidence` (version 2) is wrong when the step's binding is not the one task-attempts.md §3A
derives from it for the step's plan step (model/evidence.py `trace_evidence_problem`), unless the step
is marked as a foreign-binding probe (`"probe": "foreign-binding"`): then it is wrong when the binding
*is* the derived one (it probes nothing), or when the admission with the derived binding would not be
admitted there either (the answer would then depend on which check a store runs first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qlwf.conformance.exec.protocol_schema import document_problems
from qlwf.conformance.lockstep.state_diff import RecordDiff, snapshot_diff, value_diff
from qlwf.conformance.traces.format import (
    EVIDENCE_COMMAND,
    EXPECTATION_KEYS,
    Snapshot,
    TraceFormatError,
    expectations,
    first_difference,
    from_json,
    model_step,
    plan_step_of,
    read_json_file,
)
from qlwf.model.evidence import step_evidence_binding, trace_evidence_problem
from qlwf.model.records import KIND_KEYS
from qlwf.model.state import State
from qlwf.model.system import apply

Record = dict[str, Any]
MAX_SCHEMA_PROBLEMS = 10


@dataclass
class WrongStep:
    """The first step whose recorded expectations the model does not produce."""

    index: int
    step: Record
    key: str  # the first differing expectation key
    recorded: Any
    model: Any
    record_diffs: list[RecordDiff] = field(default_factory=list)

    def to_json(self) -> Record:
        return {"stepIndex": self.index, "op": self.step.get("op"), "name": self.step.get("name"), "key": self.key,
                "recorded": self.recorded, "model": self.model,
                "recordDiffs": [_relabel(d.to_json()) for d in self.record_diffs]}


@dataclass
class CheckResult:
    path: str
    status: str  # "ok" | "wrong" | "invalid" | "empty" (valid, but no step: nothing re-derived, no verdict)
    steps: int = 0
    problems: list[str] = field(default_factory=list)  # why the file is invalid
    wrong: WrongStep | None = None

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "wrong": 1, "invalid": 2, "empty": 3}[self.status]

    def to_json(self) -> Record:
        return {"file": self.path, "status": self.status, "steps": self.steps, "problems": self.problems,
                "wrongStep": self.wrong.to_json() if self.wrong else None}

    def render(self) -> str:
        if self.status == "ok":
            return f"ok      {self.path}: {self.steps} steps, every expectation re-derived by the model"
        if self.status == "empty":
            return f"EMPTY   {self.path}: no step, so no expectation to re-derive: no verdict"
        if self.status == "invalid":
            return "\n".join([f"INVALID {self.path}"] + [f"  {p}" for p in self.problems])
        assert self.wrong is not None
        w = self.wrong
        what = w.step.get("name") if w.step.get("op") == "command" else w.step.get("op")
        lines = [f"WRONG   {self.path}: first wrong step {w.index} ({what}): {w.key} differs"]
        if w.key == "state" and w.record_diffs:
            recorded, model = str(w.recorded.get("digest")), w.model["digest"]
            lines.append(f"  digest: {model[:16]}… in both (the records were edited, not the digest)"
                         if recorded == model else f"  digest: recorded {recorded[:16]}…, model {model[:16]}…")
        else:
            lines += [f"  recorded: {_short(w.recorded)}", f"  model:    {_short(w.model)}"]
        if w.key == "outcome":
            lines += [f"    {f.path}: trace={_short(f.backend, 100)} model={_short(f.model, 100)}"
                      for f in value_diff(w.model, w.recorded)[:20]]
        if w.record_diffs:
            lines.append(f"  state diff, the trace's records against the model's ({len(w.record_diffs)} record(s)):")
            lines += ["    " + _render_diff(d).replace("\n", "\n    ") for d in w.record_diffs[:40]]
        return "\n".join(lines)


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# snapshot_diff(model, backend) is called with the trace's claimed state as the "backend" side.
_STATUS = {"only_in_model": "only in the model's state", "only_in_backend": "only in the trace", "differs": "differs"}


def _render_diff(d: RecordDiff) -> str:
    head = f"{d.kind} {'/'.join(str(k) for k in d.key)}"
    if d.status != "differs":
        return f"{head}: {_STATUS[d.status]}"
    return "\n".join([f"{head}:"] + [f"    {f.path}: trace={_short(f.backend, 100)} model={_short(f.model, 100)}"
                                     for f in d.fields])


def _relabel(diff: Record) -> Record:
    status = {"only_in_backend": "only_in_trace"}.get(diff["status"], diff["status"])
    return diff | {"status": status, "fields": [{"path": f["path"], "trace": f["backend"], "model": f["model"]}
                                                for f in diff["fields"]]}


def claimed_state(recorded_state: Any, before: Snapshot) -> Snapshot | None:
    """The durable state a recorded step claims: its snapshot, or its changes applied to `before`."""
    if not isinstance(recorded_state, dict):
        return None
    if "snapshot" in recorded_state:
        return recorded_state["snapshot"] if isinstance(recorded_state["snapshot"], dict) else None
    out = {kind: {tuple(_key(kind, r)): r for r in records} for kind, records in before.items()}
    for change in recorded_state.get("changes", []):
        table = out.setdefault(change["kind"], {})
        if change["record"] is None:
            table.pop(tuple(change["key"]), None)
        else:
            table[tuple(change["key"])] = change["record"]
    return {kind: [table[k] for k in _key_order(table)] for kind, table in out.items()}


def _key_order(table: dict[tuple[Any, ...], Record]) -> list[tuple[Any, ...]]:
    """Snapshot order: by key, strings by code point and numbers by value (events by runId, then sequence)."""
    try:
        return sorted(table)
    except TypeError:  # a hand-edited key of another type: any stable order, the diff reports the record
        return sorted(table, key=lambda k: tuple(str(x) for x in k))


def _key(kind: str, record: Record) -> list[Any]:
    return [record.get(k) for k in KIND_KEYS[kind]]


def check_document(doc: Any, path: str) -> CheckResult:
    problems = document_problems("trace", doc, "(trace)")
    if problems:
        shown = [_short_text(p) for p in problems[:MAX_SCHEMA_PROBLEMS]]
        more = len(problems) - len(shown)
        return CheckResult(path, "invalid", problems=[f"schema conformance/exec/schema/trace.json: {p}" for p in shown]
                           + ([f"... and {more} more schema problem(s)"] if more else []))
    try:
        trace = from_json(doc, Path(path).stem)
    except TraceFormatError as e:
        return CheckResult(path, "invalid", problems=[str(e)])
    state = State(clock=trace.initial_clock)
    before = state.snapshot()
    for i, step in enumerate(trace.steps):
        inputs = {k: v for k, v in step.items() if k not in EXPECTATION_KEYS}
        problem = evidence_problem(state, step)
        if problem is not None:
            binding = step["args"].get("binding") if isinstance(step["args"], dict) else None
            key = "probe" if "probe" in step else "evidence"
            return CheckResult(path, "wrong", i + 1, wrong=WrongStep(i, step, key, binding, problem))
        try:
            done = model_step(state, inputs)
        except (ValueError, KeyError, TypeError) as e:
            return CheckResult(path, "invalid", i, [f"step {i}: the model cannot run this step: {e}"])
        after = done.state.snapshot()
        derived = expectations(done, before, after, trace.state_form)
        found = first_difference(step, derived)
        if found is not None:
            key, recorded, model = found
            diffs: list[RecordDiff] = []
            if key == "state":
                claimed = claimed_state(recorded, before)
                if claimed is not None:
                    diffs = snapshot_diff(after, claimed)
                if not diffs and recorded.get("digest") != model["digest"]:
                    key, recorded, model = "state.digest", recorded.get("digest"), model["digest"]
            return CheckResult(path, "wrong", i + 1, wrong=WrongStep(i, step, key, recorded, model, diffs))
        state, before = done.state, after
    # a file of no step holds no expectation: "ok" would be a pass on nothing (as `qlwf audit` of no Run)
    return CheckResult(path, "ok" if trace.steps else "empty", len(trace.steps))


def evidence_problem(state: State, step: Record) -> str | None:
    """Why the ql3 evidence of an admit_task_attempt step does not derive its binding (None: it does, or
    the step carries none). Evidence belongs to a step whose Run has one admitted plan holding the StepRun.
    A foreign-binding probe turns the rule round (`probe_problem`)."""
    if step.get("op") != "command" or step.get("name") != EVIDENCE_COMMAND or step.get("evidence") is None:
        return None
    backed = plan_step_of(state, step["args"])
    if backed is None:
        return "evidence on a step whose Run and StepRun no admitted plan backs (it must be null there)"
    if "probe" in step:
        return probe_problem(state, step, *backed)
    return trace_evidence_problem(*backed, step["args"].get("binding"), step["evidence"])


def probe_problem(state: State, step: Record, plan: Record, step_key: str) -> str | None:
    """Why a foreign-binding probe does not probe: its evidence derives no binding, its binding is the
    derived one, or the derived binding would be refused there too (the refusal the probe expects would
    then depend on which check a store runs first)."""
    try:
        derived = step_evidence_binding(plan, step_key, step["evidence"])
    except ValueError as e:
        return f"a foreign-binding probe needs evidence that derives a binding: {e}"
    if step["args"].get("binding") == derived:
        return "a foreign-binding probe whose binding is the one its evidence derives: it probes nothing"
    admitted = apply(state, {"name": EVIDENCE_COMMAND, "args": {**step["args"], "binding": derived}}, state.clock)
    if not admitted.ok:
        assert admitted.error is not None
        return (f"a foreign-binding probe where the derived binding would be refused too "
                f"({admitted.error.error_class} {admitted.error.reason}): place it where the admission succeeds")
    return None


def _short_text(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_file(path: str | Path) -> CheckResult:
    try:
        doc = read_json_file(path)
    except TraceFormatError as e:
        return CheckResult(str(path), "invalid", problems=[str(e)])
    return check_document(doc, str(path))

