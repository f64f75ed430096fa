"""The concurrency check of the PostgreSQL backend: K workers against one database, then the stored state
and the committed history are judged against the model; a deliberately broken backend is caught."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from qlwf.conformance.concurrency.harness import ConcurrencyConfig, ConcurrencyReport, ScaledClock, concurrency_check
from qlwf.conformance.concurrency.history import Replay, _run_of, replay_history, split_unseen_runs
from qlwf.conformance.generate import plans
from qlwf.conformance.lockstep.model_port import ModelPort
from qlwf.conformance.provision import PgServer
from qlwf.impl.postgres.adapter import TransactionLog
from qlwf.model.invariants import consistent_binding
from qlwf.model.records import Record
from qlwf.model.state import State
from qlwf.model.system import apply

from qlwf.cli.conform import register

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
    assert replay_history(log, model.snapshot()) == Replay([], 2)
    forged = [log[0], TransactionLog("request_cancel", cancel, {"ok": requested | {"runVersion": 9}}, 1010)]
    problems = replay_history(forged, model.snapshot()).problems
    assert len(problems) == 1 and "the model gives" in problems[0]
    problems = replay_history(log[:1], model.snapshot()).problems
    assert problems and "does not reproduce the stored state" in problems[0]


def test_an_admission_without_an_observation_time_makes_no_reader_early() -> None:
    """A run_missing reader is `early` only when it read the clock after the admission did: an admission logged
    without its time (`now` None) is no such evidence, and the reader stays in the history."""
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, 1000)
    admitted = ModelPort(1000).execute("admit_workflow", {"plan": plan}, now=1000)
    missing = apply(State(clock=1010), {"name": "advance_frontier", "args": {"runId": "run-1"}}).error
    assert missing is not None and missing.reason == "run_missing"
    log = [TransactionLog("admit_workflow", {"plan": plan}, {"ok": admitted}, None),
           TransactionLog("advance_frontier", {"runId": "run-1"}, {"error": missing.to_json()}, 1010)]
    assert split_unseen_runs(log) == (log, [])
    timed = [TransactionLog("admit_workflow", {"plan": plan}, {"ok": admitted}, 1000), log[1]]
    assert split_unseen_runs(timed) == (timed[:1], timed[1:])


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
    # The lost renewal must be assumed committed: the next one acknowledged lease version 3.
    assert replay_history(log, model.snapshot()) == Replay([], 5, assumed_committed=1)
    # A store that lacks the lost renewal contradicts the acknowledged answer of the next one
    # (lease version 3): neither choice replays, and the history is reported.
    without = ModelPort(1000)
    for entry in log:
        if not entry.ambiguous:
            without.execute(entry.name, entry.args, now=entry.now)
    problems = replay_history(log, without.snapshot()).problems
    assert problems and "the model gives" in problems[0]


# ------------------------------------------------------------------------------------------------
# A read serialized before a lock-only holder of its Run's lock (decisions Q-79)
def _waiting_on_locks(watch: psycopg.Connection[Any]) -> int:
    """How many sessions of this database wait on a lock now."""
    row = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'").fetchone()
    assert row is not None
    return int(row[0])


def _admitted_and_claimed() -> tuple[list[TransactionLog], State, dict[str, Any], dict[str, Any]]:
    """A one-step Run, its attempt admitted and claimed: (log, state, admission args, renewal args)."""
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, 1000)
    step = plan["steps"][0]
    admit = {"runId": "run-1", "stepRunId": step["stepRunId"], "binding": consistent_binding(plan, step)}
    log, state = [], State(clock=1000)
    for i, (name, args) in enumerate([("admit_workflow", {"plan": plan}), ("admit_task_attempt", admit)]):
        out = apply(state, {"name": name, "args": args}, 1000 + 10 * i)
        log.append(TransactionLog(name, args, {"ok": out.result}, 1000 + 10 * i, began=2 * i + 1, committed=2 * i + 2))
        state = out.state
    attempt = log[-1].outcome["ok"]["attempt"]["id"]
    claim = {"attemptId": attempt, "workerId": "w1", "durationMs": 30000}
    out = apply(state, {"name": "claim_lease", "args": claim}, 1020)
    log.append(TransactionLog("claim_lease", claim, {"ok": out.result}, 1020, began=5, committed=6))
    renew = {"attemptId": attempt, "workerId": "w1", "leaseGeneration": 1, "durationMs": 30000}
    return log, out.state, admit, renew


def _read_before(log: list[TransactionLog], state: State, admit: dict[str, Any], holder: tuple[str, dict[str, Any]],
                 read_began: int) -> Replay:
    """`holder` commits at 1030 (sequence points 7, 9); the admission replay, at 1040, answers from the
    state before it, as a transaction whose snapshot predates the holder's commit would."""
    name, args = holder
    held = apply(state, {"name": name, "args": args}, 1030)
    stale = apply(state, {"name": "admit_task_attempt", "args": admit}, 1040)
    assert stale.result is not None and stale.result["status"] == "existing"
    log = [*log, TransactionLog(name, args, {"ok": held.result}, 1030, began=7, committed=9),
           TransactionLog("admit_task_attempt", admit, {"ok": stale.result}, 1040, began=read_began, committed=10)]
    return replay_history(log, held.state.snapshot())


def test_a_read_that_waited_on_a_plain_renewal_may_answer_from_before_it() -> None:
    log, state, admit, renew = _admitted_and_claimed()
    assert _read_before(log, state, admit, ("renew_lease", renew), read_began=8) == Replay([], 5, placed_earlier=1)


def test_a_read_that_began_after_the_renewal_committed_must_see_it() -> None:
    log, state, admit, renew = _admitted_and_claimed()
    problems = _read_before(log, state, admit, ("renew_lease", renew), read_began=10).problems
    assert len(problems) == 1 and "admit_task_attempt" in problems[0] and "the model gives" in problems[0]


def test_an_admission_is_a_transaction_of_the_run_it_creates() -> None:
    """So a read is never placed before its Run's admission (that changed the Run row: a barrier)."""
    log, state, _, _ = _admitted_and_claimed()
    assert [_run_of(e, state) for e in log] == ["run-1", "run-1", "run-1"]


def test_a_read_cannot_precede_a_holder_that_updated_the_run_row() -> None:
    """start_attempt appends an event (the Run row changes): PostgreSQL fails a waiting reader instead."""
    log, state, admit, renew = _admitted_and_claimed()
    start = {k: renew[k] for k in ("attemptId", "workerId", "leaseGeneration")} | {"timeoutMs": None}
    problems = _read_before(log, state, admit, ("start_attempt", start), read_began=8).problems
    assert len(problems) == 1 and "admit_task_attempt" in problems[0]


def test_the_report_shows_what_the_judge_granted_beyond_now_order() -> None:
    """A passing verdict that needed an earlier placement or an assumed commit says so (line and JSON);
    one that needed neither adds nothing to the line."""
    plain = ConcurrencyReport(ConcurrencyConfig(k=2, ops=5), replayed=12)
    assert "replayed," in plain.line() and "placed earlier" not in plain.line()
    granted = ConcurrencyReport(ConcurrencyConfig(k=2, ops=5), replayed=12, placed_earlier=2, assumed_committed=1)
    assert granted.passed
    assert "12 replayed (2 read(s) placed earlier, 1 silent lost commit(s) assumed committed)," in granted.line()
    assert (granted.to_json()["placedEarlier"], granted.to_json()["assumedCommitted"]) == (2, 1)


class _GatedClock(ScaledClock):
    """Holds the first read after `armed` is set until `release`: that transaction keeps its locks."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.holding = threading.Event()
        self.release = threading.Event()

    def read(self, database_time: Callable[[], int]) -> int:
        db = database_time()  # sends the queued lock statements: the locks are held from here on
        if self.armed:
            self.armed = False
            self.holding.set()
            self.release.wait(30)
        return super().read(lambda: db)


def test_postgres_serializes_a_waiting_read_before_a_plain_renewal(pg_server: PgServer) -> None:
    """The schedule the judge allows for (Q-79), made on purpose: a renewal holds the Run lock; an
    admission replay waits for it, then answers from its earlier snapshot (the attempt before the
    renewal); the history is legal and the judge says so."""
    from qlwf.conformance.backends.postgres import PostgresConcurrencyStore

    store = PostgresConcurrencyStore(pg_server)
    log: list[TransactionLog] = []
    clock = _GatedClock()
    port = store.port(2, clock, "correct", log.append)
    try:
        plan = plans.make_plan("run-1", "plan-1", {"a": []}, clock.peek())
        port.execute("admit_workflow", {"plan": plan})
        step = plan["steps"][0]
        admit = {"runId": "run-1", "stepRunId": step["stepRunId"], "binding": consistent_binding(plan, step)}
        attempt = port.execute("admit_task_attempt", admit)["attempt"]["id"]
        port.execute("claim_lease", {"attemptId": attempt, "workerId": "w1", "durationMs": 600000})
        renew = {"attemptId": attempt, "workerId": "w1", "leaseGeneration": 1, "durationMs": 600000}
        clock.armed = True
        renewal = threading.Thread(target=port.execute, args=("renew_lease", renew))
        renewal.start()
        assert clock.holding.wait(30)
        answers: list[Record] = []
        reader = threading.Thread(target=lambda: answers.append(port.execute("admit_task_attempt", admit)))
        reader.start()
        with psycopg.connect(store.conninfo, autocommit=True) as watch:
            deadline = time.monotonic() + 30
            while not _waiting_on_locks(watch):
                assert time.monotonic() < deadline, "the admission never waited for the Run lock"
                time.sleep(0.01)
        clock.release.set()
        renewal.join(30)
        reader.join(30)
        renewed = port.snapshot()
        assert answers[0]["status"] == "existing" and answers[0]["attempt"]["leaseVersion"] == 0
        assert [lease["version"] for lease in renewed["leases"]] == [1]
        # the two threads append to the log as they finish, in either order: find the entries by name
        read = [e for e in log if e.name == "admit_task_attempt"][-1]
        (renewal_entry,) = [e for e in log if e.name == "renew_lease"]
        assert read.began is not None and renewal_entry.committed is not None
        assert read.began < renewal_entry.committed  # the read began before the renewal committed
        assert replay_history(log, renewed) == Replay([], 5, placed_earlier=1)
    finally:
        clock.release.set()
        port.close()
        store.close()
