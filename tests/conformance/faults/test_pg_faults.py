"""Crash faults on PostgreSQL: a backend killed before every statement of every writing command,
lost commit responses, and server crashes (pg_ctl stop -m immediate) inside a transaction and
between commands on a cluster with durability on."""

from __future__ import annotations

from typing import Any

import pytest
from qlwf.conformance.faults.lost_commits import with_lost_commits
from qlwf.conformance.faults.pg_crashes import PgCrashStats, run_with_kills, run_with_server_crashes
from qlwf.conformance.lockstep import runner
from qlwf.conformance.provision import PgServer, ThrowawayCluster
from qlwf.model import tables as T

pytestmark = pytest.mark.postgres

# Together these three corpus traces run every writing command (the whole corpus runs in the gate).
KILL_TRACES = ("adr0227-worker-protocol", "adr0228-page-isolates-drifted-workflow",
               "adr0228-attempt-two-steps-parent-atomic")


def corpus(*names: str) -> list[Any]:
    traces = {t.name: t for t in runner.corpus_traces()}
    return [traces[n] for n in names]


def test_a_killed_backend_leaves_the_state_before_the_command(pg_server: PgServer) -> None:
    stats = PgCrashStats()
    results = run_with_kills(corpus(*KILL_TRACES), stats, pg_server, invariants=True)
    for r in results:
        assert r.passed, r.divergence.render() if r.divergence else r.trace
    assert set(stats.by_command) == set(T.WRITING_COMMANDS)
    assert stats.commands >= 50 and stats.crash_points > 8 * stats.commands


def test_a_non_atomic_store_is_caught(pg_server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that commits after each event (the self-test's planted fault): every command is no longer
    atomic, and the first kill after such a commit leaves a partial write."""
    from qlwf.gate.selftest import plant_commits_each_event

    plant_commits_each_event(monkeypatch, "postgres")
    [result] = run_with_kills(corpus("adr0226-dependency-readied"), PgCrashStats(), pg_server)
    assert not result.passed and result.divergence is not None
    assert "admit_workflow" in result.divergence.render() and "partial write" in result.divergence.render()


def test_postgres_answers_lost_commit_retries_like_the_model(pg_server: PgServer) -> None:
    traces = [with_lost_commits(t) for t in runner.corpus_traces()]
    summary = runner.run_traces("postgres", traces, invariants=False)
    assert summary.passed, summary.failures[0].divergence.render() if summary.failures[0].divergence else ""
    assert summary.steps > sum(t.command_count for t in runner.corpus_traces())


def test_server_crashes_keep_acknowledged_commits_and_lose_the_rest(pg_durable: ThrowawayCluster) -> None:
    pg_durable.restart()
    stats = PgCrashStats()
    for trace in corpus("adr0228-partial-completion-final"):
        result = run_with_server_crashes(trace, stats, pg_durable, every=4)
        assert result.passed, result.divergence.render() if result.divergence else trace.name
        assert result.steps == len(trace.steps)  # the run went on to its verdict after every crash
    assert stats.server_crashes >= 5 and stats.crash_points >= 2
