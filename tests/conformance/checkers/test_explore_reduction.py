"""The explorer's partial-order reduction (Config.reduction = "sleep", docs/explorer-reduction.md) is sound:
it explores the same identities, finds the same violations, quiescent states and LIVE-1 verdicts as the full
search, on every manifest shape up to K = 3 (one Run: nothing is independent, the searches are the same), on
multi-workflow scopes (where it skips choices), and with model mutants planted.
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from qlwf.conformance.checkers import explore as E
from qlwf.conformance.mutants import Mutant, by_check
from qlwf.conformance.stateful.postconditions import transition_problems
from qlwf.model import tables as T
from qlwf.model.state import State
from qlwf.model.system import apply

from qlwf.cli import explore as cmd_explore


@dataclass
class Seen:
    """Per explored identity: quiescent or not, and whether its LIVE-1 drain failed."""

    quiescent: dict[Any, bool] = field(default_factory=dict)
    live1_fails: dict[Any, bool] = field(default_factory=dict)


def quiescent(state: State) -> bool:
    """Nothing left to do: every Run terminal and no attempt active."""
    return all(r["status"] in T.TERMINAL_RUN for r in state.runs.values()) and \
        not any(a["status"] in T.ACTIVE_ATTEMPT for a in state.attempts.values())


def recorded(cfg: E.Config, monkeypatch: pytest.MonkeyPatch,
             checker: E.Checker | None = None) -> tuple[E.ExploreReport, Seen]:
    """Explore in this process, recording every explored state's identity, quiescence and LIVE-1 verdict."""
    seen = Seen()
    check = E.search._check_state

    def recording(state: State, c: E.Config, report: E.ShapeReport,
                  liveness: E.LivenessMemo) -> list[tuple[str, str, list[E.TraceStep]]]:
        found = check(state, c, report, liveness)
        key = (report.shape, liveness.identity(state))
        seen.quiescent[key] = quiescent(state)
        seen.live1_fails[key] = any(kind == "LIVE-1" for kind, _, _ in found)
        return found

    with monkeypatch.context() as m:
        m.setattr(E.search, "_check_state", recording)
        report = E.explore(cfg, checker=checker)
    return report, seen


def assert_same_verdicts(cfg: E.Config, monkeypatch: pytest.MonkeyPatch) -> tuple[E.ExploreReport, E.ExploreReport]:
    full, full_seen = recorded(cfg, monkeypatch)
    reduced, reduced_seen = recorded(replace(cfg, reduction="sleep"), monkeypatch)
    assert reduced_seen.quiescent == full_seen.quiescent  # the same identities, the same quiescent ones
    assert reduced_seen.live1_fails == full_seen.live1_fails
    for f, r in zip(full.shapes, reduced.shapes, strict=True):
        assert (r.shape, r.distinct_states, r.depth) == (f.shape, f.distinct_states, f.depth)
        assert sorted({x.kind for x in r.findings}) == sorted({x.kind for x in f.findings})
        assert r.transitions <= f.transitions
    return full, reduced


def coupling(_n: int) -> E.Alphabet:
    return E.COUPLING


def pair(_n: int) -> E.Alphabet:
    return E.PAIR


def test_with_one_run_nothing_is_independent_and_the_search_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    full, reduced = assert_same_verdicts(E.Config(max_steps=3, shapes=E.scope_shapes(3)), monkeypatch)
    assert E.manifest_counts(reduced)["shapes"] == E.manifest_counts(full)["shapes"]
    assert all(s.slept == 0 and s.reexpanded == 0 for s in reduced.shapes)


@pytest.mark.parametrize("cfg", [
    E.Config(max_steps=1, shapes=tuple(E.dag_shapes(1)), workflows=2, alphabet=coupling),
    E.Config(max_steps=1, shapes=tuple(E.dag_shapes(1)), workflows=2, alphabet=pair, max_depth=7),
    E.Config(max_steps=2, shapes=tuple(E.dag_shapes(2)), workflows=2, alphabet=coupling, max_depth=6),
    E.Config(max_steps=1, shapes=tuple(E.dag_shapes(1)), workflows=3, alphabet=coupling, max_depth=6),
], ids=["2x1-coupling", "2x1-pair-depth7", "2x2-coupling-depth6", "3x1-coupling-depth6"])
def test_with_several_runs_the_reduction_skips_choices_and_keeps_every_verdict(
        cfg: E.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    full, reduced = assert_same_verdicts(cfg, monkeypatch)
    assert reduced.transitions < full.transitions and sum(s.slept for s in reduced.shapes) > 0


# Explorer mutants the two-Run scope below catches, one per kind of evidence, and one that breaks the isolation
# of Runs the independence relation rests on (the frontier lists the Runs being cancelled).
CAUGHT = ("convergence_blocks_released_claim", "completion_ignores_intent", "requeue_keeps_epoch",
          "start_sets_started_at", "frontier_lists_cancelling_runs")
EXPLORER_MUTANTS = [m for m in by_check("explorer", "stateful") if m.name in CAUGHT]


@pytest.mark.parametrize("mutant", EXPLORER_MUTANTS, ids=[m.name for m in EXPLORER_MUTANTS])
def test_a_planted_mutant_is_caught_alike(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Runs of the one-step shape: whatever the full search finds (kinds), the reduced one finds too."""
    assert mutant.plant is not None
    mutant.plant(monkeypatch)
    cfg = E.Config(max_steps=1, shapes=tuple(E.dag_shapes(1)), workflows=2, alphabet=pair, max_depth=7)
    found: dict[str, set[str]] = {}
    for reduction in E.REDUCTIONS:
        report = E.explore(replace(cfg, reduction=reduction), checker=transition_problems)
        found[reduction] = {f.kind for f in report.findings}
    assert found["none"] and found["sleep"] == found["none"]


def test_the_independence_relation() -> None:
    """Commands on different Runs are independent; a time step, the convergence page and two commands on
    one Run are not."""
    shape = E.dag_shapes(1)[0]
    state = State(clock=E.INITIAL_CLOCK)
    for run_id, plan_id in E.workflow_ids(2):
        plan = E.build_plan(run_id, plan_id, E.shape_needs(shape), E.INITIAL_CLOCK)
        state = apply(state, {"name": "admit_workflow", "args": {"plan": plan}}).state
    offered = E.actions(state, E.FULL)
    runs: Callable[[str], set[str | None]] = lambda name: {  # noqa: E731
        E.action_run(state, a) for a in offered if a.step.get("name") == name}
    assert runs("advance_frontier") == {"run-x", "run-y"}
    assert runs("converge_cancellation_page") == {None}
    assert E.independent("run-x", "run-y") and not E.independent("run-x", "run-x")
    assert not E.independent(None, "run-x") and not E.independent(None, None)


def test_qlwf_explore_takes_the_reduction_and_the_workflows() -> None:
    parser = argparse.ArgumentParser()
    cmd_explore.register(parser.add_subparsers())
    counts = []
    for reduction in E.REDUCTIONS:
        args = parser.parse_args(["explore", "--shape", "1:-", "--workflows", "2", "--reduction", reduction,
                                  "--depth", "4", "--json", "--jobs", "1"])
        out = io.StringIO()
        assert cmd_explore.run(args, out) == 0
        counts.append(json.loads(out.getvalue()))
    full, reduced = counts
    assert reduced["distinct_states"] == full["distinct_states"] and reduced["transitions"] < full["transitions"]
    assert reduced["slept"] > 0 and "slept" not in full
