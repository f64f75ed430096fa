"""Crash at every statement boundary: SQLite keeps every writing command atomic (storage.md §6.1)."""

from __future__ import annotations

from typing import Any

import pytest
from qlwf.conformance.faults.sqlite_crashes import CrashStats, run_with_crashes
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.lockstep.runner import corpus_traces
from qlwf.impl.sqlite.store import SqliteStore


@pytest.mark.slow
def test_every_crash_point_of_corpus_and_generated_traces_is_atomic() -> None:
    stats = CrashStats()
    corpus = {t.name: t for t in corpus_traces()}
    traces = [corpus["adr0228-attempt-two-steps-parent-atomic"], corpus["adr0226-failure-skips-chain"],
              generate(7)]
    for trace in traces:
        result = run_with_crashes(trace, stats)
        assert result.passed, result.divergence.render() if result.divergence else trace.name
    assert stats.commands >= 20 and stats.crash_points > 5 * stats.commands


class CommitsEarly(SqliteStore):
    """A broken store that commits after writing each event (a non-atomic command)."""

    def insert_event(self, event: Any) -> None:
        super().insert_event(event)
        self.conn.execute("COMMIT")
        self.conn.execute("BEGIN IMMEDIATE")


def test_a_non_atomic_store_is_caught_at_the_first_crash_point_after_the_early_commit() -> None:
    stats = CrashStats()
    trace = next(t for t in corpus_traces() if t.name == "adr0226-dependency-readied")
    result = run_with_crashes(trace, stats, CommitsEarly)
    assert not result.passed and result.divergence is not None
    report = result.divergence.render()
    assert "admit_workflow" in report and "partial write" in report
