"""Seeded-random and Hypothesis-driven command sequences over several workflows.

Arguments are drawn mostly from the current model state (existing ids, live fences, candidates);
a share of steps is deliberately wrong (unknown ids, stale fences, malformed arguments, refused
transitions) so that error paths are compared as well. The generator runs the model as it goes,
so every choice can depend on what the previous steps did; the output is an unrecorded `Trace`.

The same generator is driven either by `random.Random(seed)` (`generate(seed)`) or by Hypothesis
draws (`traces()` strategy), through the small `Chooser` interface. Trace files written by other
harnesses (the stateful tests) are replayed with `load_trace_files`.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st
from qlwf.conformance.generate.base import (
    DELAYS,
    DURATIONS,
    STEP_KEYS,
    WORKERS,
    Chooser,
    DrawChooser,
    Generator,
    GeneratorConfig,
    RandomChooser,
)
from qlwf.conformance.traces.format import Trace, load
from qlwf.model.memo import trusting_record_identity

_Generator = Generator  # its name before it moved to generators_base.py (tests/model/test_model_run.py)

__all__ = ["BOUNDARY_FAMILY", "DELAYS", "DURATIONS", "FAMILY_PERIOD", "PAGE_FAMILY", "STEP_KEYS", "WORKERS",
           "Chooser", "DrawChooser", "Generator", "GeneratorConfig", "RandomChooser", "family", "generate",
           "generate_random", "load_trace_files", "traces"]


# Targeted families, chosen by the seed: every FAMILY_PERIOD consecutive seeds hold one boundary trace
# (conformance/generate/boundary.py; it admits a 128-step plan, the costly part on PostgreSQL) and two
# page traces (generators_pages.py); the other seeds are random traces (generators_base.Generator).
FAMILY_PERIOD = 16
BOUNDARY_FAMILY, PAGE_FAMILY = frozenset({0}), frozenset({4, 12})


def family(seed: int) -> str:
    rest = seed % FAMILY_PERIOD
    return "boundary" if rest in BOUNDARY_FAMILY else "pages" if rest in PAGE_FAMILY else "random"


def generate(seed: int, config: GeneratorConfig | None = None) -> Trace:
    """A reproducible trace of the seed's family: the same seed always gives the same steps."""
    # A generator's States share the records a step did not write and nothing changes a record in
    # place (model/state.py; drift steps patch copies), so the model's loads may answer by identity
    # (decisions ); tests/model/test_model_run.py compares the run with one from scratch.
    with trusting_record_identity():
        return _generate(seed, config)


def _generate(seed: int, config: GeneratorConfig | None) -> Trace:
    kind = family(seed)
    if kind == "boundary":
        from qlwf.conformance.generate.boundary import generate_boundary

        return generate_boundary(seed, config)
    if kind == "pages":
        from qlwf.conformance.generate.pages import generate_pages

        return generate_pages(seed, config)
    return generate_random(seed, config)


def generate_random(seed: int, config: GeneratorConfig | None = None) -> Trace:
    """A reproducible random trace of the ordinary generator."""
    g = Generator(RandomChooser(seed), config or GeneratorConfig(), f"generated-{seed}")
    return g.run(str(seed))


@st.composite
def traces(draw: st.DrawFn, config: GeneratorConfig | None = None) -> Trace:
    """Hypothesis strategy producing the same kind of traces as `generate`, shrinkable step by step."""
    g = Generator(DrawChooser(draw), config or GeneratorConfig(), "hypothesis")
    return g.run("h")


def load_trace_files(directory: str | Path, pattern: str = "*.json") -> list[Trace]:
    """Traces written by other harnesses (e.g. the stateful tests) in the same format, sorted by name."""
    return [load(p) for p in sorted(Path(directory).glob(pattern))]
