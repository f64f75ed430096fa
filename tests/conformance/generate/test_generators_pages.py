"""Generated traces alone (no corpus) catch the two page-loop defects of the production runtime.

The traces are the page-family seeds inside the quick gate's generated window (seed 20261129, 60
traces on SQLite, 30 on PostgreSQL), so what these tests show is what `qlwf check --quick` runs.
"""

from __future__ import annotations

import functools

import pytest
from qlwf.conformance.generate import boundaries
from qlwf.conformance.generate.pages import generate_pages
from qlwf.conformance.generate.sequences import family, generate
from qlwf.conformance.lockstep import runner
from qlwf.conformance.traces.format import Trace, model_step
from qlwf.model.state import State
from support.page_mutants import PAGE_MUTANTS, StorageMutant

GATE_SEED = 20261129


def page_traces(count: int) -> list[Trace]:
    return [generate(s) for s in range(GATE_SEED, GATE_SEED + count) if family(s) == "pages"]


def situations(trace: Trace) -> set[str]:
    state, seen = State(clock=trace.initial_clock), set()
    for step in trace.steps:
        done = model_step(state, step)
        if done.outcome is not None:
            seen |= {b for b in boundaries.met(state, step, done.outcome, done.state) if b.startswith("page_")}
        state = done.state
    return seen


def test_page_traces_produce_the_page_situations_on_their_own() -> None:
    seen: set[str] = set()
    for seed in range(40):
        seen |= situations(generate_pages(seed))
    wanted = {b for b in boundaries.BOUNDARIES if b.startswith("page_situation:")}
    assert wanted <= seen
    assert {"page_limit:converge_cancellation_page:1"} <= seen


@functools.cache
def control_passes(backend: str, count: int) -> bool:
    """The same traces pass on the unmutated backend (once per backend and window)."""
    return runner.run_traces(backend, page_traces(count), invariants=False).passed


def _caught(mutant: StorageMutant, backend: str, traces: list[Trace], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    with monkeypatch.context() as mp:
        mutant.apply(mp)
        summary = runner.run_traces(backend, traces, invariants=False)
    return [r.divergence.step["name"] for r in summary.failures if r.divergence and "name" in r.divergence.step]


@pytest.mark.parametrize("mutant", [m for m in PAGE_MUTANTS if m.layer == "sqlite"], ids=lambda m: m.name)
def test_generated_page_traces_catch_the_page_defect_on_sqlite(mutant: StorageMutant,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert control_passes("sqlite", 60)
    failing = _caught(mutant, "sqlite", page_traces(60), monkeypatch)
    assert failing and set(failing) == {"converge_cancellation_page"}, failing


@pytest.mark.postgres
@pytest.mark.parametrize("mutant", [m for m in PAGE_MUTANTS if m.layer == "postgres"], ids=lambda m: m.name)
def test_generated_page_traces_catch_the_page_defect_on_postgres(mutant: StorageMutant, pg_server: object,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert control_passes("postgres", 30)
    failing = _caught(mutant, "postgres", page_traces(30), monkeypatch)
    assert failing and set(failing) == {"converge_cancellation_page"}, failing
