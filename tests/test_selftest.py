"""The gate's self-test: a planted fault counts only when its owning check reports `failed`."""

from __future__ import annotations

import pytest
from qlwf.conformance.mutants import LAYERS
from qlwf.conformance.mutants.manifest import by_name

from qlwf import selftest
from qlwf.checks import CHECKS
from qlwf.selftest import FAULTS, Fault, NotPlanted


def _nothing() -> None:
    """A 'fault' that changes nothing: the owning check passes, so the self-test must fail."""


def _gone() -> None:
    raise NotPlanted("target removed")


def _break_vectors() -> None:
    from qlwf import vectors

    vectors.EXPECTED[next(iter(vectors.EXPECTED))] = "wrong"


@pytest.mark.parametrize(("plant", "status"), [(_break_vectors, "passed"), (_nothing, "failed"),
                                              (_gone, "failed")])
def test_a_fault_counts_only_when_its_check_fails(monkeypatch: pytest.MonkeyPatch, plant: object,
                                                  status: str) -> None:
    fault = Fault("probe", "spec vectors", "spec-vectors", "records.md §8", plant)  # type: ignore[arg-type]
    monkeypatch.setattr(selftest, "FAULTS", (fault,))
    (result,) = selftest.self_test()
    assert result.status == status, result.summary
    from qlwf import vectors

    assert "wrong" not in vectors.EXPECTED.values()  # the fault never leaked into this process


def test_the_catalogue_covers_every_layer_with_a_real_check() -> None:
    layers = {f.layer for f in FAULTS}
    assert layers == {"model rule", "decision table row", "proof encoding", "impl command sequence",
                      "SQLite storage statement", "PostgreSQL storage statement", "schema constraint"}
    names = {c.name for c in CHECKS}
    assert all(f.check in names for f in FAULTS)
    # one planted manifest entry per layer of the manifest
    planted = [by_name(f.mutant).layer for f in FAULTS if f.mutant is not None]
    assert len(planted) == len(FAULTS) and sorted(planted) == sorted(LAYERS)


def test_skipping_a_leg_skips_its_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    pg = [f for f in FAULTS if f.check.endswith("-postgres")]
    monkeypatch.setattr(selftest, "FAULTS", tuple(pg))
    results = selftest.self_test(skip=frozenset({"postgres"}))
    assert [r.status for r in results] == ["skipped"] * len(pg)
