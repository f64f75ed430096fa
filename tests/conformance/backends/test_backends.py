"""The backend-parametrised suite: every registered backend (conformance/backends/), and each
capability it declares, checked the same way. A backend registered by a plugin module
(QLWF_BACKEND_MODULES) is collected too; tests/conformance/backends/test_architecture.py runs this file that way.

Storage a backend cannot get here skips with its provisioner's message, or fails under CI=true
when CI must provide it (the PostgreSQL legs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from qlwf.conformance import backends
from qlwf.conformance.backends import BackendMisconfigured, BackendSpec, BackendUnavailable
from qlwf.conformance.faults.lost_commits import with_lost_commits
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.lockstep import runner
from qlwf.conformance.traces.format import Trace

# Short corpus traces that still cover admission, the worker protocol, cancellation and the page.
SHORT = ("adr0226-dependency-readied", "adr0228-attempt-two-steps-parent-atomic",
         "adr0228-page-isolates-drifted-workflow")


def _corpus(names: tuple[str, ...] = SHORT) -> list[Trace]:
    return [t for t in runner.corpus_traces() if t.name in names]


def _with(capability: str) -> list[str]:
    return [s.name for s in backends.specs() if s.has(capability)]


@pytest.fixture
def spec(request: pytest.FixtureRequest) -> Iterator[BackendSpec]:
    """The backend named by the test's parameter, its storage provisioned (or the test skipped)."""
    spec = backends.get(request.param)
    try:
        with spec.provisioner.guard():
            spec.provisioner.prepare()
    except BackendUnavailable as e:
        verdict, message = spec.requirement(f"{spec.name}: {e}")
        if verdict == "fail":
            pytest.fail(message)
        pytest.skip(message)
    if spec.has("driver") and spec.name == "exec":
        pytest.skip("exec is configured per run with --driver CMD (its reference drivers are exec-sqlite, "
                    "exec-postgres)")
    with spec.provisioner.guard():
        yield spec


@pytest.mark.parametrize("spec", backends.names(), indirect=True)
def test_corpus_and_generated_traces_conform(spec: BackendSpec) -> None:
    summary = runner.run_traces(spec.name, [*_corpus(), generate(3), generate(4)], invariants=False)
    assert summary.passed, summary.failures[0].divergence.render() if summary.failures[0].divergence else ""
    assert len(summary.results) == len(SHORT) + 2 and summary.steps > 50


@pytest.mark.parametrize("spec", _with("lost_commits"), indirect=True)
def test_every_writing_command_retried_after_a_lost_commit_response(spec: BackendSpec) -> None:
    doubled = runner.run_traces(spec.name, [with_lost_commits(t) for t in _corpus()[:2]], invariants=False)
    assert doubled.passed, doubled.failures[0].divergence.render() if doubled.failures[0].divergence else ""


@pytest.mark.parametrize("spec", _with("crash_points"), indirect=True)
def test_every_crash_point_is_atomic(spec: BackendSpec) -> None:
    evidence = spec.crash_harness()(True, _corpus(SHORT[2:]))
    assert not evidence.problems, "\n".join(evidence.problems)
    assert evidence.counts and min(evidence.counts.values()) >= 0
    assert sum(evidence.counts.values()) > 10  # crash points were actually injected


@pytest.mark.parametrize("spec", _with("concurrency"), indirect=True)
def test_a_concurrent_history_replays_through_the_model(spec: BackendSpec) -> None:
    from qlwf.conformance.concurrency.harness import concurrency_check

    report = concurrency_check(k=3, ops=20, seed=5, backend=spec.name)
    assert report.passed, "\n".join(report.problems) or report.line()
    assert report.commits > report.setup_commits and report.replayed > 0
    assert report.line().startswith(f"concurrency {spec.name}[correct] K=3: PASS")


def test_every_capability_is_known_and_backed_by_its_entry_point() -> None:
    for spec in backends.specs():
        assert spec.capabilities <= backends.CAPABILITIES, spec.name
        if spec.has("crash_points"):
            assert callable(spec.crash_harness())
        if spec.has("concurrency"):
            assert spec.has("transaction_log") and spec.concurrency is not None


def test_a_capability_without_its_entry_point_is_refused() -> None:
    with pytest.raises(ValueError, match="crash harness"):
        backends.register("half", backends.SqliteBackend, "x", capabilities=frozenset({"crash_points"}))
    with pytest.raises(ValueError, match="unknown capabilities"):
        backends.register("half", backends.SqliteBackend, "x", capabilities=frozenset({"teleport"}))
    with pytest.raises(ValueError, match="needs the concurrency capability"):
        backends.register("half", backends.SqliteBackend, "x",
                          gate=(backends.GateEntry("concurrency-half", "concurrency", "x"),))
    assert "half" not in backends.names()


def test_the_gate_checks_come_from_the_registry_in_their_historic_order() -> None:
    from qlwf.gate import checks

    expected = ["spec-vectors", "oracle-examples", "proofs", "explorer", "conform-sqlite", "faults-sqlite",
                "exec-sqlite", "conform-postgres", "concurrency-postgres", "faults-postgres"]
    registered = [c.name for c in checks.MODEL_CHECKS + checks.backend_checks()]
    assert registered[: len(expected)] == expected
    assert {c.name: c.leg for c in checks.CHECKS if c.leg != "core"} == {
        "conform-postgres": "postgres", "concurrency-postgres": "postgres", "faults-postgres": "postgres"}


@pytest.mark.parametrize("ci", ["true", ""])
def test_the_skip_policy(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    assert backends.get("postgres").requirement("no server")[0] == ("fail" if ci else "skip")
    assert "CI=true" in backends.get("postgres").requirement("no server")[1] if ci else True
    assert backends.get("sqlite").requirement("no disk")[0] == "skip"  # nothing CI must provide


def test_the_exec_backend_without_a_driver_is_misconfigured() -> None:
    with pytest.raises(BackendMisconfigured, match="--driver"):
        backends.get("exec").create()


def test_a_broken_sqlite_store_is_caught_by_the_concurrency_check() -> None:
    """The sqlite concurrency host is a real check: a store that forgets a counter diverges."""
    from qlwf.conformance.concurrency.harness import concurrency_check
    from qlwf.impl.sqlite.concurrency import SqliteConcurrencyHost
    from qlwf.impl.sqlite.store import SqliteStore

    class CounterForgettingStore(SqliteStore):
        """Broken: the Run compare-and-set of a counter update does not advance eventSequence."""

        def cas_run(self, guard: str, old: dict[str, Any], new: dict[str, Any]) -> None:
            if guard == "counters" and new["version"] == old["version"] + 1:
                new = new | {"eventSequence": old["eventSequence"]}
            super().cas_run(guard, old, new)

    report = concurrency_check(k=2, ops=30, seed=1, host=SqliteConcurrencyHost(CounterForgettingStore))
    assert not report.passed and report.problems


@pytest.mark.parametrize("ci", ["true", ""])
def test_no_postgres_server_is_exit_2_in_conform_and_the_skip_policy_in_tests(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ci: str) -> None:
    """No binaries and no QLWF_PG_DSN: `qlwf conform` says so in one line (exit 2); the suite's verdict
    is skip locally and fail under CI=true, with the provisioner's message."""
    from qlwf.conformance.backends import postgres
    from qlwf.conformance.provision import PostgresUnavailable

    from qlwf.cli import entry as cli

    def unavailable() -> None:
        raise PostgresUnavailable("no PostgreSQL binaries found and QLWF_PG_DSN is not set")

    monkeypatch.delenv("QLWF_PG_DSN", raising=False)
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(postgres, "shared_server", unavailable)
    spec = backends.get("postgres")
    with pytest.raises(BackendUnavailable, match="no PostgreSQL binaries") as info, spec.provisioner.guard():
        spec.provisioner.prepare()
    verdict, message = spec.requirement(str(info.value))
    assert verdict == ("fail" if ci else "skip") and "no PostgreSQL binaries" in message
    assert cli.main(["conform", "--backend", "postgres", "--traces", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["postgres backend unavailable: no PostgreSQL binaries found and QLWF_PG_DSN is not set"]
