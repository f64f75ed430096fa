"""Behaviours no other test checked, found by the mutation run's survivors (docs/mutation-survivors.md).

Each case goes through the command port only (plus a raw write for drift, like the other SQLite
tests), so it names a behaviour of the spec, not a line of impl/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from qlwf.conformance.generate import plans
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.model.errors import QlwfError

T0 = 1_000_000
ADMISSIONS = "QingLong3PluginPackageWorkflowAdmissions"
ATTEMPTS = "RunAttempts"
LEASES = "RunDispatchLeases"
RECEIPTS = "QingLong3PluginPackageWorkflowTaskAttemptAdmissions"


@pytest.fixture
def port() -> Iterator[SqliteAdapter]:
    with SqliteAdapter() as p:
        yield p


def admit(port: SqliteAdapter, run_id: str = "run-1", plan_id: str = "plan-1") -> dict[str, Any]:
    plan = plans.make_plan(run_id, plan_id, {"a": [], "b": ["a"]}, T0)
    port.execute("admit_workflow", {"plan": plan}, now=T0)
    return plan


def error_of(port: SqliteAdapter, name: str, args: Any, now: int = T0) -> dict[str, str]:
    with pytest.raises(QlwfError) as err:
        port.execute(name, args, now=now)
    return err.value.to_json()


def raw_update(port: SqliteAdapter, sql: str) -> None:
    """Write behind the adapter's back with the row checks off, like a corrupted store."""
    conn = port.connection
    conn.execute("PRAGMA ignore_check_constraints = ON")
    try:
        conn.execute(sql)
    finally:
        conn.execute("PRAGMA ignore_check_constraints = OFF")


def claimed(port: SqliteAdapter) -> dict[str, Any]:
    """run-1:a admitted and claimed by w1 at T0; the worker arguments."""
    admit(port)
    out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a",
                                              "binding": plans.binding("a")}, now=T0)
    attempt_id = out["attempt"]["id"]
    port.execute("claim_lease", {"attemptId": attempt_id, "workerId": "w1", "durationMs": 10_000}, now=T0)
    return {"attemptId": attempt_id, "workerId": "w1", "leaseGeneration": 1}


# ---- argument ranges at their edges (commands.md worker arguments) -----------------------------
@pytest.mark.parametrize("command", ["renew_lease", "start_attempt", "record_running"])
def test_lease_generation_zero_is_invalid(port: SqliteAdapter, command: str) -> None:
    """leaseGeneration is 1..2^31−1: 0 is refused as Invalid before any read, not as a stale lease."""
    extras: dict[str, dict[str, Any]] = {"renew_lease": {"durationMs": 10_000}, "start_attempt": {"timeoutMs": None}}
    err = error_of(port, command, claimed(port) | {"leaseGeneration": 0} | extras.get(command, {}), now=T0 + 1)
    assert err["class"] == "Invalid" and err["reason"] == "argument_invalid"


@pytest.mark.parametrize(("exit_code", "valid"), [(-2147483648, True), (-2147483649, False),
                                                  (2147483647, True), (2147483648, False)])
def test_exit_code_is_a_32_bit_integer(port: SqliteAdapter, exit_code: int, valid: bool) -> None:
    worker = claimed(port)
    port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    args = worker | {"exitCode": exit_code}
    if valid:
        assert port.execute("complete_attempt", args, now=T0 + 2)["attempt"]["exitCode"] == exit_code
    else:
        err = error_of(port, "complete_attempt", args, now=T0 + 2)
        assert err["class"] == "Invalid" and err["reason"] == "argument_invalid"


# ---- admission replay (frontier.md §3.2) -------------------------------------------------------
@pytest.mark.parametrize("order", ["before", "after"])
def test_a_plan_id_admitted_with_another_digest_conflicts_whichever_digest_sorts_first(
        port: SqliteAdapter, order: str) -> None:
    """Same planId, other plan: plan_id_conflict, whether the new digest sorts before or after the stored one."""
    stored = admit(port)["planDigest"]
    for k in range(2, 200):
        other = plans.make_plan(f"run-{k}", "plan-1", {"a": [], "b": ["a"]}, T0)
        if (other["planDigest"] < stored) == (order == "before"):
            break
    else:
        pytest.fail(f"no plan whose digest sorts {order} the stored one")
    err = error_of(port, "admit_workflow", {"plan": other}, now=T0 + 1)
    assert err == {"class": "Conflict", "code": err["code"], "reason": "plan_id_conflict"}


@pytest.mark.parametrize("drift", [
    'UPDATE "Runs" SET created_at_ms = created_at_ms - 1',  # an identity key below the frozen value
    'UPDATE "Runs" SET created_at_ms = created_at_ms + 1',  # and above it
    'UPDATE "Runs" SET event_sequence = event_sequence + 1',  # version below eventSequence
    'UPDATE "RunEvents" SET created_at_ms = created_at_ms - 1 WHERE sequence = 1',  # an event sorting before
    f'UPDATE "{ADMISSIONS}" SET step_count = step_count - 1',  # an admission column below the plan's
], ids=["identity-below", "identity-above", "sequence-above-version", "event-before", "admission-column-below"])
def test_an_admission_replay_refuses_drift_in_either_direction(port: SqliteAdapter, drift: str) -> None:
    plan = admit(port)
    raw_update(port, drift)
    err = error_of(port, "admit_workflow", {"plan": plan}, now=T0 + 1)
    assert err["class"] == "Unavailable" and err["reason"] == "admission_drift"


def test_an_admission_replay_of_a_run_past_256_events_is_existing(port: SqliteAdapter) -> None:
    """Counters that agree are not drift at any size (ints above 256 are distinct objects in CPython)."""
    plan = admit(port)
    raw_update(port, 'UPDATE "Runs" SET version = 300, event_sequence = 300')
    assert port.execute("admit_workflow", {"plan": plan}, now=T0 + 1)["status"] == "existing"


# ---- transaction counters ----------------------------------------------------------------------
def test_stats_count_commits_and_failures(port: SqliteAdapter) -> None:
    plan = admit(port)
    port.execute("admit_workflow", {"plan": plan}, now=T0 + 1)  # a replay commits too
    error_of(port, "advance_frontier", {"runId": "run-9"}, now=T0 + 2)
    assert (port.stats.commits, port.stats.failures, port.stats.exhausted) == (2, 1, 0)


# ---- cancellation convergence (cancellation.md §7) ---------------------------------------------
@pytest.mark.parametrize(("reason", "drifted"), [("user", "timeout"), ("timeout", "user")])
def test_a_settled_run_whose_status_disagrees_with_its_cancel_reason_is_terminal_drift(
        port: SqliteAdapter, reason: str, drifted: str) -> None:
    """Whichever of the two target statuses sorts first, the mismatch is drift, not `settled`."""
    admit(port)
    port.execute("request_cancel", {"runId": "run-1", "reason": reason, "actor": {"type": "user"}}, now=T0 + 1)
    assert port.execute("converge_cancellation", {"runId": "run-1"}, now=T0 + 2)["status"] == "terminal"
    assert port.execute("converge_cancellation", {"runId": "run-1"}, now=T0 + 3)["status"] == "settled"
    raw_update(port, f"UPDATE \"Runs\" SET cancel_reason = '{drifted}'")
    err = error_of(port, "converge_cancellation", {"runId": "run-1"}, now=T0 + 4)
    assert err["class"] == "Unavailable" and err["reason"] == "terminal_drift"


# ---- worker commands against an attempt in the wrong state (commands.md §4.6–§4.12) ------------
def cancelled_while_claimed(port: SqliteAdapter) -> dict[str, Any]:
    """run-1:a claimed, the Run cancelled, the lease declined, the Run converged: the attempt is `cancelled`
    (the one attempt status that sorts before `claimed`)."""
    worker = claimed(port)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}}, now=T0 + 1)
    port.execute("release_lease", worker | {"reason": "declined"}, now=T0 + 2)
    port.execute("converge_cancellation", {"runId": "run-1"}, now=T0 + 3)
    return worker


def test_claiming_a_cancelled_attempt_is_not_eligible_for_its_state(port: SqliteAdapter) -> None:
    worker = cancelled_while_claimed(port)
    out = port.execute("claim_lease", {"attemptId": worker["attemptId"], "workerId": "w2", "durationMs": 10_000},
                       now=T0 + 4)
    assert (out["status"], out["reason"]) == ("not_eligible", "attempt_state_mismatch")


def test_releasing_a_starting_attempt_is_an_attempt_state_mismatch(port: SqliteAdapter) -> None:
    worker = claimed(port)
    port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    err = error_of(port, "release_lease", worker | {"reason": "declined"}, now=T0 + 2)
    assert (err["class"], err["reason"]) == ("Conflict", "attempt_state_mismatch")


@pytest.mark.parametrize("status", ["failed", "succeeded", "timed_out"])  # before and after 'running'
@pytest.mark.parametrize("command", ["start_attempt", "record_running"])
def test_worker_commands_refuse_a_run_drifted_out_of_running(port: SqliteAdapter, command: str, status: str) -> None:
    worker = claimed(port)
    if command == "record_running":
        port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    raw_update(port, f"UPDATE \"Runs\" SET status = '{status}', finished_at_ms = {T0 + 1}"
                     + (", error_code = 'x'" if status != "succeeded" else ""))
    args = worker | ({"timeoutMs": None} if command == "start_attempt" else {})
    err = error_of(port, command, args, now=T0 + 2)
    assert (err["class"], err["reason"]) == ("Conflict", "run_state_mismatch")


# ---- counter ceilings at INT31_MAX (commands.md §2.5: exactly the counters a command moves) -----
INT31_MAX = 2147483647


def at_ceiling(port: SqliteAdapter, version: int = INT31_MAX) -> None:
    raw_update(port, f'UPDATE "Runs" SET version = {version}, event_sequence = {version}')


def test_a_renew_that_writes_no_run_event_succeeds_at_the_run_ceiling(port: SqliteAdapter) -> None:
    worker = claimed(port)
    at_ceiling(port)
    assert port.execute("renew_lease", worker | {"durationMs": 10_000}, now=T0 + 1)["status"] == "renewed"


@pytest.mark.parametrize("command", ["release_lease", "start_attempt"])
def test_a_command_that_appends_a_run_event_overflows_at_the_run_ceiling(port: SqliteAdapter, command: str) -> None:
    worker = claimed(port)
    at_ceiling(port)
    extras: dict[str, dict[str, Any]] = {"release_lease": {"reason": "declined"}, "start_attempt": {"timeoutMs": None}}
    err = error_of(port, command, worker | extras[command], now=T0 + 1)
    assert (err["class"], err["reason"]) == ("Unavailable", "counter_overflow")


def test_completing_an_attempt_overflows_at_the_lease_version_ceiling(port: SqliteAdapter) -> None:
    worker = claimed(port)
    port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    raw_update(port, f'UPDATE "{LEASES}" SET version = {INT31_MAX}')
    raw_update(port, f'UPDATE "{ATTEMPTS}" SET lease_version = {INT31_MAX}')
    err = error_of(port, "complete_attempt", worker | {"exitCode": 0}, now=T0 + 2)
    assert (err["class"], err["reason"]) == ("Unavailable", "counter_overflow")


# ---- LOAD-RUN and the task receipt of an epoch --------------------------------------------------
@pytest.mark.parametrize("drift", [
    'UPDATE "Runs" SET version = version + 1',  # version above eventSequence
    'UPDATE "Runs" SET event_sequence = event_sequence + 1',  # and below it
    f'UPDATE "Runs" SET finished_at_ms = {T0}',  # a running Run with a finish time, nothing else off
], ids=["version-above", "version-below", "finished-while-running"])
def test_a_run_drifted_from_its_own_shape_is_run_drift(port: SqliteAdapter, drift: str) -> None:
    admit(port)
    raw_update(port, drift)
    err = error_of(port, "advance_frontier", {"runId": "run-1"}, now=T0 + 1)
    assert (err["class"], err["reason"]) == ("Unavailable", "run_drift")


def test_a_stored_receipt_of_the_epoch_with_another_step_digest_is_receipt_drift(port: SqliteAdapter) -> None:
    admit(port)
    args = {"runId": "run-1", "stepRunId": "run-1:a", "binding": plans.binding("a")}
    digest = port.execute("admit_task_attempt", args, now=T0)["receipt"]["stepRunDigest"]
    other = "0" * 64 if digest != "0" * 64 else "1" * 64
    raw_update(port, f"UPDATE \"{RECEIPTS}\" SET receipt_json = replace(receipt_json, '{digest}', '{other}')")
    err = error_of(port, "admit_task_attempt", args, now=T0 + 1)
    assert (err["class"], err["reason"]) == ("Unavailable", "receipt_drift")


def test_a_frontier_candidate_row_with_a_malformed_admission_time_is_candidate_drift(port: SqliteAdapter) -> None:
    """storage.md §8: each field of a candidate row is checked on its own (here: the run id and digest are fine)."""
    worker = claimed(port)
    port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    port.execute("complete_attempt", worker | {"exitCode": 0}, now=T0 + 2)  # run-1:b becomes a frontier candidate
    page = port.execute("frontier_candidates", {"limit": 5}, now=T0 + 3)
    assert [c["runId"] for c in page["candidates"]] == ["run-1"]
    raw_update(port, f'UPDATE "{ADMISSIONS}" SET admitted_at_ms = -1')
    err = error_of(port, "frontier_candidates", {"limit": 5}, now=T0 + 3)
    assert (err["class"], err["reason"]) == ("Unavailable", "candidate_drift")


# ---- the SQLite concurrency host (qlwf conform --concurrency K) ---------------------------------
def test_the_sqlite_concurrency_host_refuses_only_more_workers_than_the_authority_queues() -> None:
    from qlwf.impl.sqlite.concurrency import SqliteConcurrencyHost
    from qlwf.model import tables as T

    host = SqliteConcurrencyHost()
    assert host.capacity_problem(2) is None
    assert host.capacity_problem(T.SQLITE_MAX_PENDING_OPERATIONS) is None
    assert str(T.SQLITE_MAX_PENDING_OPERATIONS) in (host.capacity_problem(T.SQLITE_MAX_PENDING_OPERATIONS + 1) or "")


# ---- the schema script splitter and the SQLite version floor (impl/sqlite/migrations.py) --------
@pytest.mark.parametrize("tail", [
    "\n-- a trailing line comment\n",  # text right after a line comment's newline
    "\n/*/ a block comment whose text starts with a slash */\n",  # '*/' is searched after the opening '/*'
    "\n-- " + "x" * 300 + "\n",  # a blank tail longer than the small-int cache
], ids=["line-comment", "slash-block-comment", "long-comment"])
def test_a_script_whose_tail_is_only_comments_splits_cleanly(tail: str) -> None:
    from qlwf.impl.sqlite.migrations import iter_statements

    assert list(iter_statements("SELECT 1;" + tail)) == ["SELECT 1;"]


def test_a_too_old_sqlite_is_refused_naming_the_minimum_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from qlwf.impl.sqlite.migrations import DatabaseOpenError, open_database

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 37, 2))
    with pytest.raises(DatabaseOpenError, match=r">= 3\.38\.0\)"):
        open_database(":memory:")


# ---- drift injection (FaultInjection): a null patch value per kind -------------------------------
def test_a_null_patch_on_a_step_run_keeps_the_key_as_null_in_its_json_mirror(port: SqliteAdapter) -> None:
    """A StepRun keeps every key (nullable ones as null): a null patch sets the key to null, and the
    JSON mirror agrees with the columns, so the store holds record-level drift only."""
    admit(port)
    port.corrupt("stepRuns", ["run-1:a"], {"readyAtMs": None})
    (text,) = port.connection.execute("SELECT step_run_json FROM \"StepRuns\" WHERE id = 'run-1:a'").fetchone()
    stored = json.loads(text)
    assert "readyAtMs" in stored and stored["readyAtMs"] is None
    assert stored == next(s for s in port.snapshot()["stepRuns"] if s["id"] == "run-1:a")


# ---- the convergence page (commands.md §4.18) ----------------------------------------------------
def test_a_storage_error_in_the_pages_has_more_query_is_unavailable(port: SqliteAdapter,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from qlwf.impl.sqlite import queries

    def broken(conn: sqlite3.Connection) -> bool:
        raise sqlite3.OperationalError("disk I/O error")

    admit(port)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}}, now=T0 + 1)
    monkeypatch.setattr(queries, "any_cancellation_candidate", broken)
    err = error_of(port, "converge_cancellation_page", {"limit": 5}, now=T0 + 2)
    assert (err["class"], err["reason"]) == ("Unavailable", "storage_error")


# ---- the PostgreSQL concurrency host's connection budget (no server needed) --------------------
def test_the_postgres_concurrency_host_counts_one_connection_for_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """K pooled connections plus the harness's own must fit the server's headroom."""
    from qlwf.conformance.backends.postgres import PostgresConcurrencyHost
    from qlwf.conformance.faults import outage

    class Server:
        def dsn(self) -> str:
            return "host=unused"

    monkeypatch.setattr(outage, "connection_headroom", lambda dsn: outage.Headroom(13, 3, 2))  # 8 available
    host = PostgresConcurrencyHost(Server())  # type: ignore[arg-type]
    assert host.capacity_problem(7) is None
    assert "needs 9 connections" in (host.capacity_problem(8) or "")
