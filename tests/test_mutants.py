"""Every mutant of tests/mutants.py is reported by the explorer or by the stateful machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import Phase
from mutants import MUTANTS, Mutant
from qlwf.model.explore import Config, dag_shapes, explore
from support.oracle import transition_problems

# The one-step shape first (it has the richest alphabet), then the most connected shapes: each mutant's
# witness sits in a small, specific situation.
SHAPES = (*dag_shapes(1), *(s for n in (3, 2) for s in reversed(dag_shapes(n))))


def explorer_report(max_steps: int = 3) -> str | None:
    report = explore(Config(max_steps=max_steps, stop_on_violation=True, shapes=SHAPES), checker=transition_problems)
    findings = report.findings
    return f"explorer [{findings[0].shape}] {findings[0].kind}: {findings[0].message}" if findings else None


def stateful_report() -> str | None:
    from test_stateful import WorkflowMachine, run_machine

    class Unrecorded(WorkflowMachine):
        coverage = None  # a mutant's behaviour is no coverage witness of the model

    try:  # a small budget, no shrinking: we only need to know that it fails
        run_machine(Unrecorded, max_examples=150, phases=[Phase.explicit, Phase.generate], derandomize=True,
                    database=None)
    except AssertionError as e:
        return f"stateful: {str(e).splitlines()[0]}"
    return None


def detect(mutant: Mutant) -> str | None:
    checkers = [explorer_report, stateful_report]
    if mutant.first == "stateful":
        checkers.reverse()
    for check in checkers:
        found = check()
        if found:
            return found
    return None


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(mutant: Mutant, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    mutant.apply(monkeypatch)
    found = detect(mutant)
    assert found, f"mutant {mutant.name} ({mutant.breaks}) survived the explorer and the stateful machine"
    print(f"{mutant.name}: {found[:300]}")
