"""Replay a qlwf trace against the model, explaining every step (the `--backend model` replay).

`replay_trace(trace, out=print)` takes the JSON form of a trace (commands.md §1.2: format
`qlwf-trace`, version 1, initialClock, steps of `advance_time` and `command`) and prints, for every
step, the command and its outcome (result status or typed error), the rule-table rows that fired,
the record-level state diff, and every invariant the new state violates. It finally runs the LIVE-1
drain (conformance/checkers/liveness.py) on the last state. Pure model: recorded expectations on the steps are
ignored here (the conformance runner compares them), and fault-injection steps are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from qlwf.conformance.traces.format import model_step
from qlwf.model.invariants import Violation, check_invariants
from qlwf.model.records import KIND_KEYS, Record
from qlwf.model.state import State
from qlwf.model.system import advance_time, apply

from .liveness import DrainReport, drain

TRACE_FORMAT = "qlwf-trace"
TRACE_VERSIONS = (1, 2)  # 2 adds `evidence` (not an input of the model's command) and `probe` to admit_task_attempt
Snapshot = dict[str, list[Record]]


class ReplayError(ValueError):
    """The input is not a model-replayable qlwf trace."""


@dataclass
class StepReport:
    index: int
    step: Record
    outcome: str  # "advance_time +Δ", "<status>" or "error <class> <code> <reason>"
    rules: tuple[str, ...]
    diff: list[str]
    violations: list[Violation]
    error: Record | None = None
    result: Record | None = None


@dataclass
class ReplayReport:
    steps: list[StepReport] = field(default_factory=list)
    final_state: State = field(default_factory=State)
    liveness: DrainReport | None = None

    @property
    def first_violation(self) -> tuple[int, Violation] | None:
        for s in self.steps:
            if s.violations:
                return s.index, s.violations[0]
        return None

    @property
    def ok(self) -> bool:
        return self.first_violation is None and (self.liveness is None or self.liveness.ok)


def _key(kind: str, record: Record) -> tuple[Any, ...]:
    return tuple(record.get(k) for k in KIND_KEYS[kind])


def _short(value: Any, limit: int = 72) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def state_diff(before: Snapshot, after: Snapshot) -> list[str]:
    """Human-readable record-level differences: added, removed and changed records (changed keys only)."""
    lines: list[str] = []
    for kind in KIND_KEYS:
        old = {_key(kind, r): r for r in before.get(kind, [])}
        new = {_key(kind, r): r for r in after.get(kind, [])}
        for key in sorted(set(old) | set(new), key=lambda k: tuple(str(x) for x in k)):
            name = f"{kind}[{', '.join(str(k) for k in key)}]"
            if key not in new:
                lines.append(f"- {name}")
            elif key not in old:
                r = new[key]
                label = r.get("type") or r.get("status") or ""
                lines.append(f"+ {name}" + (f" {label}" if label else ""))
            elif old[key] != new[key]:
                o, n = old[key], new[key]
                changed = [f"{k}: {_short(o.get(k, '<absent>'))} -> {_short(n.get(k, '<absent>'))}"
                           for k in dict.fromkeys([*o, *n]) if o.get(k, "<absent>") != n.get(k, "<absent>")]
                lines.append(f"~ {name} " + "; ".join(changed))
    return lines


def _validate(trace: Mapping[str, Any]) -> tuple[int, list[Record]]:
    if trace.get("format") != TRACE_FORMAT or trace.get("version") not in TRACE_VERSIONS:
        raise ReplayError(f"not a {TRACE_FORMAT} document of version {' or '.join(map(str, TRACE_VERSIONS))}")
    clock, steps = trace.get("initialClock"), trace.get("steps")
    if type(clock) is not int or clock < 0 or not isinstance(steps, list):
        raise ReplayError("initialClock must be an int >= 0 and steps a list")
    for i, step in enumerate(steps):
        op = step.get("op") if isinstance(step, dict) else None
        if op == "advance_time":
            if type(step.get("deltaMs")) is not int or step["deltaMs"] < 0:
                raise ReplayError(f"step {i}: deltaMs must be an int >= 0")
        elif op == "command":
            if not isinstance(step.get("name"), str) or "args" not in step:
                raise ReplayError(f"step {i}: a command step needs name and args")
        else:
            raise ReplayError(f"step {i}: op {op!r} cannot be replayed by the pure model")
    return clock, steps


def replay_trace(trace: Mapping[str, Any] | Any, out: Callable[[str], Any] = print,
                 liveness: bool = True) -> ReplayReport:
    """Replay `trace` (its JSON form, or an object with `to_json()`) on the model, explaining each step."""
    obj = trace.to_json() if hasattr(trace, "to_json") else trace
    clock, steps = _validate(obj)
    out(f"trace: {obj.get('description', '')}")
    state = State(clock=clock)
    report = ReplayReport(final_state=state)
    for i, step in enumerate(steps):
        before = state.snapshot()
        error = result = None
        rules: tuple[str, ...] = ()
        if step["op"] == "advance_time":
            state = advance_time(state, step["deltaMs"])
            label, outcome = f"advance_time +{step['deltaMs']} -> clock {state.clock}", "advance_time"
        else:
            try:
                if "probe" in step:  # a probe expects what a store deriving the binding answers, not the command
                    o = model_step(state, step).raw
                    assert o is not None
                else:
                    o = apply(state, {"name": step["name"], "args": step["args"]})
            except ValueError as e:
                raise ReplayError(f"step {i}: {e}") from e
            state, rules = o.state, o.rules
            if o.error is not None:
                error = o.error.to_json()
                outcome = f"error {error['class']} {error['code']} {error['reason']}"
            else:
                result = o.result
                outcome = str((o.result or {}).get("status", "page"))
            label = f"{step['name']}({_short(step['args'], 100)}) -> {outcome}"
        diff = state_diff(before, state.snapshot())
        violations = check_invariants(state)
        report.steps.append(StepReport(i, step, outcome, rules, diff, violations, error, result))
        out(f"[{i}] {label}")
        if rules:
            out(f"    rules: {', '.join(rules)}")
        for line in diff:
            out(f"    {line}")
        for v in violations:
            out(f"    VIOLATED {v}")
    report.final_state = state
    if liveness:
        report.liveness = drain(state)
        out(report.liveness.explain())
    first = report.first_violation
    out("replay: ok" if report.ok else
        f"replay: FAILED ({'first violation at step ' + str(first[0]) + ': ' + str(first[1]) if first else 'LIVE-1'})")
    return report
