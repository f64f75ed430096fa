"""The gate: three-valued verdicts resting on evidence, exit codes, and the reports CI consumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from qlwf.gate import checks
from qlwf.gate.verdict import (
    EXIT_FAILED,
    EXIT_PASSED,
    EXIT_UNKNOWN,
    Check,
    CheckResult,
    Evidence,
    NoEvidence,
    exit_code,
    judge,
    load_floors,
    run_checks,
    write_json,
    write_junit,
)

REPO = Path(__file__).resolve().parents[3]

FLOORS = {"a": {"n": 2}, "b": {"n": 2}, "c": {"n": 2}, "d": {"n": 2}, "e": {"n": 2}, "f": {"n": 2}}


def _passing(_o: dict[str, Any]) -> Evidence:
    return Evidence("fine", {"n": 3})


def _failing(_o: dict[str, Any]) -> Evidence:
    return Evidence("looked at 3", {"n": 3}, ("broken invariant\nstep 3: details",))


def _thin(_o: dict[str, Any]) -> Evidence:
    return Evidence("looked at 1", {"n": 1})


def _no_server(_o: dict[str, Any]) -> Evidence:
    raise NoEvidence("no server")


def _crashing(_o: dict[str, Any]) -> Evidence:
    raise KeyError("boom")


def _silent(_o: dict[str, Any]) -> Evidence:
    return Evidence("reported nothing", {})


def test_verdicts_rest_on_evidence(tmp_path: Path) -> None:
    results = run_checks([Check("a", "", _passing), Check("b", "", _failing), Check("c", "", _thin),
                          Check("d", "", _no_server), Check("e", "", _crashing), Check("f", "", _silent),
                          Check("g", "", _passing)], {}, floors=FLOORS)
    assert [r.status for r in results] == ["passed", "failed", "unknown", "unknown", "failed", "unknown", "unknown"]
    assert results[1].summary == "broken invariant" and results[1].details == ["step 3: details"]
    assert results[2].gaps == ["n: 1 < floor 2"]
    assert results[3].gaps == ["no evidence: no server"]
    assert "KeyError" in results[4].summary
    assert results[5].gaps == ["n: not reported (floor 2)"]
    assert results[6].gaps == ["no evidence floor is defined for this check and profile"]
    assert exit_code(results) == EXIT_FAILED
    assert exit_code([r for r in results if r.status != "failed"]) == EXIT_UNKNOWN
    assert exit_code(results[:1]) == EXIT_PASSED

    write_json(results, tmp_path / "g.json")
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["verdict"] == "failed"
    assert [c["name"] for c in report["checks"]] == list("abcdefg")
    assert report["checks"][2]["evidence"] == {"n": 1} and report["checks"][2]["floors"] == {"n": 2}
    write_junit(results, tmp_path / "g.xml")
    suite = ET.parse(tmp_path / "g.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "7", "2", "4", "0")
    case = suite.find("testcase[@name='c']")
    assert case is not None and case.find("error[@type='unknown']") is not None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props == {"evidence.n": "1", "floor.n": "2"}


def test_the_junit_report_stays_well_formed_whatever_a_check_says(tmp_path: Path) -> None:
    """Decisions Q-123: a failing check whose details held a driver's coloured stderr (ESC), a NUL or a lone
    surrogate made the whole report not well-formed XML, so CI's JUnit reader lost every result."""
    said = "driver: \x1b[31mred\x1b[0m, \x00, \x07, \udcff; tab\tand é✓ stay"
    results = [CheckResult("exec-sqlite", "failed", 1.0, said, details=[said]),
               CheckResult("faults-sqlite", "unknown", 1.0, said, gaps=[said], evidence={"k\x01": 3})]
    write_junit(results, tmp_path / "g.xml")
    suite = ET.parse(tmp_path / "g.xml").getroot()
    shown = "driver: \\x1b[31mred\\x1b[0m, \\x00, \\x07, \\udcff; tab\tand é✓ stay"
    failure, error = suite.find("testcase/failure"), suite.find("testcase/error")
    assert failure is not None and error is not None
    assert failure.get("message") == failure.text == error.get("message") == error.text == shown
    assert {p.get("name"): p.get("value") for p in suite.iter("property")} == {"evidence.k\\x01": "3"}


def test_a_gap_the_check_reports_makes_it_unknown() -> None:
    assert judge(Evidence("s", {"n": 5}, gaps=("a property list differs",)), {"n": 1}) == (
        "unknown", ["a property list differs"])
    assert judge(Evidence("s", {"n": 5}, problems=("x",), gaps=("g",)), {"n": 1})[0] == "failed"


def test_skip_leaves_a_leg_out_and_says_so() -> None:
    results = run_checks([Check("a", "", _passing), Check("d", "", _no_server, leg="postgres")], {},
                         floors=FLOORS, skip=frozenset({"postgres"}))
    assert [r.status for r in results] == ["passed", "skipped"]
    assert results[1].summary == "skipped by request (--skip postgres)"
    assert exit_code(results) == EXIT_PASSED
    assert exit_code(results[1:]) == EXIT_UNKNOWN  # a gate that ran nothing verified nothing


def test_every_check_has_floors_in_both_profiles() -> None:
    floors = load_floors()
    for profile in ("quick", "full"):
        for check in checks.CHECKS:
            assert floors[profile].get(check.name), f"{profile}/{check.name} has no evidence floor"


def test_conform_with_no_traces_is_unknown_not_passed() -> None:
    evidence = checks._conformance("sqlite", False, 0, 1)
    status, gaps = judge(evidence, load_floors()["quick"]["conform-sqlite"])
    assert status == "unknown" and any(g.startswith("traces: 0 <") for g in gaps)


def test_conform_without_an_invariant_checker_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from qlwf.conformance.lockstep import runner

    monkeypatch.setattr(runner, "load_invariant_check", lambda: None)
    evidence = checks._conformance("sqlite", False, 2, 1)
    assert evidence.counts["invariant_checks"] == 0
    status, gaps = judge(evidence, load_floors()["quick"]["conform-sqlite"])
    assert status == "unknown" and any(g.startswith("invariant_checks: 0 <") for g in gaps)


def test_proofs_with_a_partial_property_list_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from qlwf.proofs import runner
    from qlwf.proofs.runner import ALL_PROPERTIES

    class Proved:
        def __init__(self, name: str) -> None:
            self.name, self.result = name, "proved"

    monkeypatch.setattr(runner, "run", lambda _options: [Proved(n) for n in ALL_PROPERTIES[1:]])
    evidence = checks.proofs({"quick": True})
    assert not evidence.problems and evidence.gaps and ALL_PROPERTIES[0] in evidence.gaps[0]


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_missing_postgres_server_is_unknown(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    """Every check of the postgres leg, through the registry's provisioner: no evidence, and under CI
    the message says the machine must provide PostgreSQL."""
    from qlwf.conformance.backends import postgres
    from qlwf.conformance.provision import PostgresUnavailable

    def unavailable() -> None:
        raise PostgresUnavailable("no binaries")

    monkeypatch.setattr(postgres, "shared_server", unavailable)
    monkeypatch.setenv("CI", ci)
    leg = [c for c in checks.CHECKS if c.leg == "postgres"]
    assert [c.name for c in leg] == ["conform-postgres", "concurrency-postgres", "faults-postgres"]
    for check in leg:
        with pytest.raises(NoEvidence, match="no binaries") as info:
            check.run({"quick": True})
        assert ("CI=true" in str(info.value)) == (ci == "true")


def test_check_command_exit_codes(tmp_path: Path) -> None:
    from qlwf.cli.entry import main

    assert main(["check", "--only", "spec-vectors", "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["checks"][0]["status"] == "passed"
    assert main(["check", "--only", "no-such-check"]) == 2
    for jobs in ("1", "2"):  # two lanes, no server: this process claims checks beside the forked lane
        assert main(["check", "--only", "spec-vectors", "--only", "oracle-examples", "--jobs", jobs,
                     "--json", str(tmp_path / f"j{jobs}.json")]) == 0
    assert [c["name"] for c in json.loads((tmp_path / "j2.json").read_text())["checks"]] == [
        "spec-vectors", "oracle-examples"]


def test_a_broken_vector_fails_even_under_python_O() -> None:
    program = ("import sys, qlwf.gate.vectors as v; k = next(iter(v.EXPECTED)); v.EXPECTED[k] = 'wrong'; "
               "from qlwf.cli.entry import main; sys.exit(main(['check', '--only', 'spec-vectors']))")
    out = subprocess.run([sys.executable, "-O", "-c", program], capture_output=True, text=True, timeout=120,
                         check=False, env={**os.environ})
    assert out.returncode == EXIT_FAILED, out.stdout + out.stderr
    assert "spec-vectors  failed" in out.stdout


def test_the_checks_without_a_server_pass_under_python_O(tmp_path: Path) -> None:
    """Before Q-112 oracle-examples failed under -O: the example builder ran its scenario's commands
    inside `assert` statements, which -O removes together with the commands."""
    out = subprocess.run([sys.executable, "-O", "-m", "qlwf.cli", "check", "--only", "spec-vectors", "--only",
                          "oracle-examples", "--jobs", "1"], capture_output=True, text=True, timeout=300,
                         check=False, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


# Calls an `assert` may make: builtins and helpers that compute and change nothing.
PURE_IN_ASSERT = frozenset({"isinstance", "len", "tuple", "list", "set", "sorted", "all", "any", "type", "fields",
                            "zip", "repr", "str"})


def test_no_product_assert_calls_anything_that_could_act() -> None:
    """`python -O` strips asserts: one that calls a command (or anything else that acts) changes what the
    program does (decisions Q-112). An assert in the product code calls nothing but PURE_IN_ASSERT."""
    import ast

    offenders = []
    for package in ("qlwf", "model", "impl", "conformance", "proofs", "examples"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if not isinstance(node, ast.Assert):
                    continue
                calls = [c.func for c in ast.walk(node.test) if isinstance(c, ast.Call)]
                named = [f.id if isinstance(f, ast.Name) else ast.unparse(f) for f in calls]
                if any(name not in PURE_IN_ASSERT for name in named):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node.test)[:100]}")
    assert offenders == []


def test_the_coverage_floor_is_every_reachable_rule_row() -> None:
    from qlwf.conformance.lockstep.coverage import rule_rows, unreachable_in_v1

    reachable = [r for r in rule_rows() if not unreachable_in_v1(r)]
    floors = load_floors()
    for profile in ("quick", "full"):
        for check in ("conform-sqlite", "conform-postgres", "exec-sqlite"):
            assert floors[profile][check]["rule_rows_covered"] == len(reachable)


def _conformance_with_planted_fault(fail_fast: bool) -> tuple[bool, dict[str, int]]:
    from qlwf.conformance import mutants

    from qlwf.gate.selftest import _Assign

    entry = next(m for m in mutants.MANIFEST if m.name == "sqlite-step-key-unique-across-runs")
    assert entry.plant is not None
    entry.plant(_Assign())  # in a forked process: the fault dies with it
    evidence = checks._conformance("sqlite", True, 30, 1, jobs=1, fail_fast=fail_fast)
    return bool(evidence.problems), dict(evidence.counts)


def test_fail_fast_runs_no_generated_trace_once_the_corpus_diverges() -> None:
    """The self-test's fail_fast: the corpus settles a red verdict; without it the generated traces run too."""
    import concurrent.futures
    import multiprocessing

    def in_a_fresh_process(fail_fast: bool) -> tuple[bool, dict[str, int]]:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            return pool.submit(_conformance_with_planted_fault, fail_fast).result()

    (fast_failed, fast), (slow_failed, slow) = in_a_fresh_process(True), in_a_fresh_process(False)
    assert fast_failed and slow_failed
    assert fast["traces"] == fast["corpus_traces"] > 0
    assert slow["traces"] == slow["corpus_traces"] + 30


def test_the_gate_explorer_checks_every_transition_against_its_postconditions(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """completion_ignores_intent breaks no invariant the explorer reaches at K ≤ 3: without the
    postconditions the gate would only see the pinned counts move. With them it shows the transition."""
    from qlwf.conformance.mutants.manifest import by_name

    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    mutant = by_name("completion_ignores_intent")
    assert mutant.plant is not None
    mutant.plant(monkeypatch)
    evidence = checks.explorer_manifest({"quick": True})
    assert evidence.problems, "the planted fault must fail the gate's explorer"
    first = evidence.problems[0]
    assert "kind='postcondition'" in first and "task-attempts.md §7 requires cancelled" in first, first
    assert list(tmp_path.glob("*.json")), "the counterexample is written as a replayable trace"


def test_the_gate_crash_check_fails_on_a_store_whose_commands_are_not_atomic(monkeypatch: pytest.MonkeyPatch) -> None:
    """faults-sqlite as the gate runs it, not only its harness: a store that commits after each event
    leaves a partial write at the first crash point after that commit."""
    from qlwf.gate.selftest import plant_commits_each_event

    (check,) = [c for c in checks.CHECKS if c.name == "faults-sqlite"]
    assert not check.run({"quick": True}).problems
    plant_commits_each_event(monkeypatch, "sqlite")
    problems = check.run({"quick": True}).problems
    crashes = [p for p in problems if p.startswith("crash injection on ")]
    assert crashes and "partial write" in crashes[0], problems
