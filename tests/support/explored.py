"""One exploration per session, shared by the manifest and the coverage tests."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from qlwf.conformance.checkers.explore import Config, ExploreReport, explore
from qlwf.conformance.stateful.coverage import witnesses
from qlwf.conformance.stateful.postconditions import transition_problems
from qlwf.model.state import State

MANIFEST = Path(__file__).resolve().parents[2] / "model" / "explore_manifest.json"


def load_manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


def observe(state: State, step: dict[str, Any], outcome: Any) -> set[str]:
    return witnesses(state, step, outcome.rules, outcome.result)


@functools.cache
def explored(max_steps: int) -> tuple[ExploreReport, frozenset[str]]:
    """The exploration up to `max_steps` (invariants, LIVE-1 and the harness's command postconditions on
    every transition) and the row witnesses its transitions showed. Every checked state is also
    evaluated in full and compared with the incremental evaluation (Config.cross_check)."""
    report = explore(Config(max_steps=max_steps, cross_check=True), observer=observe,
                     jobs=min(4, os.cpu_count() or 1), checker=transition_problems)
    return report, frozenset(report.observed)
