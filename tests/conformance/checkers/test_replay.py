"""Counterexamples as traces: written by the explorer and the stateful machine, replayed on the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import Phase
from qlwf.conformance.checkers.counterexamples import write_counterexamples
from qlwf.conformance.checkers.explore import Config, build_plan, dag_shapes, explore
from qlwf.conformance.checkers.replay import ReplayError, Snapshot, replay_trace, state_diff
from qlwf.conformance.exec.protocol_schema import document_problems
from qlwf.conformance.mutants import Mutant, by_name
from qlwf.conformance.traces.format import Trace, advance, command, load
from qlwf.model.invariants import consistent_binding


def mutant(name: str) -> Mutant:
    return by_name(name)


def plant(m: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    assert m.plant is not None
    m.plant(monkeypatch)


def happy_trace() -> Trace:
    plan = build_plan("run-1", "plan-1", {"a": (), "b": ("a",)}, 1000)
    a = next(p for p in plan["steps"] if p["stepKey"] == "a")
    steps = [command("admit_workflow", {"plan": plan}), advance(500),
             command("admit_task_attempt", {"runId": "run-1", "stepRunId": a["stepRunId"],
                                            "binding": consistent_binding(plan, a)}),
             command("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user", "id": "x"}}),
             command("advance_frontier", {"runId": "run-1"}),
             command("converge_cancellation", {"runId": "run-1"})]
    return Trace("happy path then cancellation", 1000, steps)


def test_replay_explains_every_step() -> None:
    lines: list[str] = []
    report = replay_trace(happy_trace().to_json(), out=lines.append)
    assert report.ok and report.liveness is not None and report.liveness.ok
    assert [s.outcome for s in report.steps] == ["created", "advance_time", "created", "requested",
                                                 "error Conflict PLUGIN_PACKAGE_WORKFLOW_FRONTIER_CONFLICT "
                                                 "cancellation_requested", "terminal"]
    text = "\n".join(lines)
    assert "+ runs[run-1] running" in text and "~ runs[run-1] " in text and "status: 'running' -> 'cancelled'" in text
    assert "attempt:converge.cancelled" in text and text.endswith("replay: ok")
    assert report.steps[4].diff == []  # a refused command changes nothing


def test_state_diff_lists_added_changed_and_removed_records() -> None:
    before: Snapshot = {"runs": [{"id": "r1", "status": "running", "version": 1}],
                        "leases": [{"attemptId": "x", "status": "leased"}]}
    after: Snapshot = {"runs": [{"id": "r1", "status": "failed", "version": 2}],
                       "events": [{"runId": "r1", "sequence": 2, "type": "workflow.failed"}]}
    assert state_diff(before, after) == ["~ runs[r1] status: 'running' -> 'failed'; version: 1 -> 2",
                                         "+ events[r1, 2] workflow.failed", "- leases[x]"]


def test_model_replay_refuses_what_it_cannot_replay() -> None:
    with pytest.raises(ReplayError):
        replay_trace({"format": "qlwf-trace", "version": 3, "initialClock": 0, "steps": []}, out=lambda _: None)
    corrupt = {"format": "qlwf-trace", "version": 1, "initialClock": 0,
               "steps": [{"op": "corrupt", "kind": "runs", "key": ["r"], "patch": {}}]}
    with pytest.raises(ReplayError, match="cannot be replayed by the pure model"):
        replay_trace(corrupt, out=lambda _: None)


def test_explorer_counterexample_replays_to_the_same_violation(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    plant(mutant("requeue_keeps_epoch"), monkeypatch)
    report = explore(Config(max_steps=1, shapes=tuple(dag_shapes(1)), stop_on_violation=True))
    (path,) = write_counterexamples(report.findings[:1], tmp_path)
    replayed = replay_trace(load(path), out=lambda _: None)
    at, violation = replayed.first_violation or (None, None)
    assert at == len(replayed.steps) - 1 and violation is not None and violation.invariant == "INV-21"
    assert not document_problems("trace", json.loads(path.read_text())), "saved in the self-contained form"


def test_stateful_counterexample_is_shrunk_written_and_replayable(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """The frontier mutant fails INV-28 right after the first admission, whatever the campaign draws:
    the machine shrinks it to one admission of a one-step plan, writes it, and the replay shows it."""
    from support.stateful_run import WorkflowMachine, run_machine

    class Unrecorded(WorkflowMachine):
        coverage = None

    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    plant(mutant("frontier_terminal_with_ready_step"), monkeypatch)
    with pytest.raises(AssertionError, match="INV-28") as failure:
        run_machine(Unrecorded, max_examples=20, phases=[Phase.generate, Phase.shrink], derandomize=True,
                    database=None)
    saved = tmp_path / "stateful.json"
    assert f"render it: qlwf show {saved} --html {tmp_path / 'stateful.html'}" in str(failure.value)
    trace = load(saved)
    assert trace.description.startswith("stateful counterexample") and "INV-28" in trace.description
    # written self-contained (docs/traces.md): schema-valid, every expectation recorded
    assert document_problems("trace", json.loads((tmp_path / "stateful.json").read_text())) == []
    assert trace.recorded and trace.steps[0]["atMs"] == trace.initial_clock
    (step,) = trace.steps  # shrunk to the one admission
    assert step["name"] == "admit_workflow" and len(step["args"]["plan"]["steps"]) == 1
    lines: list[str] = []
    replayed = replay_trace(trace, out=lines.append)
    assert replayed.first_violation is not None and replayed.first_violation[0] == 0
    assert replayed.first_violation[1].invariant == "INV-28"
    assert any(line.startswith("    VIOLATED INV-28") for line in lines)
