"""One exploration per test run, shared by the manifest and the coverage tests (and, under xdist,
by every worker: the first to need it explores, the others load its result)."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import pickle
from pathlib import Path
from typing import Any

from qlwf.conformance.checkers.explore import Config, ExploreReport, explore
from qlwf.conformance.stateful.coverage import witnesses
from qlwf.conformance.stateful.postconditions import transition_problems
from qlwf.model.state import State

MANIFEST = Path(__file__).resolve().parents[2] / "conformance" / "checkers" / "explore_manifest.json"


def load_manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))
    return manifest


def observe(state: State, step: dict[str, Any], outcome: Any) -> set[str]:
    return witnesses(state, step, outcome.rules, outcome.result)


# The directory every worker of this test run shares (set by conftest.py from pytest's base temp);
# None: explore in this process.
SHARED_DIR: Path | None = None


@functools.cache
def explored(max_steps: int) -> tuple[ExploreReport, frozenset[str]]:
    """The exploration up to `max_steps` (invariants, LIVE-1 and the harness's command postconditions on
    every transition) and the row witnesses its transitions showed. Every checked state is also
    evaluated in full and compared with the incremental evaluation (Config.cross_check)."""
    if SHARED_DIR is None:
        return _explore(max_steps)
    path = SHARED_DIR / f"explored-{max_steps}.pickle"
    with (SHARED_DIR / f"explored-{max_steps}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the one exploring
        if path.is_file():
            loaded: tuple[ExploreReport, frozenset[str]] = pickle.loads(path.read_bytes())
            return loaded
        result = _explore(max_steps)
        partial = path.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(result))
        partial.replace(path)
        return result


def _explore(max_steps: int) -> tuple[ExploreReport, frozenset[str]]:
    report = explore(Config(max_steps=max_steps, cross_check=True), observer=observe,
                     jobs=min(4, os.cpu_count() or 1), checker=transition_problems)
    return report, frozenset(report.observed)
