"""The golden corpus and generated traces in lockstep with the model on PostgreSQL (commands.md §1.3)."""

from __future__ import annotations

import argparse
import re

import pytest
from qlwf.conformance.backends.postgres import PostgresBackend
from qlwf.conformance.concurrency import gate as concurrency_gate
from qlwf.conformance.generate.sequences import GeneratorConfig
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import load_invariant_check, run_lockstep
from qlwf.conformance.provision import PgServer

from qlwf.cli.conform import register

pytestmark = pytest.mark.postgres

CORPUS = {t.name: t for t in runner.corpus_traces()}
INVARIANTS = load_invariant_check()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_trace_passes_on_postgres(pg_backend: PostgresBackend, name: str) -> None:
    port = pg_backend.open()
    try:
        result = run_lockstep(CORPUS[name], port, invariants=INVARIANTS)
    finally:
        port.close()
    assert result.passed, result.divergence.render() if result.divergence else ""
    assert result.steps == len(CORPUS[name].steps)


def test_corpus_exercises_every_reachable_outcome_and_rule_row(pg_server: PgServer) -> None:
    summary = runner.run_traces("postgres", list(CORPUS.values()), invariants=False)
    assert summary.passed and summary.coverage is not None
    report = summary.coverage.report()
    assert report["commands"]["missing"] == report["outcomes"]["missing"] == report["rules"]["missing"] == []


def test_generated_traces_pass_on_postgres(pg_server: PgServer) -> None:
    """Generated traces over several workflows; invariants on the final state of each."""
    summary = runner.run_generated("postgres", 40, 77_000, config=GeneratorConfig(steps=(20, 28), workflows=(2, 4)),
                                   invariants_every_step=False)
    failure = summary.failures[0].divergence if summary.failures else None
    assert failure is None, failure.render()
    assert len(summary.results) == 40 and all(r.steps >= 20 for r in summary.results)


def test_cli_conform_on_postgres(pg_server: PgServer, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="qlwf")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["conform", "--backend", "postgres", "--traces", "2", "--seed", "5", "--corpus"])
    assert args.func(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.match(rf"^conform postgres: PASS — {2 + len(CORPUS)} traces, \d+ steps, [\d.]+ s, \d+ steps/s$", last)


def test_gate_entry_point(pg_server: PgServer) -> None:
    summary = concurrency_gate.conform(backend="postgres", corpus=False, traces=3, seed=11)
    assert summary.passed and summary.line.startswith("conform postgres: PASS — 3 traces")
