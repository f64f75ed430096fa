"""The gate's self-test: a planted fault counts only when its owning check reports `failed`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from qlwf.conformance.mutants import LAYERS
from qlwf.conformance.mutants.manifest import by_name

from qlwf.gate import selftest
from qlwf.gate.checks import CHECKS
from qlwf.gate.selftest import FAULTS, Fault, NotPlanted


def _nothing() -> None:
    """A 'fault' that changes nothing: the owning check passes, so the self-test must fail."""


def _gone() -> None:
    raise NotPlanted("target removed")


def _break_vectors() -> None:
    from qlwf.gate import vectors

    vectors.EXPECTED[next(iter(vectors.EXPECTED))] = "wrong"


@pytest.mark.parametrize(("plant", "status"), [(_break_vectors, "passed"), (_nothing, "failed"),
                                              (_gone, "failed")])
def test_a_fault_counts_only_when_its_check_fails(monkeypatch: pytest.MonkeyPatch, plant: object,
                                                  status: str) -> None:
    fault = Fault("probe", "spec vectors", "spec-vectors", "records.md §8", plant)  # type: ignore[arg-type]
    monkeypatch.setattr(selftest, "FAULTS", (fault,))
    (result,) = selftest.self_test()
    assert result.status == status, result.summary
    from qlwf.gate import vectors

    assert "wrong" not in vectors.EXPECTED.values()  # the fault never leaked into this process


def test_the_catalogue_covers_every_layer_and_every_check() -> None:
    names = {c.name for c in CHECKS}
    assert all(f.check in names for f in FAULTS)
    # one planted manifest entry per layer of the manifest
    planted = [by_name(f.mutant).layer for f in FAULTS if f.mutant is not None]
    assert sorted(planted) == sorted(LAYERS)
    # and every gate check owns at least one fault, so each is shown able to fail
    assert {f.check for f in FAULTS} == names
    assert len({f.layer for f in FAULTS}) == len(FAULTS)  # one fault per layer


def test_skipping_a_leg_skips_its_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    pg = [f for f in FAULTS if f.check.endswith("-postgres")]
    monkeypatch.setattr(selftest, "FAULTS", tuple(pg))
    results = selftest.self_test(skip=frozenset({"postgres"}))
    assert [r.status for r in results] == ["skipped"] * len(pg)


def test_the_sqlite_side_check_faults_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The faults of Q-89 that need no PostgreSQL; `.ci/run`'s self-test runs all of them."""
    chosen = tuple(f for f in FAULTS if f.name in ("sqlite-commits-each-event", "driver-reports-inserts-only"))
    monkeypatch.setattr(selftest, "FAULTS", chosen)
    results = selftest.self_test()
    assert len(results) == 2 and all(r.status == "passed" for r in results), [r.summary for r in results]
    assert "crash injection" in results[0].summary and "diverge on exec-sqlite" in results[1].summary
    from qlwf.impl import driver_protocol
    from qlwf.impl.sqlite.store import SqliteStore

    # planted in the children only
    assert SqliteStore.insert_event.__name__ == "insert_event"
    assert driver_protocol.Server._changes.__name__ == "_changes"


def test_a_driver_that_breaks_after_a_divergence_reports_the_divergence_first(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The exec check's report leads with the earlier symptom, the diverging step and its diff, and
    then says how the driver broke; before, the driver failure alone was reported."""
    from qlwf.conformance import backends

    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    saved = backends.get("exec-sqlite")
    try:
        selftest._driver_reports_inserts_only()
        (check,) = [c for c in CHECKS if c.name == "exec-sqlite"]
        problems = check.run({"quick": True, "fail_fast": True}).problems
    finally:
        backends.restore(saved)
    assert len(problems) == 2, problems
    assert "diverge on exec-sqlite" in problems[0] and "at step 2: state" in problems[0]
    assert "version: model=4 backend=3" in problems[0]  # the update the driver left out
    assert problems[1].startswith("exec-sqlite: driver protocol: the snapshot changes")


@pytest.mark.parametrize(("fails_on", "tries", "status", "note"), [
    (3, 6, "passed", "(run 3 of at most 6)"),  # a race seen on the third run is caught
    (7, 6, "failed", "(run 6 of at most 6)"),  # never seen within the tries: not caught
    (2, 1, "failed", ""),                      # a fault with one try gets one run
])
def test_a_fault_with_several_tries_counts_when_any_run_fails(monkeypatch: pytest.MonkeyPatch, fails_on: int,
                                                               tries: int, status: str, note: str) -> None:
    from qlwf.gate.verdict import Check, Evidence

    runs = []

    def flaky(_opts: dict[str, object]) -> Evidence:  # runs in the forked child, which keeps `runs`
        runs.append(1)
        problems = ("the race showed",) if len(runs) == fails_on else ()
        return Evidence(f"run {len(runs)}", {"runs": 1}, problems)

    probe = Check("probe-race", "passes until its n-th run", flaky)
    monkeypatch.setattr(selftest, "CHECKS", [*CHECKS, probe])
    monkeypatch.setattr(selftest, "load_floors", lambda: {"quick": {"probe-race": {"runs": 1}}})
    fault = Fault("probe", "race", "probe-race", "a race", _nothing, tries=tries)
    monkeypatch.setattr(selftest, "FAULTS", (fault,))
    (result,) = selftest.self_test()
    assert result.status == status, result.summary
    assert result.summary.endswith(note) and runs == []  # counted in the child only


def test_a_fault_that_ends_first_frees_its_slot_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two slots, three faults: the first fault's check waits for the third's to have run. Waiting for
    the faults in planting order would start the third only after the first ended (which then sees
    nothing and is not caught)."""
    import time

    from qlwf.gate.verdict import Check, Evidence

    marker = tmp_path / "third-ran"

    def waits_for_the_third(_opts: dict[str, object]) -> Evidence:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return Evidence("first", {"runs": 1}, ("seen",) if marker.exists() else ())

    def quick(_opts: dict[str, object]) -> Evidence:
        return Evidence("second", {"runs": 1}, ("seen",))

    def marks(_opts: dict[str, object]) -> Evidence:
        marker.touch()
        return Evidence("third", {"runs": 1}, ("seen",))

    probes = [Check(f"probe-{n}", n, run) for n, run in (("a", waits_for_the_third), ("b", quick), ("c", marks))]
    monkeypatch.setattr(selftest, "CHECKS", [*CHECKS, *probes])
    monkeypatch.setattr(selftest, "load_floors", lambda: {"quick": {c.name: {"runs": 1} for c in probes}})
    monkeypatch.setattr(selftest, "FAULTS", tuple(Fault(f"fault-{c.name}", c.name, c.name, "-", _nothing)
                                                  for c in probes))
    results = selftest.self_test(jobs=2)
    assert [r.status for r in results] == ["passed"] * 3, [r.summary for r in results]
    assert results[1].seconds < results[0].seconds  # timed when it ended, not when its turn came


@pytest.mark.parametrize("name", ["attempt-id-omits-version", "snapshot-attempt-refuses-executor-handle"])
def test_the_in_process_model_faults_plant_and_their_check_fails(name: str) -> None:
    """The two faults planted by assignment into the model: in a child process, the plant takes
    effect (no NotPlanted) and the owning check fails. A module split that moved what a fault
    assigns left the fault a no-op, found only by the CI self-test."""
    program = (
        "import sys\n"
        "from qlwf.gate.checks import CHECKS\n"
        "from qlwf.gate.verdict import run_checks\n"
        "from qlwf.gate.selftest import FAULTS\n"
        f"fault = next(f for f in FAULTS if f.name == {name!r})\n"
        "fault.plant()\n"
        "check = next(c for c in CHECKS if c.name == fault.check)\n"
        "(result,) = run_checks([check], {'quick': True, 'fail_fast': True}, floors={check.name: {}})\n"
        "print(result.status, result.summary)\n"
        "sys.exit(0 if result.status == 'failed' else 1)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
