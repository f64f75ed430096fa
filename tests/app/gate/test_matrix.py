"""The ADR matrix is complete: every ADR-0226/0228 decision section → clauses → invariants → proof or test.

The clause table is data (model/adr_clauses.json, read by docs/generate.py for docs/matrix.md). It
fails here when a clause has no invariant, an invariant has neither a proof property nor a test
naming it, a decision section of an ADR has no clause, or the table's sections drift from the ADR
text in ../shared/adr. Two invariants the proofs do not encode (INV-5, INV-7) get their targeted
tests here: a state that breaks exactly them is reported by exactly them.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path

import pytest
from qlwf.conformance.traces.format import load, model_step
from qlwf.model import clauses
from qlwf.model.invariants import INVARIANTS, check_invariants
from qlwf.model.state import State
from qlwf.proofs.invariants import INVARIANTS as ENCODED
from qlwf.proofs.invariants import NOT_ENCODED
from qlwf.proofs.runner import ALL_PROPERTIES

from qlwf.gate.checks import load_script

REPO = Path(__file__).resolve().parents[3]
ADR_DIR = REPO.parent / "shared" / "adr"
generate = load_script(REPO / "docs" / "generate.py", "qlwf_docs_generate_matrix")


def problems(table: clauses.ClauseTable, proved: set[str], named: dict[str, list[str]]) -> list[str]:
    """Everything that makes the matrix incomplete (empty = complete)."""
    out: list[str] = []
    sections = {(s.adr, s.number) for s in table.sections}
    every: tuple[clauses.Clause | clauses.Outside, ...] = (*table.clauses, *table.outside)
    covered = {(c.adr, c.section) for c in every}
    out += [f"{adr} §{n}: no clause" for adr, n in sorted(sections - covered)]
    out += [f"{adr} §{n}: clause of an unknown section" for adr, n in sorted(covered - sections)]
    ids = [c.id for c in every]
    out += [f"{i}: duplicate clause id" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for c in table.clauses:
        if not c.invariants:
            out.append(f"{c.id}: no invariant")
        out += [f"{c.id}: unknown invariant {i}" for i in c.invariants if i not in INVARIANTS]
    for o in table.outside:
        out += [f"{o.id}: unknown proof property {p}" for p in o.properties if p not in ALL_PROPERTIES]
        out += [f"{o.id}: no test file {t}" for t in o.tests if not (REPO / t).is_file()]
        if not (o.properties or o.tests) and "out of scope" not in o.reason:
            out.append(f"{o.id}: nothing checks it and it is not out of scope")
    cited = {i for c in table.clauses for i in c.invariants}
    for inv in sorted(cited, key=lambda i: int(i.split("-")[1])):
        if inv not in proved and not named.get(inv):
            out.append(f"{inv}: no proof property and no test naming it")
    return out


def proved() -> set[str]:
    return set(generate.proof_properties())


def test_the_matrix_is_complete() -> None:
    assert problems(clauses.load(), proved(), generate.tests_mentioning()) == []


def test_every_invariant_has_a_proof_or_a_test() -> None:
    named = generate.tests_mentioning()
    lacking = [inv for inv in INVARIANTS if inv not in proved() and not named.get(inv)]
    assert lacking == []


def test_encoded_and_not_encoded_partition_the_invariants() -> None:
    encoded = {i.name for i in ENCODED if i.name.startswith("INV-")}
    assert encoded.isdisjoint(NOT_ENCODED) and encoded | set(NOT_ENCODED) == set(INVARIANTS)


def test_incomplete_tables_are_refused() -> None:
    table = clauses.load()
    first = table.clauses[0]
    no_invariant = replace(table, clauses=(replace(first, invariants=()), *table.clauses[1:]))
    assert problems(no_invariant, proved(), generate.tests_mentioning()) == [f"{first.id}: no invariant"]
    lost_section = replace(table, clauses=tuple(c for c in table.clauses if (c.adr, c.section) != ("ADR-0228", 3)))
    assert problems(lost_section, proved(), generate.tests_mentioning()) == ["ADR-0228 §3: no clause"]
    # an invariant without proof whose only naming test is taken away
    victim = min(NOT_ENCODED)  # computed, so this file does not count as a test naming it
    named = {k: v for k, v in generate.tests_mentioning().items() if k != victim}
    assert problems(table, proved(), named) == [f"{victim}: no proof property and no test naming it"]
    bad_outside = replace(table, outside=(replace(table.outside[1], tests=("tests/test_nothing.py",)),
                                          *table.outside[2:], replace(table.outside[0], reason="later")))
    assert problems(bad_outside, proved(), generate.tests_mentioning()) == [
        f"{table.outside[1].id}: no test file tests/test_nothing.py",
        f"{table.outside[0].id}: nothing checks it and it is not out of scope"]


def test_sections_match_the_adr_text() -> None:
    if not ADR_DIR.is_dir():
        pytest.skip(f"the ADRs are not beside the repository ({ADR_DIR}); the recorded sections are checked alone")
    found = set()
    for path in sorted(ADR_DIR.glob("ADR-022[68]-*.md")):
        adr = path.name[:8]
        for n, title in re.findall(r"^### (\d+)\. (.+)$", path.read_text(encoding="utf-8"), re.M):
            found.add((adr, int(n), title.strip()))
    assert found and found == {(s.adr, s.number, s.title) for s in clauses.load().sections}


def test_matrix_doc_lists_every_clause() -> None:
    text = (REPO / "docs" / "matrix.md").read_text(encoding="utf-8")
    table = clauses.load()
    every: tuple[clauses.Clause | clauses.Outside, ...] = (*table.clauses, *table.outside)
    assert all(f"| {c.id} |" in text for c in every)
    assert all(f"| {inv} |" in text for inv in INVARIANTS)


# ------------------------------------------------------------------------------------------------
# Targeted tests of the two invariants the proofs do not encode
def _state_after_admission() -> State:
    trace = load(REPO / "conformance" / "traces" / "corpus" / "adr0226-dependency-readied.json")
    state = State(clock=trace.initial_clock)
    for step in trace.inputs().steps[:3]:
        state = model_step(state, step).state
    assert check_invariants(state) == []
    return state


def test_inv5_names_a_forged_admission_receipt() -> None:
    state = _state_after_admission()
    admissions = copy.deepcopy(state.admissions)
    (admission,) = admissions.values()
    admission["receipt"]["admittedAtMs"] += 1  # still a well-formed receipt, no longer the frozen one
    violations = check_invariants(replace(state, admissions=admissions), only=("INV-5",))
    assert [(v.invariant, v.message) for v in violations] == [
        ("INV-5", "Run run-1: admission receipt differs from the bundle")]


def test_inv7_names_a_missing_steprun() -> None:
    state = _state_after_admission()
    step_runs = {k: v for k, v in state.step_runs.items() if k != "run-1:d"}
    violations = check_invariants(replace(state, step_runs=step_runs), only=("INV-7",))
    assert [(v.invariant, v.message) for v in violations] == [
        ("INV-7", "Run run-1: StepRuns are not in bijection with the plan steps")]
