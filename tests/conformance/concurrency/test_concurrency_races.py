"""Worker-protocol races in the concurrency workload, and the clock-read-order fault they help catch.

The fault (a storage mutant, applied by monkeypatching): a command reads its observation time
BEFORE it takes its locks (storage.md §6.3 and D-8 require after). Two commands on one Run can then
commit in the opposite order of their times, so the history replayed in time order differs from
the database's. The quick gate's concurrency check (K = 2, 4, 8, a short run) must fail on it.
"""

from __future__ import annotations

from typing import Any

import pytest
from qlwf.conformance.concurrency.workload import Worker, World
from qlwf.impl.port import Record
from qlwf.model.errors import Conflict

from qlwf.gate import checks
from qlwf.gate.selftest import plant_clock_read_before_locks

HOT = "wta:hot"
RACES = ("race_claim", "race_renew", "race_complete", "race_release", "race_recover", "race_cancel", "race_frontier")


class RecordingPort:
    """Answers every command with a Conflict and remembers what was asked (no storage needed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Record]] = []

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        self.calls.append((name, args))
        raise Conflict("TEST", "recorded")


def test_race_operations_all_aim_at_the_newest_live_attempt() -> None:
    world = World(max_workflows=3)
    world.learn_attempt({"id": "wta:old", "runId": "run-0", "status": "running"})
    world.learn_attempt({"id": HOT, "runId": "run-1", "status": "claimed"})
    world.learn_lease({"attemptId": HOT, "workerId": "w1", "leaseGeneration": 2})
    port = RecordingPort()
    worker = Worker(0, port, world, ops=0, seed=3, planned_at=lambda: 0)  # type: ignore[arg-type]
    worker.rng.random = lambda: 0.0  # type: ignore[method-assign]  # always the holder's fence, always cancel
    for race in RACES:
        getattr(worker, race)()
    names = [n for n, _ in port.calls]
    assert set(names) >= {"claim_lease", "renew_lease", "release_lease", "recover_attempt", "request_cancel",
                          "converge_cancellation", "advance_frontier"}
    for name, args in port.calls:
        if "attemptId" in args:
            assert args["attemptId"] == HOT, (name, args)
        else:
            assert args["runId"] == "run-1", (name, args)
    fenced = [a for n, a in port.calls if n in ("renew_lease", "release_lease")]
    assert all((a["workerId"], a["leaseGeneration"]) == ("w1", 2) for a in fenced)
    assert {race for race in RACES} <= {f.__name__ for f, _ in worker.menu}


@pytest.mark.postgres
def test_the_quick_concurrency_check_catches_a_clock_read_before_the_locks(pg_server: object,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A race is caught only when the interleaving exposes it. With both cores busy one quick run missed
    # it in about 8 % of runs (12 of 160, 2026-12-03; 0 of 10 on an idle machine), so the mutant gets up
    # to six quick runs: a miss in all six, about 3e-7 if they are independent, fails the test.
    with monkeypatch.context() as mp:
        plant_clock_read_before_locks(mp)
        (check,) = [c for c in checks.backend_checks() if c.name == "concurrency-postgres"]
        for _ in range(6):
            evidence = check.run({"quick": True})
            if evidence.problems:
                break
    assert evidence.problems, evidence.summary
    assert evidence.counts["max_workers"] == 8
