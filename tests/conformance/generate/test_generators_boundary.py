"""Boundary traces meet every boundary of conformance/generate/boundaries.py, on both backends; the gate requires it."""

from __future__ import annotations

import json
from importlib import resources
from types import SimpleNamespace
from typing import Any

import pytest
from qlwf.conformance.generate import boundaries
from qlwf.conformance.generate.boundary import generate_boundary
from qlwf.conformance.generate.sequences import family, generate, generate_random
from qlwf.conformance.lockstep import runner
from qlwf.conformance.traces.format import Trace, model_step
from qlwf.impl.commands import cmd_tasks, cmd_worker, context
from qlwf.model import tables as T
from qlwf.model.attempts import fence_problem
from qlwf.model.state import State
from qlwf.model.values import INT31_MAX

BOUNDARY_SEEDS = [s for s in range(64) if family(s) == "boundary"]


def met_in_model(trace: Trace) -> set[str]:
    state, seen = State(clock=trace.initial_clock), set()
    for step in trace.steps:
        done = model_step(state, step)
        if done.outcome is not None:
            seen |= boundaries.met(state, step, done.outcome, done.state)
        state = done.state
    return seen


def test_every_boundary_trace_meets_every_non_page_boundary() -> None:
    for seed in range(3):
        missing = set(boundaries.BOUNDARIES) - met_in_model(generate_boundary(seed))
        assert {b for b in missing if not b.startswith("page_situation:")} == set(), (seed, missing)


def test_random_traces_meet_none_of_the_drift_only_boundaries() -> None:
    """The detector is not vacuous: the ordinary generator never reaches the attempt budget or a counter ceiling."""
    seen = set().union(*(met_in_model(generate_random(seed)) for seed in range(12)))
    drift_only = ("attempt_budget:", "attempt_number:", "counter:", "step_limit:")
    assert not {b for b in seen if b.startswith(drift_only)}, seen


def test_boundary_detection_reads_the_exact_offsets() -> None:
    trace = generate_boundary(3)
    shifted = Trace(trace.description, trace.initial_clock,
                    [s | {"deltaMs": s["deltaMs"] + 2} if s["op"] == "advance_time" and s["deltaMs"] else s
                     for s in trace.steps])
    seen = met_in_model(shifted)
    assert "lease_expiry:worker:before" not in seen and "task_deadline:at" not in seen


def test_generated_window_contains_boundary_and_page_traces() -> None:
    kinds = [family(s) for s in range(20261129, 20261129 + 30)]  # the quick gate's PostgreSQL window
    assert kinds.count("boundary") >= 1 and kinds.count("pages") >= 2
    assert generate(BOUNDARY_SEEDS[0]).description.startswith("generated-boundary-")


def test_the_gate_floors_require_every_boundary() -> None:
    floors = json.loads(resources.files("qlwf.gate").joinpath("evidence_floors.json").read_text(encoding="utf-8"))
    for profile in ("quick", "full"):
        for check in ("conform-sqlite", "conform-postgres"):
            assert floors["profiles"][profile][check]["boundaries_met"] == len(boundaries.BOUNDARIES)


def _ceiling_refuses_the_ceiling(mp: pytest.MonkeyPatch) -> None:
    """Storage mutant: the counter ceiling (commands.md §2.5) off by one, refusing 2147483647 itself."""
    def ceiling(self: Any, *values: int) -> None:
        if any(v >= INT31_MAX for v in values):
            raise self.fail.unavailable("counter_overflow", "mutant: a counter would reach 2147483647")

    mp.setattr(context.StoreTx, "ceiling", ceiling)


def _lease_live_at_expiry(mp: pytest.MonkeyPatch) -> None:
    """Storage mutant: the worker fence treats a lease as live at now = expiresAtMs (task-attempts.md §4.1)."""
    mp.setattr(cmd_worker, "fence_problem", lambda lease, worker, gen, now: fence_problem(lease, worker, gen, now - 1))


def _last_attempt_number_refused(mp: pytest.MonkeyPatch) -> None:
    """Storage mutant: the Run's attempt-number limit off by one, refusing number 8192 itself."""
    mp.setattr(cmd_tasks, "T", SimpleNamespace(**vars(T) | {"MAX_RUN_ATTEMPTS": T.MAX_RUN_ATTEMPTS - 1}))


BOUNDARY_MUTANTS = {"ceiling_refuses_the_ceiling": _ceiling_refuses_the_ceiling,
                    "lease_live_at_expiry": _lease_live_at_expiry,
                    "last_attempt_number_refused": _last_attempt_number_refused}


def _check_backend(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = [generate(BOUNDARY_SEEDS[0])]
    summary = runner.run_traces(backend, traces, invariants_every_step=False)
    assert summary.passed, summary.failures[0].divergence.render() if summary.failures[0].divergence else ""
    assert summary.coverage is not None
    report = summary.coverage.report()["boundaries"]
    assert [b for b in report["missing"] if not b.startswith("page_situation:")] == []
    for name, mutant in BOUNDARY_MUTANTS.items():
        with monkeypatch.context() as mp:
            mutant(mp)
            broken = runner.run_traces(backend, traces, invariants=False)
        assert len(broken.failures) == 1, name  # the boundary trace meets the boundary and diverges


def test_boundary_traces_pass_and_catch_off_by_one_mutants_on_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    _check_backend("sqlite", monkeypatch)


@pytest.mark.postgres
def test_boundary_traces_pass_and_catch_off_by_one_mutants_on_postgres(pg_server: object,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _check_backend("postgres", monkeypatch)
