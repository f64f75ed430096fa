"""Round trips of the PostgreSQL backend (docs/decisions.md Q-62): what a command sends, in which
order, and in how many round trips; deferred compare-and-sets that fail on the server; the per-try
row cache and its invalidation by the try's own writes; retryable errors surfacing inside a batch;
and the prepared statements of impl/postgres/wire.py after aborted batches.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from qlwf.conformance.generate import plans
from qlwf.impl.commands.failures import ConcurrentChange
from qlwf.impl.port import DatabaseClock, FixedClock
from qlwf.impl.postgres import wire
from qlwf.impl.postgres.adapter import PostgresAdapter
from qlwf.impl.postgres.database import PgDatabase
from qlwf.impl.postgres.rowcache import MISSING
from qlwf.impl.postgres.session import Boundaries, PgSession
from qlwf.impl.postgres.store import PgStore
from qlwf.model import tables as T
from qlwf.model.errors import QlwfError
from qlwf.model.records import make_event

pytestmark = pytest.mark.postgres

T0 = 1_000_000
USER = {"type": "user"}
Record = dict[str, Any]


class Recorder:
    """Boundaries that only watch: every statement sent, and whether it opened a round trip."""

    def __init__(self) -> None:
        self.log: list[tuple[str, bool]] = []

    def interrupt_before(self, sql: str, first: bool) -> bool:
        self.log.append((sql, first))
        return False

    def interrupt(self, conn: psycopg.Connection[Any]) -> None:
        raise AssertionError("never interrupts")

    def sent(self, statements: Sequence[str]) -> None:
        pass


class Watched(PostgresAdapter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = Recorder()

    def _boundaries(self) -> Boundaries | None:
        return self.recorder


def watched(db: PgDatabase, store: Any = PgStore, clock: Any = None) -> Watched:
    return Watched(db, clock if clock is not None else FixedClock(), store_factory=store)


def admit(port: PostgresAdapter, run_id: str = "run-1", needs: dict[str, list[str]] | None = None) -> Record:
    plan = plans.make_plan(run_id, run_id.replace("run", "plan"), needs or {"a": [], "b": ["a"]}, T0)
    port.execute("admit_workflow", {"plan": plan}, now=T0)
    return plan


def task(port: PostgresAdapter, step: str = "a", now: int = T0) -> str:
    out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": f"run-1:{step}",
                                              "binding": plans.binding(step)}, now=now)
    attempt_id: str = out["attempt"]["id"]
    return attempt_id


def round_trips(port: PostgresAdapter, name: str, args: Record, now: int) -> int:
    before = port.wire.round_trips[name]
    port.execute(name, args, now=now)
    return port.wire.round_trips[name] - before


# ------------------------------------------------------------------------------------------------
# How many round trips each command kind costs: a regression adds one here.
def test_round_trips_per_command_kind(db: PgDatabase) -> None:
    port = watched(db)
    seen: dict[str, list[int]] = {}

    def run(name: str, args: Record, now: int = T0) -> None:
        seen.setdefault(name, []).append(round_trips(port, name, args, now))

    plan = plans.make_plan("run-1", "plan-1", {"a": [], "b": ["a"]}, T0)
    run("admit_workflow", {"plan": plan})  # created
    run("admit_workflow", {"plan": plan})  # existing: the replay reads the frozen evidence
    run("advance_frontier", {"runId": "run-1"})
    a = {"runId": "run-1", "stepRunId": "run-1:a", "binding": plans.binding("a")}
    run("admit_task_attempt", a)
    attempt = port.snapshot()["attempts"][0]["id"]
    worker = {"attemptId": attempt, "workerId": "w1", "leaseGeneration": 1}
    run("claim_lease", {"attemptId": attempt, "workerId": "w1", "durationMs": 10_000})
    run("renew_lease", worker | {"durationMs": 10_000}, T0 + 1)
    run("start_attempt", worker | {"timeoutMs": None}, T0 + 2)
    run("record_running", worker, T0 + 3)
    run("complete_attempt", worker | {"exitCode": 0}, T0 + 4)
    run("advance_frontier", {"runId": "run-1"}, T0 + 5)
    b = task(port, "b", T0 + 5)
    run("claim_lease", {"attemptId": b, "workerId": "w1", "durationMs": 10_000}, T0 + 5)
    run("release_lease", {"attemptId": b, "workerId": "w1", "leaseGeneration": 1, "reason": "declined"}, T0 + 6)
    run("claim_lease", {"attemptId": b, "workerId": "w1", "durationMs": 10_000}, T0 + 6)
    run("start_attempt", {"attemptId": b, "workerId": "w1", "leaseGeneration": 2, "timeoutMs": None}, T0 + 7)
    run("fail_start", {"attemptId": b, "workerId": "w1", "leaseGeneration": 2}, T0 + 8)
    admit(port, "run-2")
    c = port.execute("admit_task_attempt", {"runId": "run-2", "stepRunId": "run-2:a",
                                            "binding": plans.binding("a")}, now=T0 + 8)["attempt"]["id"]
    port.execute("claim_lease", {"attemptId": c, "workerId": "w1", "durationMs": 5000}, now=T0 + 8)
    run("recover_attempt", {"attemptId": c, "evidence": "not_running"}, T0 + 5008)
    d = port.execute("admit_task_attempt", {"runId": "run-2", "stepRunId": "run-2:a",
                                            "binding": plans.binding("a")}, now=T0 + 5009)["attempt"]["id"]
    run("request_cancel", {"runId": "run-2", "reason": "user", "actor": USER}, T0 + 5010)
    run("converge_cancellation", {"runId": "run-2"}, T0 + 5011)  # one active attempt: try-locked first
    assert port.snapshot()["attempts"][-1]["id"] == d or d
    admit(port, "run-3")
    port.execute("request_cancel", {"runId": "run-3", "reason": "user", "actor": USER}, now=T0 + 5012)
    run("converge_cancellation", {"runId": "run-3"}, T0 + 5013)  # no active attempt: no try-lock statement

    assert seen == {
        # plan id; Run and admission; StepRun ids; writes + COMMIT. The replay reads the frozen evidence:
        # events, entries, each StepRun's first ledger entry, the Run, each StepRun (two steps here).
        "admit_workflow": [4, 9],
        "advance_frontier": [2, 2],  # locks with the admission and last event; writes + COMMIT
        "admit_task_attempt": [3],  # locks; the epoch's receipt with the max attempt number; writes + COMMIT
        "claim_lease": [3, 3, 3],  # authority + attempt; the four lock levels; writes + COMMIT
        "renew_lease": [3], "start_attempt": [3, 3], "record_running": [3], "complete_attempt": [3],
        "release_lease": [3], "fail_start": [3], "recover_attempt": [3],
        "request_cancel": [2],
        "converge_cancellation": [4, 3],  # active attempts; try-lock; locks + re-read; writes + COMMIT
    }


def test_every_try_opens_with_begin_and_its_limits_and_ends_with_commit_after_the_writes(db: PgDatabase) -> None:
    port = watched(db)
    admit(port)
    port.recorder.log.clear()
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0 + 1)
    sent = port.recorder.log
    assert [s for s, _ in sent[:4]] == ["BEGIN ISOLATION LEVEL SERIALIZABLE", "SET LOCAL statement_timeout = 5000",
                                        "SET LOCAL lock_timeout = 1000",
                                        "SET LOCAL idle_in_transaction_session_timeout = 10000"]
    assert sent[-1] == ("COMMIT", False)  # sent with the writes, not on its own
    firsts = [s for s, first in sent if first]
    assert len(firsts) == 2 and firsts[0].startswith("BEGIN") and firsts[1].startswith("WITH cas AS (UPDATE ql3.runs")
    assert sent[-2][0].startswith("INSERT INTO ql3.run_events")


# ------------------------------------------------------------------------------------------------
# The lock order on the wire (storage.md §6.3) and the clock after the locks (§7)
def _kind(sql: str) -> str:
    for pattern, kind in ((r"pg_advisory_xact_lock", "authority"), (r"FROM ql3\.runs WHERE id = %s FOR UPDATE", "run"),
                          (r"FROM ql3\.step_runs WHERE .* FOR UPDATE", "steps"),
                          (r"FROM ql3\.run_attempts WHERE id = ANY\(%s\) ORDER BY id COLLATE \"C\" FOR UPDATE",
                           "attempts"),
                          (r"FROM ql3\.run_dispatch_leases WHERE .* FOR UPDATE", "leases"),
                          (r"clock_timestamp\(\)", "clock")):
        if re.search(pattern, sql):
            return kind
    return "other"


def test_worker_locks_go_out_in_the_adr_order_and_the_clock_after_them(db: PgDatabase) -> None:
    setup = PostgresAdapter(db, FixedClock())
    admit(setup)
    attempt = task(setup)
    port = watched(db, clock=DatabaseClock())
    port.execute("claim_lease", {"attemptId": attempt, "workerId": "w1", "durationMs": 60_000})
    all_kinds = [_kind(s) for s, _ in port.recorder.log]
    assert [k for k in all_kinds if k != "other"] == ["authority", "run", "steps", "attempts", "leases", "clock"]
    # one statement per lock level; the row locks and the clock read go out in one round trip
    starts = [i for i, (_, first) in enumerate(port.recorder.log) if first]
    run_at, clock_at = all_kinds.index("run"), all_kinds.index("clock")
    assert not any(run_at < i <= clock_at for i in starts)


def test_convergence_locks_in_the_adr_order_after_its_try_locks(db: PgDatabase) -> None:
    setup = PostgresAdapter(db, FixedClock())
    admit(setup)
    task(setup)
    setup.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0)
    port = watched(db, clock=DatabaseClock())
    port.execute("converge_cancellation", {"runId": "run-1"})
    sent = [s for s, _ in port.recorder.log]
    kinds = [k for k in map(_kind, sent) if k != "other"]
    assert kinds == ["run", "steps", "attempts", "leases", "clock"]
    assert any("pg_try_advisory_xact_lock" in s for s in sent[:sent.index(next(s for s in sent if _kind(s) == "run"))])


# ------------------------------------------------------------------------------------------------
# Deferred compare-and-sets (storage.md §5): a CAS that matches no row aborts its whole batch
class StaleRun(PgStore):
    """Hands the Run compare-and-set an `old` version that is not the stored one."""

    def cas_run(self, guard: str, old: Record, new: Record) -> None:
        super().cas_run(guard, old | {"version": old["version"] + 7}, new)


def test_a_deferred_cas_matching_no_row_rolls_back_every_write_of_its_batch(db: PgDatabase) -> None:
    admit(PostgresAdapter(db, FixedClock()), "run-1")
    port = watched(db, StaleRun)
    before = port.snapshot()
    port.recorder.log.clear()
    with pytest.raises(QlwfError) as err:
        port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a", "binding": plans.binding("a")},
                     now=T0 + 1)
    sent = [s for s, _ in port.recorder.log]
    assert err.value.to_json() == {"class": "Conflict", "code": T.FAMILIES["task_admission"].conflict,
                                   "reason": "concurrent_change"}
    assert port.snapshot() == before  # the Run CAS came first; the attempt, event and receipt never ran
    cas = next(i for i, s in enumerate(sent) if s.startswith("WITH cas AS (UPDATE ql3.runs"))
    assert [s.split(" (")[0] for s in sent[cas + 1:]] == [
        "INSERT INTO ql3.run_attempts", "INSERT INTO ql3.run_events",
        "INSERT INTO ql3.plugin_package_workflow_task_attempt_admissions", "COMMIT", "ROLLBACK"]
    assert port.stats.retries == {}


def test_the_server_refuses_a_cas_that_changed_no_row_and_skips_the_rest_of_the_batch(db: PgDatabase) -> None:
    port = PostgresAdapter(db, FixedClock())
    admit(port)
    conn = db.getconn()
    try:
        session = PgSession(conn)
        session.queue("BEGIN ISOLATION LEVEL SERIALIZABLE")
        session.queue("WITH cas AS (UPDATE ql3.runs SET priority = priority + 1 WHERE id = %s RETURNING 1) "
                      "SELECT ql3.require_one_row((SELECT count(*) FROM cas), %s)", ("run-1", "Run run-1"))
        session.queue("WITH cas AS (UPDATE ql3.runs SET priority = priority + 1 WHERE id = %s RETURNING 1) "
                      "SELECT ql3.require_one_row((SELECT count(*) FROM cas), %s)", ("no-such-run", "Run no-such-run"))
        session.queue("UPDATE ql3.runs SET priority = 99 WHERE id = %s", ("run-1",))
        with pytest.raises(ConcurrentChange, match="Run no-such-run"):
            session.commit()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR  # COMMIT never ran
        session.rollback()
    finally:
        db.putconn(conn)
    assert port.snapshot()["runs"][0]["priority"] == 0


# ------------------------------------------------------------------------------------------------
# The row cache: locked rows answer later reads; the try's own writes drop them
def _session(db: PgDatabase) -> Iterator[tuple[PgSession, PgStore]]:
    conn = db.getconn()
    session = PgSession(conn, pinned_snapshot=True)
    session.queue("BEGIN ISOLATION LEVEL SERIALIZABLE")
    try:
        yield session, PgStore(session)
    finally:
        session.rollback()
        db.putconn(conn)


def test_locked_rows_are_read_without_a_round_trip_until_a_write_of_the_try(db: PgDatabase) -> None:
    port = PostgresAdapter(db, FixedClock())
    admit(port)
    attempt = task(port)
    port.execute("claim_lease", {"attemptId": attempt, "workerId": "w1", "durationMs": 10_000}, now=T0)
    for session, store in _session(db):
        store.lock_run("run-1")
        store.lock_leases([attempt])
        assert session.round_trips == 0  # queued
        run = store.run("run-1")
        lease = store.lease(attempt)
        assert session.round_trips == 1  # both locks and the prefetched reads went out together
        assert run is not None and lease is not None and lease["version"] == 0
        assert store.admissions_of_run("run-1")[0]["run_id"] == "run-1" and store.last_event_time("run-1") == T0
        assert session.round_trips == 1
        new = lease | {"version": 1, "renewedAtMs": T0 + 1, "expiresAtMs": T0 + 20_000, "updatedAtMs": T0 + 1}
        store.cas_lease(lease, new)
        assert session.round_trips == 1  # the write is queued
        assert store.lease(attempt) == new  # read from the database, after the queued write
        assert session.round_trips == 2
        assert store.run("run-1") is run  # a lease write does not touch the cached Run


def test_a_write_queued_before_the_lock_rows_arrive_wins_over_them(db: PgDatabase) -> None:
    """The lock's rows arrive after the write was queued: they must not refill the dropped entry."""
    port = PostgresAdapter(db, FixedClock())
    admit(port)
    for session, store in _session(db):
        store.lock_run("run-1")  # queued: its rows arrive with the next round trip
        run = port.snapshot()["runs"][0]
        store.cas_run("counters_any_intent", run, run | {"version": run["version"] + 1,
                                                         "eventSequence": run["eventSequence"] + 1})
        store.insert_event(make_event(event_id="ev-x", run_id="run-1", sequence=run["eventSequence"] + 1,
                                      type_="workflow.test", actor=USER, payload={}, created_at_ms=T0 + 5))
        after = store.run("run-1")
        assert session.round_trips == 1  # lock, writes and the fresh read in one batch, in that order
        assert after is not None and after["version"] == run["version"] + 1
        assert store.cache.get(("run", "run-1")) is MISSING  # the lock's (older) row did not come back
        assert store.last_event_time("run-1") == T0 + 5


def test_a_step_run_of_another_run_is_still_found_after_a_run_scoped_lock(db: PgDatabase) -> None:
    port = PostgresAdapter(db, FixedClock())
    admit(port, "run-1")
    admit(port, "run-2")
    for _, store in _session(db):
        store.lock_step_runs("run-1", ["run-2:a"])  # locks nothing: that StepRun is not run-1's
        found = store.step_run("run-2:a")
        assert found is not None and found.record["runId"] == "run-2"


def test_without_one_snapshot_per_transaction_nothing_is_read_ahead(db: PgDatabase) -> None:
    port = PostgresAdapter(db, FixedClock())
    admit(port)
    conn = db.getconn()
    try:
        session = PgSession(conn, pinned_snapshot=False)
        session.queue("BEGIN ISOLATION LEVEL READ COMMITTED")
        store = PgStore(session)
        store.lock_run("run-1")
        assert len(session.pending) == 2  # BEGIN and the lock only
        session.rollback()
    finally:
        db.putconn(conn)


# ------------------------------------------------------------------------------------------------
# Retryable errors from inside a batch (storage.md §6.2)
@pytest.fixture
def failing_function(db: PgDatabase) -> Iterator[str]:
    """A function that raises the SQLSTATE it is given (the test database is throwaway)."""
    conn = db.getconn()
    try:
        conn.execute("CREATE OR REPLACE FUNCTION public.qlwf_test_fail(state text) RETURNS void LANGUAGE plpgsql "
                     "AS $fn$ BEGIN RAISE EXCEPTION USING ERRCODE = state, MESSAGE = 'injected ' || state; END $fn$")
        yield "public.qlwf_test_fail"
        conn.execute("DROP FUNCTION public.qlwf_test_fail(text)")
    finally:
        db.putconn(conn)


def failing_in_the_commit_batch(state: str, times: int) -> type[PgStore]:
    class Failing(PgStore):
        left = times

        def insert_event(self, event: Record) -> None:
            super().insert_event(event)
            if Failing.left > 0:
                Failing.left -= 1
                self.conn.queue("SELECT public.qlwf_test_fail(%s)", (state,))  # fails on the server, with COMMIT

    return Failing


@pytest.mark.usefixtures("failing_function")
@pytest.mark.parametrize("state", ["40001", "40P01", "55P03"])
def test_a_retryable_error_inside_the_commit_batch_reruns_the_command(db: PgDatabase, state: str) -> None:
    admit(PostgresAdapter(db, FixedClock()))
    port = watched(db, failing_in_the_commit_batch(state, 2))
    before = port.snapshot()
    result = port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0 + 1)
    assert result["status"] == "requested" and port.stats.retries == {state: 2}
    after = port.snapshot()
    assert after["runs"][0]["version"] == before["runs"][0]["version"] + 1
    assert [e["type"] for e in after["events"]].count("workflow.cancel_requested") == 1


def test_a_serialization_failure_of_a_queued_lock_is_retried(db: PgDatabase) -> None:
    """A FOR UPDATE of a row another session changed after this transaction's snapshot: 40001 from the
    lock batch (the Run lock is queued and goes out with the first read)."""

    class Raced(PgStore):
        raced = 0

        def lock_run(self, run_id: str) -> None:
            if Raced.raced == 0:
                Raced.raced += 1
                self.conn.execute("SELECT 1")  # BEGIN goes out; the snapshot is taken here
                with psycopg.connect(db.conninfo, autocommit=True) as other:
                    other.execute("UPDATE ql3.runs SET priority = priority WHERE id = %s", (run_id,))
            super().lock_run(run_id)

    port = watched(db, Raced)
    admit(port)
    assert port.execute("advance_frontier", {"runId": "run-1"}, now=T0 + 1)["status"] in ("unchanged", "advanced")
    assert Raced.raced == 1 and port.stats.retries == {"40001": 1}


# ------------------------------------------------------------------------------------------------
# wire.py: placeholders and prepared statements
def test_placeholders_are_numbered_in_order() -> None:
    assert wire.numbered("SELECT %s, %s WHERE a LIKE 'x%%'") == b"SELECT $1, $2 WHERE a LIKE 'x%'"
    with pytest.raises(ValueError, match="unsupported placeholder"):
        wire.numbered("SELECT %(name)s")


def test_a_statement_prepared_in_an_aborted_batch_is_prepared_again(db: PgDatabase) -> None:
    conn = db.getconn()
    try:
        fresh = "SELECT %s::integer + 41"
        with pytest.raises(psycopg.errors.DivisionByZero):
            wire.run(conn, [wire.Statement("SELECT 1 / 0"), wire.Statement(fresh, (1,))])  # Parse skipped
        assert wire.run(conn, [wire.Statement(fresh, (1,))]) == [[(42,)]]
        assert wire.run(conn, [wire.Statement(fresh, (1,))]) == [[(42,)]]  # now by its name
        names = conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                             ("%$1::integer + 41",)).fetchone()
        assert names == (1,)
    finally:
        db.putconn(conn)


def test_prepared_statements_survive_a_rollback(db: PgDatabase) -> None:
    """psycopg would deallocate everything on ROLLBACK if it prepared statements itself; it does not here."""
    conn = db.getconn()
    try:
        assert conn.prepare_threshold is None
        session = PgSession(conn)
        for _ in range(3):
            session.queue("BEGIN")
            assert session.fetchone("SELECT %s::integer", (7,)) == (7,)
            session.rollback()
        assert session.fetchone("SELECT %s::integer", (8,)) == (8,)
    finally:
        db.putconn(conn)
