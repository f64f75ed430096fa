"""A generated trace's model run (decisions Q-74): the generator's `model_step` results, which the
lockstep harness takes instead of running the model again on the very same objects."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
from qlwf.conformance.generate.sequences import family, generate
from qlwf.conformance.lockstep import compare as lockstep
from qlwf.conformance.lockstep import runner
from qlwf.conformance.traces.format import ModelRun, ModelStep, Trace, model_step
from qlwf.model.state import State

SEEDS = range(20261129, 20261129 + 16)  # one period of the families: random, boundary and pages traces


def test_the_seeds_cover_every_family() -> None:
    assert {family(s) for s in SEEDS} == {"random", "boundary", "pages"}


@pytest.mark.parametrize("seed", SEEDS)
def test_the_generators_run_is_the_models_run_from_scratch(seed: int) -> None:
    trace = generate(seed)
    run = trace.model_run
    assert run is not None and run.steps == tuple(trace.steps) and len(run.done) == len(trace.steps)
    state = State(clock=trace.initial_clock)
    assert run.initial == state
    for step, recorded in zip(trace.steps, run.done, strict=True):
        fresh = model_step(state, step)  # a new State chain: equal values, other objects
        assert (fresh.state, fresh.outcome, fresh.rules) == (recorded.state, recorded.outcome, recorded.rules)
        state = fresh.state


def test_a_step_is_known_only_for_the_same_objects() -> None:
    trace = generate(SEEDS[0])
    run = trace.model_run
    assert run is not None
    first, second = trace.steps[0], trace.steps[1]
    assert run.known(0, run.initial, first) is run.done[0]
    assert run.known(1, run.done[0].state, second) is run.done[1]
    assert run.known(0, State(clock=trace.initial_clock), first) is None  # an equal state is not the same
    assert run.known(0, run.initial, dict(first)) is None  # nor an equal step
    moved = next(j for j in range(1, len(run.done)) if run.done[j - 1].state is not run.initial)
    assert run.known(moved, run.initial, trace.steps[moved]) is None  # the pre-state of an earlier step
    assert run.known(len(run.done), run.done[-1].state, first) is None  # beyond the run


def _summary(trace: Trace) -> list[object]:
    result = runner.run_traces("sqlite", [trace]).results[0]
    return [result.passed, result.steps, result.invariant_checks, result.invariant_evaluations, result.divergence]


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_lockstep_takes_the_run_and_reports_the_same(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = generate(seed)
    calls: list[int] = []

    def counting(state: State, step: dict[str, Any]) -> ModelStep:
        calls.append(1)
        return model_step(state, step)

    monkeypatch.setattr(lockstep, "model_step", counting)
    with_run = _summary(trace)
    assert calls == []  # every step's result came from the generator's run
    without = _summary(dataclasses.replace(trace, model_run=None))
    assert len(calls) == len(trace.steps)
    assert with_run == without and with_run[0] is True


def test_a_run_that_is_not_the_traces_is_not_used() -> None:
    """A ModelRun for other step objects (here: the same steps copied) is ignored step by step."""
    trace = generate(SEEDS[1])
    assert trace.model_run is not None
    copied = [dict(s) for s in trace.steps]
    foreign = Trace(trace.description, trace.initial_clock, copied, trace.name,
                    model_run=ModelRun(trace.model_run.initial, trace.model_run.steps, trace.model_run.done))
    assert _summary(foreign) == _summary(dataclasses.replace(trace, model_run=None))


def test_a_generator_step_taken_around_emit_drops_the_run() -> None:
    from qlwf.conformance.generate.sequences import GeneratorConfig, RandomChooser, _Generator
    from qlwf.conformance.traces.format import advance

    g = _Generator(RandomChooser(1), GeneratorConfig(), "t")
    g.emit(advance(5))
    assert g.trace().model_run is not None
    g.steps.append(advance(5))  # appended without the model: lengths differ
    assert g.trace().model_run is None


def test_the_run_is_never_pickled() -> None:
    trace = generate(SEEDS[0])
    back = pickle.loads(pickle.dumps(trace))
    assert back.model_run is None and back.steps == trace.steps and trace.model_run is not None
