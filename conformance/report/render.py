"""`qlwf show`: a trace or counterexample as a step table and the workflow DAG at one step.

The trace (conformance/traces/format.py's format) is run through the model step by step, so a trace saved
without expectations (a stateful or conformance counterexample) renders the same as a recorded
corpus trace: per step the command, the model's outcome, the rule-table rows that fired, the
record-level state diff and every invariant the new state violates. Where a recorded step
disagrees with what the model does now, the step says so. The DAG is each Run's admitted steps
(needs as edges) coloured by StepRun status after the chosen step: by default the failing step
(the first with a violation, a disagreement or a model crash), else the last one.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qlwf.conformance.checkers.replay import state_diff
from qlwf.conformance.report.paths import first_difference_path
from qlwf.conformance.traces.format import Trace, model_step
from qlwf.model.canonical import canonical_json
from qlwf.model.invariants import check_invariants
from qlwf.model.state import State

Record = dict[str, Any]
DEFAULT_TRACE_DIR = "reports/counterexamples"

# Presentation only: one fill and text colour per StepRun status (model/tables.py STEP_STATUSES).
STATUS_COLOURS: dict[str, tuple[str, str]] = {
    "pending": ("#e5e7eb", "#111827"), "ready": ("#bfdbfe", "#1e3a8a"), "waiting_approval": ("#a5f3fc", "#164e63"),
    "running": ("#fde68a", "#78350f"), "lost": ("#d6b08c", "#3f2a14"), "succeeded": ("#86efac", "#14532d"),
    "failed": ("#fca5a5", "#7f1d1d"), "skipped": ("#f3f4f6", "#6b7280"), "cancelled": ("#fdba74", "#7c2d12"),
    "timed_out": ("#d8b4fe", "#581c87"),
}
UNKNOWN_COLOUR = ("#ffffff", "#000000")


class ShowError(ValueError):
    """Bad input to `qlwf show` (a step out of range)."""


def trace_dir() -> Path:
    """Where counterexample traces are written: $QLWF_TRACE_DIR, default reports/counterexamples."""
    return Path(os.environ.get("QLWF_TRACE_DIR") or DEFAULT_TRACE_DIR)


def show_command(path: str | Path, step: int | None = None) -> str:
    """The command line that renders the trace at `path` (printed by every counterexample report)."""
    p = Path(path)
    parts = ["qlwf", "show", str(p)]
    if step is not None:
        parts += ["--step", str(step)]
    parts += ["--html", str(p.with_suffix(".html"))]
    return " ".join(shlex.quote(x) for x in parts)


@dataclass
class DagNode:
    run_id: str
    step_key: str
    needs: tuple[str, ...]


@dataclass
class StepView:
    index: int
    op: str
    command: str  # command name, or the harness step in words
    args: str  # compact JSON of the arguments ("" for harness steps)
    outcome: str  # result status, "error Class code reason", or "" for harness steps
    rules: tuple[str, ...]
    diff: list[str]
    violations: list[str]
    clock: int
    statuses: dict[tuple[str, str], str]  # (runId, stepKey) -> StepRun status after the step
    run_statuses: dict[str, str] = field(default_factory=dict)  # runId -> Run status after the step
    disagreement: str | None = None  # the recorded expectation the model no longer produces
    crash: str | None = None  # the model raised on this step

    @property
    def failing(self) -> bool:
        return bool(self.violations or self.disagreement or self.crash)


@dataclass
class TraceView:
    name: str
    description: str
    initial_clock: int
    steps: list[StepView] = field(default_factory=list)
    nodes: list[DagNode] = field(default_factory=list)

    @property
    def failing_step(self) -> int | None:
        return next((s.index for s in self.steps if s.failing), None)

    def default_step(self) -> int | None:
        failing = self.failing_step
        return failing if failing is not None else (self.steps[-1].index if self.steps else None)

    @property
    def runs(self) -> list[str]:
        return list(dict.fromkeys(n.run_id for n in self.nodes))

    def statuses_at(self, step: int | None) -> dict[tuple[str, str], str]:
        return {} if step is None else self.steps[step].statuses

    def run_label(self, run_id: str, step: int | None) -> str:
        status = None if step is None else self.steps[step].run_statuses.get(run_id)
        return f"{run_id} · {status}" if status else run_id

    def resolve_step(self, step: int | None) -> int | None:
        if step is None:
            return self.default_step()
        if not 0 <= step < len(self.steps):
            n = len(self.steps)
            raise ShowError(f"--step {step}: the trace has {n} rendered step(s) (0..{n - 1})")
        return step


def _compact(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _outcome_text(outcome: Record | None) -> str:
    if outcome is None:
        return ""
    if "error" in outcome:
        e = outcome["error"]
        return f"error {e.get('class')} {e.get('code')} {e.get('reason')}"
    result = outcome.get("ok")
    return str(result.get("status", "page")) if isinstance(result, dict) else "ok"


def _harness_label(step: Record) -> str:
    if step["op"] == "advance_time":
        return f"advance_time +{step['deltaMs']} ms"
    return f"corrupt {step['kind']}[{', '.join(str(k) for k in step['key'])}]"


def _disagreement(step: Record, outcome: Record | None, rules: tuple[str, ...], clock: int) -> str | None:
    if "clock" in step and step["clock"] != clock:
        return f"recorded clock {step['clock']}, model {clock}"
    if "outcome" in step and outcome is not None and canonical_json(step["outcome"]) != canonical_json(outcome):
        found = first_difference_path(step["outcome"], outcome)
        where = "" if found is None else (f" (at {found[0] or 'the outcome'}: recorded "
                                          f"{json.dumps(found[1], ensure_ascii=False)}, model "
                                          f"{json.dumps(found[2], ensure_ascii=False)})")
        return f"recorded outcome {_outcome_text(step['outcome'])!r}, model {_outcome_text(outcome)!r}{where}"
    if "rules" in step and list(step["rules"]) != list(rules):
        return f"recorded rules {', '.join(step['rules']) or '(none)'}, model {', '.join(rules) or '(none)'}"
    return None


def _statuses(snapshot: dict[str, list[Record]]) -> dict[tuple[str, str], str]:
    return {(r["runId"], r["stepKey"]): r["status"] for r in snapshot.get("stepRuns", [])}


def _run_statuses(snapshot: dict[str, list[Record]]) -> dict[str, str]:
    return {r["id"]: r["status"] for r in snapshot.get("runs", [])}


def _nodes(snapshot: dict[str, list[Record]]) -> list[DagNode]:
    return [DagNode(r["runId"], r["stepKey"], tuple(r.get("needs", ()))) for r in snapshot.get("admissionSteps", [])]


def build(trace: Trace) -> TraceView:
    """Run `trace` through the model and collect what every step did (stops at a model crash)."""
    view = TraceView(trace.name, trace.description, trace.initial_clock)
    state = State(clock=trace.initial_clock)
    before = state.snapshot()
    seen: set[tuple[str, str]] = set()
    for i, step in enumerate(trace.steps):
        command = step["name"] if step["op"] == "command" else _harness_label(step)
        if "probe" in step:  # its outcome is what a store deriving the binding answers, not the command's
            command += f" [probe {step['probe']}]"
        args = _compact(step["args"]) if step["op"] == "command" else ""
        try:
            done = model_step(state, step)
        except Exception as e:  # a model crash is the finding: show it and stop
            view.steps.append(StepView(i, step["op"], command, args, "", (), [], [], state.clock, _statuses(before),
                                       _run_statuses(before), crash=f"{type(e).__name__}: {e}"))
            break
        after = done.state.snapshot()
        for node in _nodes(after):
            if (node.run_id, node.step_key) not in seen:
                seen.add((node.run_id, node.step_key))
                view.nodes.append(node)
        view.steps.append(StepView(
            i, step["op"], command, args, _outcome_text(done.outcome), done.rules, state_diff(before, after),
            [str(v) for v in check_invariants(done.state)], done.state.clock, _statuses(after), _run_statuses(after),
            _disagreement(step, done.outcome, done.rules, done.state.clock)))
        state, before = done.state, after
    return view


# ------------------------------------------------------------------------------------------------
# Markdown (Mermaid for the DAG: code-hosting pull requests render it)
def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def _cells(lines: list[str], limit: int = 12) -> str:
    shown = [_cell(x) for x in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"… {len(lines) - limit} more")
    return "<br>".join(shown) or "–"


def step_heading(view: TraceView, step: int | None) -> str:
    if step is None:
        return "no steps"
    s = view.steps[step]
    why = "failing step" if step == view.failing_step else ("last step" if step == len(view.steps) - 1 else "step")
    return f"{why} {step}: {s.command} → {s.outcome or 'done'}"


def mermaid(view: TraceView, step: int | None) -> str:
    statuses = view.statuses_at(step)
    ids = {(n.run_id, n.step_key): f"n{i}" for i, n in enumerate(view.nodes)}
    out = ["```mermaid", "flowchart TD"]
    for r, run in enumerate(view.runs):
        out.append(f'  subgraph run{r}["{view.run_label(run, step)}"]')
        for n in (n for n in view.nodes if n.run_id == run):
            status = statuses.get((run, n.step_key), "absent")
            out.append(f'    {ids[(run, n.step_key)]}["{n.step_key}<br/>{status}"]:::{status}')
        out.append("  end")
    for n in view.nodes:
        for need in n.needs:
            if (n.run_id, need) in ids:
                out.append(f"  {ids[(n.run_id, need)]} --> {ids[(n.run_id, n.step_key)]}")
    used = sorted({statuses.get((n.run_id, n.step_key), "absent") for n in view.nodes})
    for status in used:
        fill, text = STATUS_COLOURS.get(status, UNKNOWN_COLOUR)
        out.append(f"  classDef {status} fill:{fill},color:{text},stroke:#374151")
    out.append("```")
    return "\n".join(out)


def markdown(view: TraceView, step: int | None = None) -> str:
    chosen = view.resolve_step(step)
    failing = view.failing_step
    out = [f"# qlwf show: {view.name or 'trace'}", "", _cell(view.description) or "(no description)", "",
           f"{len(view.steps)} step(s), initial clock {view.initial_clock}; "
           + (f"**first failing step: {failing}**" if failing is not None else "no step fails")
           + ". DAG shown after " + step_heading(view, chosen) + ".", "",
           "| # | command | outcome | rules | state diff | problems |", "| --- | --- | --- | --- | --- | --- |"]
    for s in view.steps:
        problems = [*s.violations, *([f"recorded ≠ model: {s.disagreement}"] if s.disagreement else []),
                    *([f"model crash: {s.crash}"] if s.crash else [])]
        command = f"`{_cell(s.command)}`" + (f" {_cell(s.args)}" if s.args else "")
        mark = f"**{s.index}**" if s.index == chosen else str(s.index)
        out.append(f"| {mark} | {command} | {_cell(s.outcome) or '–'} | {_cells(list(s.rules))} | "
                   f"{_cells(s.diff)} | {_cells(problems)} |")
    out += ["", f"## Workflow DAG after step {chosen}" if chosen is not None else "## Workflow DAG", ""]
    out.append(mermaid(view, chosen) if view.nodes else "(no workflow admitted)")
    return "\n".join(out) + "\n"
