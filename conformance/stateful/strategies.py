"""Hypothesis strategies for workflow plans (records.md §3 harness alphabet, §6.1 plans).

A plan is described by its dependency map {stepKey: needs}; `signed_plan` turns it into a signed,
normalized plan with `qlwf.model.records.sign_plan` (through `qlwf.conformance.checkers.explore.build_plan`).
Shapes: chains, diamonds, fan-out/fan-in, arbitrary DAGs of 1..8 steps, and now and then a large
DAG of up to 128 steps (MAX_WORKFLOW_STEPS).
"""

from __future__ import annotations

import random

from hypothesis import strategies as st
from qlwf.conformance.checkers.explore import build_plan
from qlwf.model import tables as T
from qlwf.model.records import Record

Needs = dict[str, tuple[str, ...]]

# RESOURCE_ID-shaped step keys (harness alphabet); varied so that canonical key order varies too.
STEP_KEYS = st.from_regex(r"[a-z][a-z0-9-]{0,7}", fullmatch=True)


def _named(order: list[str], edges: set[tuple[int, int]]) -> Needs:
    return {k: tuple(sorted(order[a] for a, b in edges if b == j)) for j, k in enumerate(order)}


@st.composite
def step_names(draw: st.DrawFn, n: int) -> list[str]:
    return draw(st.lists(STEP_KEYS, min_size=n, max_size=n, unique=True))


@st.composite
def chains(draw: st.DrawFn, max_steps: int = 8) -> Needs:
    n = draw(st.integers(1, max_steps))
    return _named(draw(step_names(n)), {(i, i + 1) for i in range(n - 1)})


@st.composite
def diamonds(draw: st.DrawFn, max_width: int = 6) -> Needs:
    """source -> w middle steps -> sink."""
    w = draw(st.integers(1, max_width))
    names = draw(step_names(w + 2))
    return _named(names, {(0, i) for i in range(1, w + 1)} | {(i, w + 1) for i in range(1, w + 1)})


@st.composite
def fans(draw: st.DrawFn, max_width: int = 7) -> Needs:
    """fan-out (one source, w dependents) or fan-in (w sources, one sink)."""
    w = draw(st.integers(1, max_width))
    names = draw(step_names(w + 1))
    if draw(st.booleans()):
        return _named(names, {(0, i) for i in range(1, w + 1)})
    return _named(names, {(i, 0) for i in range(1, w + 1)})


@st.composite
def small_dags(draw: st.DrawFn, max_steps: int = 8) -> Needs:
    """Any DAG: edges only go from a lower to a higher position, each drawn independently."""
    n = draw(st.integers(1, max_steps))
    names = draw(step_names(n))
    edges = {(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.booleans())}
    return _named(names, edges)


@st.composite
def large_dags(draw: st.DrawFn) -> Needs:
    """9..128 steps with one source (every later step needs 1..3 earlier ones): long and narrow, so that
    the number of simultaneously ready steps stays small. Edges come from a seeded generator (drawing
    thousands of booleans would not shrink anyway)."""
    n = draw(st.sampled_from([9, 16, 33, 64, T.MAX_WORKFLOW_STEPS]))
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    names = [f"s{i:03d}" for i in range(n)]
    rnd.shuffle(names)
    edges = {(i, j) for j in range(1, n) for i in rnd.sample(range(j), min(j, rnd.randint(1, 3)))}
    return _named(names, edges)


def dag_needs(max_steps: int = 8, large: bool = True) -> st.SearchStrategy[Needs]:
    """Mostly 1..8-step shapes; now and then (about 1 in 50 draws) 9..128 steps."""
    small = [chains(max_steps), diamonds(max(1, max_steps - 2)), fans(max(1, max_steps - 1)), small_dags(max_steps)]
    return st.one_of(*(small * 12), *([large_dags()] if large else []))


def signed_plan(run_id: str, plan_id: str, needs: Needs, planned_at_ms: int) -> Record:
    return build_plan(run_id, plan_id, needs, planned_at_ms)


@st.composite
def plans(draw: st.DrawFn, run_id: str = "run-0001", plan_id: str = "plan-0001",
          planned_at_ms: int = 1_000_000) -> Record:
    return signed_plan(run_id, plan_id, draw(dag_needs()), planned_at_ms)
