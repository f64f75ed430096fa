"""The concurrency check of the PostgreSQL backend: K workers against one database, then the stored state
and the committed history are judged against the model; a deliberately broken backend is caught."""

from __future__ import annotations

import argparse
import threading

import pytest
from qlwf.conformance import plans
from qlwf.conformance.concurrency import ScaledClock, concurrency_check
from qlwf.conformance.concurrency_history import replay_problems
from qlwf.conformance.model_port import ModelPort
from qlwf.impl.postgres.adapter import TransactionLog
from qlwf.impl.postgres.server import PgServer
from qlwf.model.invariants import consistent_binding

from qlwf.cmd_conform import register

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("k", [2, 4])
def test_concurrent_workers_leave_a_legal_history(pg_server: PgServer, k: int) -> None:
    report = concurrency_check(k=k, ops=40, seed=k)
    assert report.passed, "\n".join(report.problems)
    assert report.commits > 3 * k and report.replayed >= report.commits
    assert report.outcomes["ok"] > 0 and report.config.k == k


def test_a_backend_without_locks_and_version_guards_is_caught(pg_server: PgServer) -> None:
    caught = [concurrency_check(k=4, ops=60, seed=seed, variant="broken") for seed in range(3)]
    assert any(not r.passed for r in caught), [r.line() for r in caught]
    assert any("the model gives" in p or "does not reproduce" in p for r in caught for p in r.problems)


def test_cli_concurrency(pg_server: PgServer, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="qlwf")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["conform", "--backend", "postgres", "--concurrency", "2", "--ops", "15"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("concurrency postgres[correct] K=2: PASS")


def test_scaled_clock_is_strictly_increasing_across_threads() -> None:
    clock = ScaledClock(factor=50)
    seen: list[int] = []
    lock = threading.Lock()

    def read() -> None:
        for _ in range(500):
            value = clock.read(lambda: 1_700_000_000_000)  # a database clock standing still
            with lock:
                seen.append(value)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 2000 and clock.peek() == max(seen)
    assert clock.read(lambda: 1_700_000_000_100) >= clock.origin_ms + 100 * 50


def test_replay_reports_an_outcome_the_model_does_not_give() -> None:
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, 1000)
    model = ModelPort(1000)
    admitted = model.execute("admit_workflow", {"plan": plan}, now=1000)
    cancel = {"runId": "run-1", "reason": "user", "actor": {"type": "user"}}
    requested = model.execute("request_cancel", cancel, now=1010)
    log = [TransactionLog("admit_workflow", {"plan": plan}, {"ok": admitted}, 1000),
           TransactionLog("request_cancel", cancel, {"ok": requested}, 1010)]
    assert replay_problems(log, model.snapshot()) == ([], 2)
    forged = [log[0], TransactionLog("request_cancel", cancel, {"ok": requested | {"runVersion": 9}}, 1010)]
    problems, _ = replay_problems(forged, model.snapshot())
    assert len(problems) == 1 and "the model gives" in problems[0]
    problems, _ = replay_problems(log[:1], model.snapshot())
    assert problems and "does not reproduce the stored state" in problems[0]


def test_a_lost_commit_response_of_a_silent_renewal_is_decided_by_replay() -> None:
    """A renewal writes no event, so the event log cannot tell whether a renewal whose commit
    response was lost committed: the judge accepts the history if either choice replays."""
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, 1000)
    model = ModelPort(1000)
    log = [TransactionLog("admit_workflow", {"plan": plan}, {"ok": model.execute("admit_workflow", {"plan": plan},
                                                                                   now=1000)}, 1000)]
    step = plan["steps"][0]
    admit_args = {"runId": "run-1", "stepRunId": step["stepRunId"], "binding": consistent_binding(plan, step)}
    admitted = model.execute("admit_task_attempt", admit_args, now=1010)
    log.append(TransactionLog("admit_task_attempt", admit_args, {"ok": admitted}, 1010))
    claim = {"attemptId": admitted["attempt"]["id"], "workerId": "w1", "durationMs": 30000}
    log.append(TransactionLog("claim_lease", claim, {"ok": model.execute("claim_lease", claim, now=1020)}, 1020))
    renew = {"attemptId": claim["attemptId"], "workerId": "w1", "leaseGeneration": 1, "durationMs": 30000}
    model.execute("renew_lease", renew, now=1030)  # committed, but its answer is lost
    lost = {"error": {"class": "Unavailable", "code": "X", "reason": "storage_unreachable"}}
    log.append(TransactionLog("renew_lease", renew, lost, 1030, True))
    log.append(TransactionLog("renew_lease", renew, {"ok": model.execute("renew_lease", renew, now=1040)}, 1040))
    assert replay_problems(log, model.snapshot()) == ([], 5)
    # A store that lacks the lost renewal contradicts the acknowledged answer of the next one
    # (lease version 3): neither choice replays, and the history is reported.
    without = ModelPort(1000)
    for entry in log:
        if not entry.ambiguous:
            without.execute(entry.name, entry.args, now=entry.now)
    problems, _ = replay_problems(log, without.snapshot())
    assert problems and "the model gives" in problems[0]
