"""Every model mutant of the manifest is reported by its named check with behavioural evidence.

The manifest (conformance/mutants) names, per mutant, the check that must catch it and the kind of
evidence: an invariant (INV-n, LIVE-1) or a contract (a postcondition of conformance/stateful/postconditions.py, a
write on a no-write outcome). Here the named check runs with the mutant planted, and the finding it
reports must be of that kind; the manifest as a whole admits only behavioural kinds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import Phase
from qlwf.conformance.checkers.explore import Config, dag_shapes, explore
from qlwf.conformance.mutants import BEHAVIOURAL, CHANGE_DETECTORS, CHECKS, LAYERS, MANIFEST, Mutant, by_check
from qlwf.conformance.mutants.manifest import problems
from qlwf.conformance.stateful.postconditions import transition_problems
from qlwf.model.state import State
from qlwf.model.system import apply

# The one-step shape first (it has the richest alphabet), then the most connected shapes: each mutant's
# witness sits in a small, specific situation.
SHAPES = (*dag_shapes(1), *(s for n in (3, 2) for s in reversed(dag_shapes(n))))
# The explorer's finding kinds as manifest evidence kinds.
EXPLORER_KINDS = {"invariant": "invariant", "LIVE-1": "invariant", "no-write": "contract", "postcondition": "contract"}
MODEL = by_check("explorer", "stateful")


def explorer_report(max_steps: int = 3) -> tuple[str, str] | None:
    runs = [explore(Config(max_steps=max_steps, stop_on_violation=True, shapes=SHAPES, incremental=incremental),
                    checker=transition_problems) for incremental in (True, False)]
    # the incremental invariant evaluation (the default) finds exactly what the full evaluation finds,
    # with the same traces, over the same shapes and counts
    report, full = runs
    assert [(f.shape, f.kind, f.message, f.trace_steps) for f in report.findings] == \
        [(f.shape, f.kind, f.message, f.trace_steps) for f in full.findings]
    assert [(s.shape, s.distinct_states, s.transitions) for s in report.shapes] == \
        [(s.shape, s.distinct_states, s.transitions) for s in full.shapes]
    if not report.findings:
        return None
    f = report.findings[0]
    return EXPLORER_KINDS[f.kind], f"explorer [{f.shape}] {f.kind}: {f.message}"


def stateful_report() -> tuple[str, str] | None:
    from support.stateful_run import WorkflowMachine, run_machine

    class Unrecorded(WorkflowMachine):
        coverage = None  # a mutant's behaviour is no coverage witness of the model

    try:  # a small budget, no shrinking: we only need to know that it fails
        run_machine(Unrecorded, max_examples=150, phases=[Phase.explicit, Phase.generate], derandomize=True,
                    database=None)
    except AssertionError as e:
        first = str(e).splitlines()[0]
        return ("invariant" if "INV-" in first or "LIVE-1" in first else "contract"), f"stateful: {first}"
    return None


@pytest.mark.parametrize("mutant", MODEL, ids=[m.name for m in MODEL])
def test_mutant_is_caught_by_its_check(mutant: Mutant, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    assert mutant.plant is not None
    mutant.plant(monkeypatch)
    found = explorer_report() if mutant.check == "explorer" else stateful_report()
    assert found, f"mutant {mutant.name} ({mutant.breaks}) survived {mutant.check}"
    kind, message = found
    assert kind == mutant.kind, f"{mutant.name}: {mutant.check} found {kind} evidence, the manifest names " \
                                f"{mutant.kind}: {message}"
    print(f"{mutant.name}: {message[:300]}")


@pytest.mark.parametrize("name, command", [("recovery_refuses_intent", "recover_attempt"),
                                           ("claim_ignores_intent", "claim_lease")])
def test_an_intent_mutant_leaves_malformed_arguments_to_its_command(name: str, command: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant breaks its one rule only: an attemptId that is no string (here unhashable) is still the
    command's own argument_invalid, not a crash of the mutant's lookup."""
    [mutant] = [m for m in MODEL if m.name == name]
    assert mutant.plant is not None
    mutant.plant(monkeypatch)
    out = apply(State(), {"name": command, "args": {"attemptId": ["wta:x"]}})
    assert out.error is not None and out.error.reason == "argument_invalid"


def test_the_manifest_counts_only_behavioural_checks() -> None:
    assert problems() == []
    assert BEHAVIOURAL.isdisjoint(CHANGE_DETECTORS)
    assert all(kinds <= BEHAVIOURAL for kinds in CHECKS.values())
    assert {m.layer for m in MANIFEST} == set(LAYERS)  # every layer has mutants


def test_a_change_detector_does_not_count() -> None:
    pinned = Mutant("probe", "some rule", "model rule", "explorer", "pinned count")
    wrong_kind = Mutant("probe2", "some rule", "schema", "schema-refusal:sqlite", "conformance")
    found = problems((pinned, wrong_kind, Mutant("probe", "", "nowhere", "eyeballing", "invariant")))
    assert found == ["probe: caught by 'pinned count', which is not a behavioural check",
                     "probe: explorer cannot fail with 'pinned count' evidence",
                     "probe2: schema-refusal:sqlite cannot fail with 'conformance' evidence",
                     "probe: duplicate name", "probe: unknown layer 'nowhere'", "probe: unknown check 'eyeballing'",
                     "probe: names no rule it breaks"]


def test_every_check_of_the_manifest_has_a_runner() -> None:
    """Each manifest check is run by one test module: model here, proofs in test_proofs.py, storage in
    test_storage_mutants.py (which asserts its own share)."""
    from qlwf.conformance.mutants import proof_layer, storage

    assert {m.name for m in MANIFEST} == {m.name for m in (*MODEL, *proof_layer.MUTANTS, *storage.MUTANTS)}
    assert {m.check for m in MODEL} <= {"explorer", "stateful"}
    assert {m.check for m in proof_layer.MUTANTS} == {"proofs"}
