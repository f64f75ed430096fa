"""The lockstep's invariant shortcut (decisions Q-60): a step whose read-back equals the model's state
exactly (record order, key order and JSON types) is given its verdict without evaluating the
invariants, because they then see the very same values on both sides. These tests show that the
shortcut decides most steps, that evaluating those steps anyway never disagrees, and that what `==`
cannot tell apart (True for 1, 1.0 for 1, another key order) still reaches the full evaluation."""

from __future__ import annotations

from typing import Any

import pytest
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import ExactKinds, load_invariant_check, run_lockstep
from qlwf.conformance.traces.format import Trace
from qlwf.impl.port import Snapshot
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.model.state import TABLES

INVARIANTS = load_invariant_check()
SEED = 20261202


def _snap(**kinds: list[dict[str, Any]]) -> Snapshot:
    return {kind: kinds.get(kind, []) for kind in TABLES}


@pytest.mark.parametrize(("mine", "theirs"), [
    ({"attemptCount": 0}, {"attemptCount": False}),
    ({"version": 1}, {"version": 1.0}),
    ({"version": 1}, {"version": True}),
    ({"x": 0.0}, {"x": -0.0}),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    ({"n": 1 << 64}, {"n": 1 << 64}),  # no 64-bit text: never taken as exact
])
def test_values_equal_to_python_but_not_exactly_are_inexact(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert [mine] == [theirs]
    exact = ExactKinds()
    assert exact.compare(TABLES, _snap(runs=[mine]), _snap(runs=[theirs]))
    assert not exact.all_exact() and exact.inexact == {"runs"}


def test_a_kind_not_read_afresh_keeps_its_status() -> None:
    exact = ExactKinds()
    assert not exact.all_exact()  # nothing compared yet
    record = {"id": "r", "version": 1}
    assert exact.compare(TABLES, _snap(runs=[record]), _snap(runs=[dict(record)]))
    assert exact.all_exact()
    assert exact.compare({"events"}, _snap(events=[{"sequence": 1}]), _snap(events=[{"sequence": True}]))
    assert exact.compare({"runs"}, _snap(runs=[record]), _snap(runs=[dict(record)]))
    assert exact.inexact == {"events"}  # still inexact: the events were not compared again
    assert exact.compare({"events"}, _snap(events=[{"sequence": 1}]), _snap(events=[{"sequence": 1}]))
    assert exact.all_exact()


def test_a_kind_that_differs_changes_no_status() -> None:
    exact = ExactKinds()
    assert exact.compare(TABLES, _snap(runs=[{"id": "r"}]), _snap(runs=[{"id": "r"}]))
    assert not exact.compare({"runs", "events"}, _snap(runs=[{"id": "r"}], events=[{"sequence": 1}]),
                             _snap(runs=[{"id": "r"}], events=[{"sequence": True}, {"sequence": 2}]))
    assert exact.all_exact()


CROSS_TRACES = [*runner.corpus_traces(), *runner.generated_traces(12, SEED)]


@pytest.mark.parametrize("trace", CROSS_TRACES, ids=lambda t: t.name or t.description[:40])
def test_evaluating_the_exact_steps_too_never_disagrees(trace: Trace) -> None:
    with SqliteAdapter() as port:
        checked = run_lockstep(trace, port, invariants=INVARIANTS, cross_check=True)
    with SqliteAdapter() as port:
        fast = run_lockstep(trace, port, invariants=INVARIANTS)
    assert checked.passed, checked.divergence.render() if checked.divergence else ""
    assert fast.passed and fast.steps == checked.steps and fast.invariant_checks == checked.invariant_checks
    assert fast.invariant_evaluations <= checked.invariant_evaluations


def test_the_shortcut_decides_most_steps_of_generated_traces() -> None:
    checks = evaluations = 0
    for trace in runner.generated_traces(12, SEED):
        with SqliteAdapter() as port:
            result = run_lockstep(trace, port, invariants=INVARIANTS)
        assert result.passed
        checks += result.invariant_checks
        evaluations += result.invariant_evaluations
    assert checks > 300 and 12 <= evaluations < checks / 4  # at least each trace's last step


class BoolCounts(SqliteAdapter):
    """Broken: reads StepRun attemptCount 0 back as False, which `==` takes for 0."""

    def _confuse(self, snap: Snapshot) -> Snapshot:
        if "stepRuns" in snap:
            snap = {**snap, "stepRuns": [{**s, "attemptCount": False} if s["attemptCount"] == 0 else s
                                         for s in snap["stepRuns"]]}
        return snap

    def snapshot(self) -> Snapshot:
        return self._confuse(super().snapshot())

    def snapshot_kinds(self, kinds: frozenset[str]) -> Snapshot:
        return self._confuse(super().snapshot_kinds(kinds))


@pytest.mark.parametrize("cross_check", [False, True])
def test_a_value_equal_only_to_python_reaches_the_full_evaluation(cross_check: bool) -> None:
    trace = generate(SEED)
    with BoolCounts() as port:
        result = run_lockstep(trace, port, invariants=INVARIANTS, cross_check=cross_check)
    found = result.divergence
    assert found is not None and found.kind == "invariant" and found.step_index == 0  # admission writes them
    assert any("attemptCount" in v for v in found.violations), found.violations
    # without invariants the type confusion is still a state divergence, at the first whole comparison
    with BoolCounts() as port:
        plain = run_lockstep(trace, port)
    assert plain.divergence is not None and plain.divergence.kind == "state"
