"""The PostgreSQL backend (storage.md §3–§7) beyond what lockstep traces show: transaction discipline,
lock order, the clock, retries and error mapping, convergence authority, jsonb and bigint handling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from qlwf.conformance.backends.postgres import PostgresBackend
from qlwf.conformance.generate import plans
from qlwf.conformance.lockstep.model_port import ModelPort
from qlwf.impl.port import CommandPort, DatabaseClock, FixedClock
from qlwf.impl.postgres import codec
from qlwf.impl.postgres.adapter import PostgresAdapter
from qlwf.impl.postgres.database import PgDatabase
from qlwf.impl.postgres.session import PgSession
from qlwf.impl.postgres.store import PgStore
from qlwf.model import ids
from qlwf.model import tables as T
from qlwf.model.canonical import canonical_json
from qlwf.model.errors import QlwfError

pytestmark = pytest.mark.postgres

T0 = 1_000_000
USER = {"type": "user"}
Record = dict[str, Any]


def adapter(db: PgDatabase, store: Callable[[PgSession], PgStore] = PgStore,
            clock: Any = None) -> PostgresAdapter:
    return PostgresAdapter(db, clock if clock is not None else FixedClock(), store_factory=store)


def admit(port: CommandPort, run_id: str = "run-1", needs: dict[str, list[str]] | None = None,
          now: int | None = T0) -> Record:
    plan = plans.make_plan(run_id, run_id.replace("run", "plan"), needs or {"a": [], "b": ["a"]}, T0)
    port.execute("admit_workflow", {"plan": plan}, now=now)
    return plan


def claimed_attempt(port: PostgresAdapter, run_id: str = "run-1", now: int = T0) -> str:
    out = port.execute("admit_task_attempt", {"runId": run_id, "stepRunId": f"{run_id}:a",
                                              "binding": plans.binding("a")}, now=now)
    attempt_id: str = out["attempt"]["id"]
    port.execute("claim_lease", {"attemptId": attempt_id, "workerId": "w1", "durationMs": 10_000}, now=now)
    return attempt_id


def error_of(port: CommandPort, name: str, args: Any, now: int | None = T0) -> dict[str, str]:
    with pytest.raises(QlwfError) as err:
        port.execute(name, args, now=now)
    return err.value.to_json()


def other_connection(db: PgDatabase) -> psycopg.Connection[Any]:
    return psycopg.connect(db.conninfo, autocommit=True)


def same_server(conn: PgSession) -> str:
    """Conninfo of ``conn``'s database; ``info.dsn`` omits the password, which the server requires."""
    return make_conninfo(conn.info.dsn, password=conn.info.password)


def authority_key(conn: psycopg.Connection[Any], attempt_id: str) -> int:
    row = conn.execute("SELECT hashtextextended('ql3-attempt-authority:' || %s, 0)", (attempt_id,)).fetchone()
    assert row is not None
    return int(row[0])


# ------------------------------------------------------------------------------------------------
# Transactions, locks and the clock (storage.md §6.2–§6.4, §7)
class SettingsStore(PgStore):
    seen: ClassVar[list[tuple[Any, ...]]] = []

    def lock_run(self, run_id: str) -> None:
        row = self.conn.execute("SELECT current_setting('transaction_isolation'), current_setting('statement_timeout'),"
                                " current_setting('lock_timeout'),"
                                " current_setting('idle_in_transaction_session_timeout')").fetchone()
        assert row is not None
        SettingsStore.seen.append(tuple(row))
        super().lock_run(run_id)


def test_writing_commands_run_serializable_with_transaction_local_limits(db: PgDatabase) -> None:
    port = adapter(db, SettingsStore)
    plan = admit(port)
    SettingsStore.seen.clear()
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0 + 1)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0 + 2)  # existing
    assert SettingsStore.seen == [("serializable", "5s", "1s", "10s")] * 2
    commits = port.stats.commits
    assert port.execute("admit_workflow", {"plan": plan}, now=T0)["status"] == "existing"
    assert port.stats.commits == commits + 1  # a replay commits too
    with other_connection(db) as conn:  # limits are transaction-local: pooled sessions keep the defaults
        assert conn.execute("SHOW lock_timeout").fetchone() == ("0",)


class Recording(PgStore):
    """Logs every lock hook and checks, from another session, that the authority lock is really held
    by the time the Run row lock is asked for (the lock statements are queued and go out together
    with the next read: for a worker command, the attempt read between the two)."""

    calls: ClassVar[list[tuple[Any, ...]]] = []

    def lock_attempt_authority(self, attempt_id: str) -> None:
        super().lock_attempt_authority(attempt_id)
        Recording.calls.append(("authority", attempt_id))

    def _authority_held(self) -> None:
        last = Recording.calls[-1] if Recording.calls else ()
        if len(last) != 2 or last[0] != "authority":
            return
        with psycopg.connect(same_server(self.conn), autocommit=True) as other:
            taken = other.execute("SELECT pg_try_advisory_lock(hashtextextended('ql3-attempt-authority:' || %s, 0))",
                                  (last[1],)).fetchone()
        Recording.calls[-1] = (*last, taken == (False,))

    def try_lock_attempt_authorities(self, attempt_ids: Sequence[str]) -> bool:
        Recording.calls.append(("try", tuple(attempt_ids)))
        return super().try_lock_attempt_authorities(attempt_ids)

    def lock_run(self, run_id: str) -> None:
        self._authority_held()
        Recording.calls.append(("run", run_id))
        super().lock_run(run_id)

    def lock_step_runs(self, run_id: str, step_run_ids: Sequence[str] | None = None) -> None:
        Recording.calls.append(("steps", run_id, None if step_run_ids is None else tuple(step_run_ids)))
        super().lock_step_runs(run_id, step_run_ids)

    def lock_attempts(self, attempt_ids: Sequence[str]) -> None:
        Recording.calls.append(("attempts", tuple(attempt_ids)))
        super().lock_attempts(attempt_ids)

    def lock_leases(self, attempt_ids: Sequence[str]) -> None:
        Recording.calls.append(("leases", tuple(attempt_ids)))
        super().lock_leases(attempt_ids)


class RecordingClock(FixedClock):
    def read(self, database_time: Callable[[], int]) -> int:
        Recording.calls.append(("clock",))
        return super().read(database_time)


def test_locks_follow_the_global_order_and_the_clock_is_read_after_them(db: PgDatabase) -> None:
    port = adapter(db, Recording, RecordingClock(T0))

    def locks(name: str, args: Record, now: int = T0) -> list[tuple[Any, ...]]:
        Recording.calls.clear()
        port.execute(name, args, now=now)
        return list(Recording.calls)

    plan = plans.make_plan("run-1", "plan-1", {"a": [], "b": [], "c": ["a", "b"]}, T0)
    assert locks("admit_workflow", {"plan": plan}) == [("clock",)]  # no locks before its reads
    assert locks("advance_frontier", {"runId": "run-1"}) == [("run", "run-1"), ("steps", "run-1", None), ("clock",)]
    admitted = [port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": f"run-1:{k}",
                                                    "binding": plans.binding(k)}, now=T0)["attempt"]["id"]
                for k in ("a", "b")]
    a = admitted[0]
    assert locks("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a", "binding": plans.binding("a")}) == [
        ("run", "run-1"), ("steps", "run-1", ("run-1:a",)), ("clock",)]
    worker = [("authority", a, True), ("run", "run-1"), ("steps", "run-1", ("run-1:a",)), ("attempts", (a,)),
              ("leases", (a,)), ("clock",)]
    assert locks("claim_lease", {"attemptId": a, "workerId": "w1", "durationMs": 5000}) == worker
    assert locks("recover_attempt", {"attemptId": a, "evidence": "unknown"}, T0 + 5000) == worker
    assert locks("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, T0 + 5000) == [
        ("run", "run-1"), ("clock",)]
    active = tuple(sorted(x["id"] for x in port.snapshot()["attempts"] if x["status"] in T.ACTIVE_ATTEMPT))
    assert len(active) == 1 and locks("converge_cancellation", {"runId": "run-1"}, T0 + 5000) == [
        ("try", active), ("run", "run-1"), ("steps", "run-1", None), ("attempts", active), ("leases", active),
        ("clock",)]


class CountingClock(FixedClock):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.reads = 0

    def read(self, database_time: Callable[[], int]) -> int:
        self.reads += 1
        return super().read(database_time)


def test_the_page_reads_the_clock_once_per_workflow(db: PgDatabase) -> None:
    clock = CountingClock(T0)
    port = adapter(db, clock=clock)
    for i in range(3):
        admit(port, f"run-{i}")
        port.execute("request_cancel", {"runId": f"run-{i}", "reason": "user", "actor": USER})
    clock.reads = 0
    page = port.execute("converge_cancellation_page", {"limit": 2}, now=T0 + 5)
    assert (page["scanned"], page["settledRuns"], page["hasMore"], clock.reads) == (2, 2, True, 2)
    assert page["next"] == {"cancelRequestedAtMs": T0, "runId": "run-1"}


def test_database_clock_is_the_servers_clock_in_milliseconds(db: PgDatabase) -> None:
    port = adapter(db, clock=DatabaseClock())
    admit(port, needs={"a": []}, now=None)
    before = int(time.time() * 1000)
    result = port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER})
    after = int(time.time() * 1000)
    assert before - 50 <= result["cancelRequestedAtMs"] <= after + 50
    assert port.execute("recovery_candidates", {"limit": 3})["candidates"] == []  # statement time, no transaction
    with pytest.raises(TypeError):
        port.execute("task_candidates", {"limit": 1}, now=5)


# ------------------------------------------------------------------------------------------------
# Retries (storage.md §6.2)
class RacedOnce(PgStore):
    """Before its first Run lock, another session updates the Run after this transaction's snapshot."""

    raced = 0

    def lock_run(self, run_id: str) -> None:
        if RacedOnce.raced == 0:
            RacedOnce.raced += 1
            self.conn.execute("SELECT 1")  # the SERIALIZABLE snapshot is taken here
            with psycopg.connect(same_server(self.conn), autocommit=True) as other:
                other.execute("UPDATE ql3.runs SET priority = priority WHERE id = %s", (run_id,))
        super().lock_run(run_id)


def test_a_real_serialization_failure_is_retried_on_a_fresh_try(db: PgDatabase) -> None:
    port = adapter(db, RacedOnce)
    admit(port)
    RacedOnce.raced = 0
    result = port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0 + 1)
    assert result["status"] == "requested" and RacedOnce.raced == 1
    assert port.stats.retries == {"40001": 1} and port.stats.exhausted == 0
    assert [e["type"] for e in port.snapshot()["events"]].count("workflow.cancel_requested") == 1


def failing_cas(error: type[psycopg.Error], times: int) -> type[PgStore]:
    class Failing(PgStore):
        left = times

        def cas_run(self, guard: str, old: Record, new: Record) -> None:
            super().cas_run(guard, old, new)
            if Failing.left > 0:
                Failing.left -= 1
                raise error("injected")

    return Failing


@pytest.mark.parametrize("error", [psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected,
                                   psycopg.errors.LockNotAvailable])
def test_retryable_sqlstates_rerun_everything_including_the_clock(db: PgDatabase, error: type[psycopg.Error]) -> None:
    clock = CountingClock(T0 + 1)
    port = adapter(db, failing_cas(error, 2), clock)
    admit(port)
    clock.reads = 0
    assert port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER})["status"] == "requested"
    assert clock.reads == 3 and port.stats.retries == {error.sqlstate: 2}
    assert port.snapshot()["runs"][0]["version"] == 4  # the rolled-back tries left nothing behind


def test_retry_exhausted_after_three_tries_with_nothing_written(db: PgDatabase) -> None:
    clock = CountingClock(T0 + 1)
    port = adapter(db, failing_cas(psycopg.errors.SerializationFailure, 99), clock)
    admit(port)
    before, clock.reads = port.snapshot(), 0
    assert error_of(port, "request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}) == {
        "class": "Unavailable", "code": T.FAMILIES["cancel_request"].unavailable, "reason": "retry_exhausted"}
    assert clock.reads == 3 and port.stats.retries == {"40001": 3} and port.stats.exhausted == 1
    assert port.snapshot() == before


def test_a_held_row_lock_times_out_after_one_second_per_try(db: PgDatabase) -> None:
    port = adapter(db)
    admit(port)
    with other_connection(db) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM ql3.runs WHERE id = 'run-1' FOR UPDATE")
        start = time.monotonic()
        err = error_of(port, "request_cancel", {"runId": "run-1", "reason": "user", "actor": USER})
        elapsed = time.monotonic() - start
        holder.execute("ROLLBACK")
    assert err["reason"] == "retry_exhausted" and port.stats.retries == {"55P03": 3}
    assert 2.9 < elapsed < 6


def test_no_connection_is_storage_unreachable_at_once() -> None:
    database = PgDatabase("host=/nonexistent-qlwf-socket-dir port=1 user=nobody dbname=none connect_timeout=1",
                          size=1, timeout_s=0.3)
    try:
        port = PostgresAdapter(database)
        start = time.monotonic()
        assert error_of(port, "request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}) == {
            "class": "Unavailable", "code": T.FAMILIES["cancel_request"].unavailable, "reason": "storage_unreachable"}
        assert time.monotonic() - start < 2 and port.stats.retries == {}
        assert error_of(port, "task_candidates", {"limit": 2})["reason"] == "storage_unreachable"
    finally:
        database.close()


# ------------------------------------------------------------------------------------------------
# Error mapping (storage.md §6.2, §5)
def test_constraint_violation_maps_to_conflict_and_rolls_back(db: PgDatabase) -> None:
    port = adapter(db)
    admit(port)
    admit(port, "run-2")
    event_id = ids.cancel_request_event_id("run-1", T0 + 7, "user")
    with other_connection(db) as conn:  # an unrelated event already holds the id request_cancel will derive
        conn.execute("INSERT INTO ql3.run_events (id, run_id, sequence, type, dedupe_key, actor_type, payload, "
                     "created_at_ms) VALUES (%s, 'run-2', 99, 'x', %s, 'system', '{}', %s)", (event_id, event_id, T0))
    before = port.snapshot()
    assert error_of(port, "request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, T0 + 7) == {
        "class": "Conflict", "code": T.FAMILIES["cancel_request"].conflict, "reason": "constraint_violation"}
    assert port.snapshot() == before and port.stats.retries == {}


def test_other_sqlstates_map_to_storage_error(db: PgDatabase) -> None:
    class Dividing(PgStore):
        def insert_event(self, event: Record) -> None:
            self.conn.execute("SELECT 1 / 0")

    port = adapter(db, Dividing)
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, T0)
    err = error_of(port, "admit_workflow", {"plan": plan})
    assert (err["class"], err["reason"]) == ("Unavailable", "storage_error")
    assert all(records == [] for records in port.snapshot().values())  # the Run insert rolled back


class DigestChangedUnderneath(PgStore):
    """Another writer changes a StepRun (digest and mirror) between the read and the compare-and-set."""

    def cas_step_run(self, mutation: Record) -> None:
        self.conn.execute("UPDATE ql3.step_runs SET step_run_digest = %s, "
                          "step_run_json = jsonb_set(step_run_json, '{stepRunDigest}', to_jsonb(%s::text)) "
                          "WHERE id = %s", ("f" * 64, "f" * 64, mutation["stepRun"]["id"]))
        super().cas_step_run(mutation)


def test_a_compare_and_set_that_matches_no_row_is_concurrent_change(db: PgDatabase) -> None:
    port = adapter(db, DigestChangedUnderneath)
    admit(port)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0)
    before = port.snapshot()
    assert error_of(port, "converge_cancellation", {"runId": "run-1"}, T0 + 1) == {
        "class": "Conflict", "code": T.FAMILIES["cancellation"].conflict, "reason": "concurrent_change"}
    assert port.snapshot() == before  # the simulated writer's change rolled back with the refused command


# ------------------------------------------------------------------------------------------------
# Convergence authority (storage.md §6.3–§6.4)
def test_a_held_authority_lock_fails_convergence_and_the_page_records_locked(db: PgDatabase) -> None:
    port = adapter(db)
    admit(port)
    attempt_id = claimed_attempt(port)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0 + 1)
    before = port.snapshot()
    with other_connection(db) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (authority_key(holder, attempt_id),))
        assert error_of(port, "converge_cancellation", {"runId": "run-1"}, T0 + 2) == {
            "class": "Conflict", "code": T.FAMILIES["cancellation"].conflict, "reason": "authority_locked"}
        page = port.execute("converge_cancellation_page", {"limit": 4}, now=T0 + 3)
        assert page["outcomes"] == [{"runId": "run-1", "status": "locked", "settledAttempts": 0,
                                     "stepMutationCount": 0, "terminalStatus": None, "blockedStepRunIds": [],
                                     "error": None}]
        assert (page["blocked"], page["hasMore"]) == (1, True)
        assert port.snapshot() == before
        holder_pid = holder.info.backend_pid
    # A session's advisory locks go when its server process has exited, which trails the client's close.
    with other_connection(db) as watcher:
        deadline = time.monotonic() + 10
        while watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (holder_pid,)).fetchone():
            assert time.monotonic() < deadline, "the holder's server process outlived its connection by 10 s"
            time.sleep(0.01)
    assert port.execute("converge_cancellation", {"runId": "run-1"}, now=T0 + 4)["status"] == "blocked"


class LateAttempt(PgStore):
    """The active attempts read before locking miss one that is there once the locks are held."""

    def __init__(self, conn: PgSession) -> None:
        super().__init__(conn)
        self.reads = 0

    def active_attempts_of_run(self, run_id: str) -> list[Record]:
        self.reads += 1
        found = super().active_attempts_of_run(run_id)
        return found[:-1] if self.reads == 1 else found


def test_an_attempt_outside_the_try_locked_set_is_authority_drift(db: PgDatabase) -> None:
    port = adapter(db, LateAttempt)
    admit(port)
    claimed_attempt(port)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": USER}, now=T0 + 1)
    before = port.snapshot()
    assert error_of(port, "converge_cancellation", {"runId": "run-1"}, T0 + 2) == {
        "class": "Unavailable", "code": T.FAMILIES["cancellation"].unavailable, "reason": "authority_drift"}
    assert port.snapshot() == before


# ------------------------------------------------------------------------------------------------
# jsonb, bigint, drift injection, lifecycle
def test_jsonb_reads_back_in_canonical_key_order(db: PgDatabase) -> None:
    port, model = adapter(db), ModelPort(T0)
    ports: tuple[CommandPort, ...] = (port, model)
    for p in ports:
        admit(p)
        p.execute("request_cancel", {"runId": "run-1", "reason": "policy", "actor": USER}, now=T0 + 1)
    with other_connection(db) as conn:
        stored = conn.execute("SELECT payload::text FROM ql3.run_events WHERE sequence = 1").fetchone()
    admitted = model.snapshot()["events"][0]["payload"]
    assert stored is not None and stored[0] != canonical_json(admitted).decode()  # jsonb reorders keys
    assert canonical_json(port.snapshot()) == canonical_json(model.snapshot())  # rebuilt byte for byte


def test_reordering_never_drops_keys() -> None:
    assert list(codec.ordered({"zz": 1, "version": 2, "cancel_reason": "x"}, ("cancel_reason", "version"))) == [
        "cancel_reason", "version", "zz"]
    assert codec.payload_value({"b": 1, "a": 2}) == {"b": 1, "a": 2}  # unknown shape: kept as stored
    assert codec.ordered([1, 2], ("a",)) == [1, 2]


def test_bigint_columns_accept_decimal_strings() -> None:
    assert codec.bigint("1700000000000") == 1700000000000 and codec.bigint(5) == 5
    assert codec.bigint("12abc") == "12abc"  # not a number: left for the record rules to refuse
    lease = codec.LEASES.to_record(("wta:1", "run-1", "leased", 0, 1, "w1", "1000", "1000", "6000", "1000",
                                    None, None, None))
    assert (lease["acquiredAtMs"], lease["expiresAtMs"]) == (1000, 6000)


def test_drift_injection_bypasses_checks_once_and_reset_restores_them(pg_backend: PostgresBackend) -> None:
    port = pg_backend.open()
    assert isinstance(port, PostgresAdapter)
    admit(port)
    port.corrupt("stepRuns", ["run-1:b"], {"readyAtMs": 5})  # pending with readyAtMs violates two checks
    model = ModelPort(T0)
    admit(model)
    model.corrupt("stepRuns", ["run-1:b"], {"readyAtMs": 5})
    assert canonical_json(port.snapshot()) == canonical_json(model.snapshot())
    assert error_of(port, "advance_frontier", {"runId": "run-1"}, T0 + 1)["reason"] == "step_drift"
    with other_connection(pg_backend.database) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):  # the checks are back for every later write
            conn.execute("UPDATE ql3.step_runs SET ready_at_ms = 7 WHERE id = 'run-1:a'")
        pg_backend.open().close()
        invalid = conn.execute("SELECT count(*) FROM pg_constraint WHERE NOT convalidated").fetchone()
    assert invalid == (0,)
    port.close()


def test_step_run_json_disagreeing_with_its_columns_is_step_drift(pg_backend: PostgresBackend) -> None:
    """Mirror-only drift the checks normally prevent: the loads compare jsonb with the columns themselves."""
    port = pg_backend.open()
    admit(port)
    with other_connection(pg_backend.database) as conn, conn.transaction():
        name = "ql3_step_runs_json_mirror_ck"
        row = conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = %s", (name,)).fetchone()
        assert row is not None
        conn.execute(f"ALTER TABLE ql3.step_runs DROP CONSTRAINT {name}")
        conn.execute("UPDATE ql3.step_runs SET step_run_json = jsonb_set(step_run_json, '{status}', '\"ready\"') "
                     "WHERE id = 'run-1:b'")
        conn.execute(f"ALTER TABLE ql3.step_runs ADD CONSTRAINT {name} {row[0]} NOT VALID")
    pg_backend.database.mark_checks_invalidated()
    before = port.snapshot()
    err = error_of(port, "advance_frontier", {"runId": "run-1"}, T0 + 1)
    assert (err["class"], err["reason"]) == ("Unavailable", "step_drift")
    assert port.snapshot() == before
    port.close()


def test_closed_adapter_is_storage_closed_after_argument_checks(db: PgDatabase) -> None:
    port = adapter(db)
    port.close()
    assert error_of(port, "advance_frontier", {"runId": "bad id!"})["reason"] == "argument_invalid"
    assert error_of(port, "advance_frontier", {"runId": "run-1"}) == {
        "class": "Unavailable", "code": T.FAMILIES["frontier"].unavailable, "reason": "storage_closed"}
    assert error_of(port, "frontier_candidates", {"limit": 0})["reason"] == "page_invalid"
    with pytest.raises(ValueError):
        port.execute("drop_everything", {})


def test_one_adapter_serves_many_threads(db: PgDatabase) -> None:
    port = PostgresAdapter(db, FixedClock(T0))
    for i in range(4):
        admit(port, f"run-{i}")
    errors: list[BaseException] = []

    def cancel(i: int) -> None:
        try:
            port.execute("request_cancel", {"runId": f"run-{i}", "reason": "user", "actor": USER})
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=cancel, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and all("cancelRequestedAtMs" in r for r in port.snapshot()["runs"])
