"""Z3 proofs at a small bound, the encoding ↔ model cross-check, and mutant refutation."""

from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import replace

import pytest
import z3
from qlwf.conformance.mutants import Mutant, by_check
from qlwf.model.cancellation import accumulate_page, page_bounds_problem
from qlwf.proofs import crosscheck, pages, runner
from qlwf.proofs.encoding import Sys
from qlwf.proofs.invariants import INVARIANTS, NOT_ENCODED
from qlwf.proofs.mutants import Mutant as ProofMutant
from qlwf.proofs.mutants import RecoveryRefusesIntent
from qlwf.proofs.results import PROVED, VIOLATED, Result
from qlwf.proofs.rules import Transition
from qlwf.proofs.transitions import COMMANDS, Semantics

from qlwf.cli import prove as cmd_prove

BOUND = 3


@pytest.fixture(scope="module")
def results() -> list[Result]:
    return runner.run(runner.Options(bound=BOUND, depth=3))


def test_every_property_is_proved_at_a_small_bound(results: list[Result]) -> None:
    bad = [(r.name, r.result, r.detail) for r in results if r.result != PROVED]
    assert not bad, bad
    assert [r.name for r in results] == list(runner.ALL_PROPERTIES)
    assert all(r.queries > 0 for r in results if not r.name.startswith("TABLE-path"))


def test_every_invariant_is_encoded_or_listed_as_dropped() -> None:
    encoded = {i.name for i in INVARIANTS if re.fullmatch(r"INV-\d+", i.name)}
    assert encoded.isdisjoint(NOT_ENCODED)
    assert encoded | set(NOT_ENCODED) == {f"INV-{k}" for k in range(1, 32)}


@pytest.fixture(scope="module")
def report() -> crosscheck.Report:
    return crosscheck.run(seed=20240611, traces=40, min_transitions=2000, max_steps=4)


def test_crosscheck_agrees_with_the_model(report: crosscheck.Report) -> None:
    assert report.transitions >= 2000
    assert not report.mismatches, [(m.trace, m.index, m.command, m.problem) for m in report.mismatches[:5]]
    # every command disjunct was exercised, with acceptances and refusals
    assert set(COMMANDS) <= set(report.checked)
    assert sum(report.refusals.values()) >= 100
    for name in ("start_attempt", "record_running", "complete_attempt", "recover_attempt", "admit_task_attempt"):
        assert report.refusals[name] > 0 and report.checked[name] > report.refusals[name]


def test_crosscheck_can_fail() -> None:
    rep = crosscheck.run(seed=5, traces=200, semantics=RecoveryRefusesIntent, stop_on_mismatch=True, max_steps=3)
    assert any(m.command == "recover_attempt" for m in rep.mismatches)


class _LooseTime(Semantics):
    """advance_time leaves the timeout-request count unconstrained: a relation that is not a function."""

    def advance_time(self, pre: Sys, tag: str) -> Transition:
        t = super().advance_time(pre, tag)
        free = z3.Int(f"{tag}.free")
        steps = tuple(replace(s, ntr=z3.If(free > 0, s.ntr, s.ntr + free)) for s in t.post.steps)
        return Transition(t.name, t.args, t.guard, replace(t.post, steps=steps))


def test_crosscheck_rejects_a_relation_admitting_other_post_states() -> None:
    rep = crosscheck.run(seed=1, traces=20, semantics=_LooseTime, stop_on_mismatch=True)
    assert rep.mismatches and rep.mismatches[0].problem == "the relation admits another post-state as well"


PROOF_MUTANTS = by_check("proofs")  # the manifest's proof-layer entries (encodings and proof-side tables)


@pytest.mark.parametrize("entry", PROOF_MUTANTS, ids=[m.name for m in PROOF_MUTANTS])
def test_mutant_is_refuted_with_a_readable_counterexample(entry: Mutant) -> None:
    assert entry.kind == "proof"
    mutant: ProofMutant = entry.subject
    ref = runner.refute(mutant, bound=BOUND, depth=7)
    assert ref.refuted, (mutant.name, [r.name for r in ref.violated], ref.trace is not None, ref.replayed)
    first = ref.violated[0]
    assert first.name in mutant.refuted_by and first.result == VIOLATED
    assert first.counterexample is not None
    text = json.dumps(first.counterexample)  # JSON-ready
    assert any(word in text for word in ('"status"', "failures"))
    if mutant.witness is not None:
        assert ref.trace is not None and ref.replayed
        steps = ref.trace["trace"]
        assert steps and all({"step", "command", "args", "pre", "post"} <= set(s) for s in steps)
        assert all(s["command"] in COMMANDS for s in steps)


def test_page_encoding_matches_accumulate_page() -> None:
    rng = random.Random(3)
    for _ in range(300):
        outcomes = [{"status": rng.choice(("terminal", "blocked", "locked", "raced", "failed")),
                     "settledAttempts": 0} for _ in range(rng.randint(0, 12))]
        for o in outcomes:
            if o["status"] in ("terminal", "blocked"):
                o["settledAttempts"] = rng.randint(0, 128)
        got = pages.concrete_counters(outcomes)
        assert got == accumulate_page(outcomes)
        scanned, runs, attempts, blocked = got
        limit = max(1, scanned)
        assert page_bounds_problem(limit, {"scanned": scanned, "settledRuns": runs, "settledAttempts": attempts,
                                           "blocked": blocked, "hasMore": False}) is None


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cmd_prove.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["prove", *argv])
    return int(args.func(args))


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["--bound", "2", "--only", "TABLE-*", "--only", "PAGE-bounds", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {o["name"] for o in out} == {*runner.TABLE_PROPERTIES, "PAGE-bounds"}
    assert all(set(o) == {"name", "result", "bound", "seconds"} and o["result"] == PROVED for o in out)


def test_cli_fails_on_a_violation(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["--bound", "2", "--only", "INV-15", "--mutant", "admission-ignores-intent"]) == 1
    out = capsys.readouterr().out
    assert "INV-15" in out and "violated" in out and "admit_task_attempt" in out
    assert _cli(["--only", "NO-SUCH-PROPERTY"]) == 2
