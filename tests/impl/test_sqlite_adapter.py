"""The SQLite backend (storage.md §3–§7) beyond what lockstep traces can show.

Lockstep traces compare outcomes and snapshots with the model; these tests cover what the model
cannot express: transactions and the operation queue, the clock port, compare-and-set under a
concurrent writer, storage error mapping, mirror-only drift and byte-identical canonical JSON.
"""

from __future__ import annotations

import ast
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.generate import plans
from qlwf.impl.port import SNAPSHOT_KINDS, CommandPort, DatabaseClock, FixedClock
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.authority import OperationAuthority
from qlwf.impl.sqlite.store import SqliteStore, Statements
from qlwf.model import ids
from qlwf.model import tables as T
from qlwf.model.canonical import canonical_text
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.records import KIND_KEYS
from qlwf.model.state import TABLES, State

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_000_000


def admit(port: CommandPort, run_id: str = "run-1", needs: dict[str, list[str]] | None = None,
          now: int | None = T0) -> dict[str, Any]:
    plan = plans.make_plan(run_id, run_id.replace("run", "plan"), needs or {"a": [], "b": ["a"]}, T0)
    port.execute("admit_workflow", {"plan": plan}, now=now)
    return plan


def error_of(port: CommandPort, name: str, args: Any, now: int = T0) -> dict[str, str]:
    with pytest.raises(QlwfError) as err:
        port.execute(name, args, now=now)
    return err.value.to_json()


def raw_update(port: SqliteAdapter, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Write behind the adapter's back with the row checks off, like a corrupted store."""
    conn = port.connection
    conn.execute("PRAGMA ignore_check_constraints = ON")
    try:
        conn.execute(sql, params)
    finally:
        conn.execute("PRAGMA ignore_check_constraints = OFF")


@pytest.fixture
def port() -> Any:
    with SqliteAdapter() as p:
        yield p


# ------------------------------------------------------------------------------------------------
# Port shape and layering
def test_snapshot_kinds_are_the_models() -> None:
    """Both read the record vocabulary's kinds (model/records.py KIND_KEYS), in the State's snapshot order."""
    assert SNAPSHOT_KINDS == TABLES == tuple(KIND_KEYS) == tuple(State().snapshot())


def test_impl_never_imports_the_whole_system_model() -> None:
    """impl/ may call the model's pure functions, never qlwf.model.system, its commands (qlwf.model.cmd_*)
    or qlwf.model.state."""
    for path in (ROOT / "impl").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.endswith(("model.system", "model.state")), f"{path}: imports {name}"
                assert ".model.cmd_" not in name, f"{path}: imports {name}"
    code = "import sys, qlwf.impl.sqlite.adapter; print(sorted(m for m in sys.modules if m.startswith('qlwf.model')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "qlwf.model.system" not in out and "qlwf.model.state" not in out and "qlwf.model.cmd_" not in out


@pytest.mark.parametrize("name", ["drop_everything", "abort", "zap"])  # names before and after the page command
def test_unknown_command_is_a_programming_error(port: SqliteAdapter, name: str) -> None:
    with pytest.raises(ValueError):
        port.execute(name, {})


# ------------------------------------------------------------------------------------------------
# Canonical bytes
def test_stored_json_is_the_models_canonical_text(port: SqliteAdapter) -> None:
    plan = admit(port)
    conn = port.connection
    (plan_json, receipt_json) = conn.execute(
        'SELECT plan_json, receipt_json FROM "QingLong3PluginPackageWorkflowAdmissions"').fetchone()
    snap = port.snapshot()
    assert plan_json == canonical_text(plan) == canonical_text(snap["admissions"][0]["plan"])
    assert receipt_json == canonical_text(snap["admissions"][0]["receipt"])
    for step in snap["stepRuns"]:
        (text,) = conn.execute('SELECT step_run_json FROM "StepRuns" WHERE id = ?', (step["id"],)).fetchone()
        assert text == canonical_text(step)
    for event in snap["events"]:
        (text,) = conn.execute('SELECT payload FROM "RunEvents" WHERE id = ?', (event["id"],)).fetchone()
        assert text == canonical_text(event["payload"])
    assert len(snap["mutations"]) == len(snap["admissionSteps"]) == 2


# ------------------------------------------------------------------------------------------------
# Transactions
def test_every_writing_command_is_one_immediate_transaction_committed_even_on_replay(port: SqliteAdapter) -> None:
    plan = admit(port)
    statements: list[str] = []
    port.connection.set_trace_callback(statements.append)
    port.execute("admit_workflow", {"plan": plan}, now=T0)  # existing: a no-op replay still commits
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
    statements.clear()
    error_of(port, "advance_frontier", {"runId": "run-404"})
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "ROLLBACK"
    statements.clear()
    port.execute("task_candidates", {"limit": 5})
    assert not any(s.startswith(("BEGIN", "COMMIT")) for s in statements)  # queries take no transaction
    port.connection.set_trace_callback(None)
    assert not port.connection.in_transaction


def test_invalid_arguments_fail_before_the_operation_is_queued(port: SqliteAdapter) -> None:
    port.close()
    assert error_of(port, "advance_frontier", {"runId": "bad id!"})["reason"] == "argument_invalid"
    assert error_of(port, "advance_frontier", {"runId": "run-1"}) == {
        "class": "Unavailable", "code": "PLUGIN_PACKAGE_WORKFLOW_FRONTIER_UNAVAILABLE", "reason": "storage_closed"}
    assert error_of(port, "frontier_candidates", {"limit": 0})["reason"] == "page_invalid"
    port.close()  # idempotent


def test_operation_queue_is_bounded() -> None:
    authority = OperationAuthority(max_pending=1)
    fail = CommandErrors("advance_frontier")
    release, running, queued = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with authority.operation(fail):
            running.set()
            release.wait(5)

    def wait_in_line() -> None:
        queued.set()
        with authority.operation(fail):
            pass

    first = threading.Thread(target=hold)
    first.start()
    running.wait(5)
    second = threading.Thread(target=wait_in_line)
    second.start()
    queued.wait(5)
    deadline = time.monotonic() + 5
    while len(authority._queue) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(QlwfError) as err, authority.operation(fail):
        pass
    assert err.value.to_json()["reason"] == "storage_busy"
    release.set()
    first.join(5)
    second.join(5)
    authority.close()
    with pytest.raises(QlwfError) as closed, authority.operation(fail):
        pass
    assert closed.value.reason == "storage_closed"


def test_page_runs_one_transaction_per_workflow(port: SqliteAdapter) -> None:
    for i in range(3):
        admit(port, f"run-{i}")
        port.execute("request_cancel", {"runId": f"run-{i}", "reason": "user", "actor": {"type": "user"}}, now=T0)
    statements: list[str] = []
    port.connection.set_trace_callback(statements.append)
    result = port.execute("converge_cancellation_page", {"limit": 2}, now=T0 + 5)
    port.connection.set_trace_callback(None)
    assert result["scanned"] == 2 and result["settledRuns"] == 2 and result["hasMore"] is True
    assert result["next"] == {"cancelRequestedAtMs": T0, "runId": "run-1"}
    assert statements.count("BEGIN IMMEDIATE") == 2 and statements.count("COMMIT") == 2


# ------------------------------------------------------------------------------------------------
# Clock port (storage.md §7)
class CountingClock(FixedClock):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.reads = 0

    def read(self, database_time: Any) -> int:
        self.reads += 1
        return super().read(database_time)


def test_clock_is_read_once_per_transaction() -> None:
    clock = CountingClock(T0)
    with SqliteAdapter(clock=clock) as port:
        admit(port)
        assert clock.reads == 1
        port.execute("frontier_candidates", {"limit": 3})
        port.execute("task_candidates", {"limit": 3})
        assert clock.reads == 1  # these queries never read the clock
        port.execute("recovery_candidates", {"limit": 3})
        assert clock.reads == 2
        admit(port, "run-2")
        for run_id in ("run-1", "run-2"):
            port.execute("request_cancel", {"runId": run_id, "reason": "user", "actor": {"type": "user"}})
        clock.reads = 0
        port.execute("converge_cancellation_page", {"limit": 5})
        assert clock.reads == 2  # one per workflow


def test_database_clock_reads_database_time() -> None:
    with SqliteAdapter(clock=DatabaseClock()) as port:
        admit(port, now=None)
        before = int(time.time() * 1000)
        result = port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}})
        after = int(time.time() * 1000)
        assert before - 5 <= result["cancelRequestedAtMs"] <= after + 5
        with pytest.raises(TypeError):
            port.execute("task_candidates", {"limit": 1}, now=5)


def test_clock_regression_fails_closed(port: SqliteAdapter) -> None:
    admit(port)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}}, now=T0 + 100)
    before = port.snapshot()
    err = error_of(port, "converge_cancellation", {"runId": "run-1"}, now=T0 + 50)
    assert err["class"] == "Invalid" and err["reason"] == "clock_regression"
    assert port.snapshot() == before


def _claimed(port: SqliteAdapter) -> dict[str, Any]:
    """run-1:a admitted and claimed by w1 at T0 (lease of 10 s); the worker arguments."""
    admit(port)
    return _claimed_step(port, "run-1:a")


def _claimed_step(port: SqliteAdapter, step_run_id: str) -> dict[str, Any]:
    out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": step_run_id,
                                              "binding": plans.binding(step_run_id.split(":")[1])}, now=T0)
    attempt_id = out["attempt"]["id"]
    port.execute("claim_lease", {"attemptId": attempt_id, "workerId": "w1", "durationMs": 10_000}, now=T0)
    return {"attemptId": attempt_id, "workerId": "w1", "leaseGeneration": 1}


def test_clock_regression_below_a_lease_update_fails_closed(port: SqliteAdapter) -> None:
    """S-14: the floor is the later of the Run's last event and its leases' updatedAtMs; a renew writes
    no event, so only the lease remembers T0 + 100."""
    worker = _claimed(port)
    port.execute("renew_lease", worker | {"durationMs": 10_000}, now=T0 + 100)
    before = port.snapshot()
    err = error_of(port, "start_attempt", worker | {"timeoutMs": None}, now=T0 + 50)
    assert err["class"] == "Invalid" and err["reason"] == "clock_regression"
    assert port.snapshot() == before


def test_recovery_candidates_list_only_leased_leases(port: SqliteAdapter) -> None:
    """task-attempts.md §9: an active attempt whose lease was released is no recovery candidate,
    however long ago; the same attempt re-claimed and expired is one."""
    worker = _claimed(port)
    port.execute("release_lease", worker | {"reason": "declined"}, now=T0 + 1)
    page = {"limit": 10}
    assert port.execute("recovery_candidates", page, now=T0 + 60_000)["candidates"] == []
    port.execute("claim_lease", {"attemptId": worker["attemptId"], "workerId": "w2", "durationMs": 10_000},
                 now=T0 + 60_000)
    (candidate,) = port.execute("recovery_candidates", page, now=T0 + 70_000)["candidates"]
    assert candidate["attemptId"] == worker["attemptId"] and candidate["leaseExpiresAtMs"] == T0 + 70_000


def test_recovery_refuses_a_released_lease(port: SqliteAdapter) -> None:
    """commands.md §4.14: recovery needs a `leased` lease; a released one long past its expiry is not."""
    worker = _claimed(port)
    port.execute("release_lease", worker | {"reason": "declined"}, now=T0 + 1)
    before = port.snapshot()
    err = error_of(port, "recover_attempt", {"attemptId": worker["attemptId"], "evidence": "not_running"},
                   now=T0 + 60_000)
    assert err["class"] == "Conflict" and err["reason"] == "not_leased"
    assert port.snapshot() == before


def test_counter_ceiling_is_exact_for_worker_commands(port: SqliteAdapter) -> None:
    """commands.md §2.5: start_attempt appends one event, so it may bring the Run to 2147483647 exactly;
    a renew past the deadline would append the timeout request beyond it."""
    worker = _claimed(port)
    raw_update(port, 'UPDATE "Runs" SET version = 2147483646, event_sequence = 2147483646')
    assert port.execute("start_attempt", worker | {"timeoutMs": 1000}, now=T0 + 1)["status"] == "starting"
    err = error_of(port, "renew_lease", worker | {"durationMs": 10_000}, now=T0 + 5000)
    assert err == {"class": "Unavailable", "code": T.FAMILIES[T.COMMAND_FAMILY["renew_lease"]].unavailable,
                   "reason": "counter_overflow"}


def test_a_terminal_run_that_recomputes_to_another_status_is_drift(port: SqliteAdapter) -> None:
    """frontier.md §6: a terminal Run is re-checked; one stored `failed` whose steps all succeeded is drift."""
    admit(port, needs={"a": []})
    worker = _claimed_step(port, "run-1:a")
    port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    port.execute("complete_attempt", worker | {"exitCode": 0}, now=T0 + 2)
    assert port.execute("advance_frontier", {"runId": "run-1"}, now=T0 + 3)["terminalStatus"] == "succeeded"
    raw_update(port, "UPDATE \"Runs\" SET status = 'failed', error_code = 'x'")
    err = error_of(port, "advance_frontier", {"runId": "run-1"}, now=T0 + 4)
    assert err["class"] == "Unavailable" and err["reason"] == "terminal_drift"


@pytest.mark.parametrize("drift", [
    'UPDATE "RunEvents" SET created_at_ms = created_at_ms + 1 WHERE sequence = 1',  # the admission event
    'UPDATE "Runs" SET version = version + 1',  # counters that disagree (version != eventSequence)
], ids=["admission-event", "run-counters"])
def test_an_admission_replay_verifies_the_frozen_evidence(port: SqliteAdapter, drift: str) -> None:
    """frontier.md §3.2: replaying an admission re-checks its events and the Run's counters."""
    plan = admit(port)
    raw_update(port, drift)
    err = error_of(port, "admit_workflow", {"plan": plan}, now=T0 + 1)
    assert err["class"] == "Unavailable" and err["reason"] == "admission_drift"


@pytest.mark.parametrize("command", ["record_running", "fail_start", "complete_attempt"])
def test_worker_callbacks_refuse_a_run_that_is_no_longer_running(port: SqliteAdapter, command: str) -> None:
    """commands.md §4.10–§4.12: a Run that is not running (here: drifted to failed under a starting
    attempt) refuses the callback with run_state_mismatch, before any write."""
    worker = _claimed(port)
    port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    raw_update(port, "UPDATE \"Runs\" SET status = 'failed', error_code = 'x', finished_at_ms = ?", (T0 + 1,))
    args = worker | ({"exitCode": 0} if command == "complete_attempt" else {})
    err = error_of(port, command, args, now=T0 + 2)
    assert err["class"] == "Conflict" and err["reason"] == "run_state_mismatch"


def test_a_deadline_beyond_the_timestamp_range_is_invalid(port: SqliteAdapter) -> None:
    """Q-3: start_attempt whose now + timeoutMs exceeds 2^53 − 1 fails Invalid before any other check."""
    from qlwf.model.values import SAFE_INT_MAX

    worker = _claimed(port)
    err = error_of(port, "start_attempt", worker | {"timeoutMs": 100}, now=SAFE_INT_MAX - 10)
    assert err["class"] == "Invalid" and err["reason"] == "argument_invalid"


def test_a_step_run_of_another_run_is_missing_under_this_run(port: SqliteAdapter) -> None:
    """commands.md §2.4 LOAD-STEP: a StepRun belongs to the Run it is asked under, in either id order."""
    admit(port, "run-1")
    admit(port, "run-2")
    for run_id, step_run_id in (("run-1", "run-2:a"), ("run-2", "run-1:a")):
        err = error_of(port, "admit_task_attempt", {"runId": run_id, "stepRunId": step_run_id,
                                                    "binding": plans.binding("a")}, now=T0 + 1)
        assert err["class"] == "Conflict" and err["reason"] == "step_missing", (run_id, err)


def test_a_running_run_with_an_error_code_is_run_drift(port: SqliteAdapter) -> None:
    admit(port)
    raw_update(port, "UPDATE \"Runs\" SET error_code = 'x'")
    err = error_of(port, "advance_frontier", {"runId": "run-1"}, now=T0 + 1)
    assert err["class"] == "Unavailable" and err["reason"] == "run_drift"


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_lease_mirror_off_in_either_direction_is_lease_drift(port: SqliteAdapter, delta: int) -> None:
    worker = _claimed(port)
    raw_update(port, 'UPDATE "RunAttempts" SET lease_expires_at_ms = lease_expires_at_ms + ?', (delta,))
    err = error_of(port, "renew_lease", worker | {"durationMs": 10_000}, now=T0 + 1)
    assert err["class"] == "Unavailable" and err["reason"] == "lease_drift"


def test_a_command_name_read_from_json_is_validated_like_a_literal(port: SqliteAdapter) -> None:
    """Names arrive from JSON (traces, the driver protocol): start_attempt's timeoutMs is checked for them too."""
    import json

    worker = _claimed(port)
    name = json.loads('"start_attempt"')
    err = error_of(port, name, worker | {"timeoutMs": 0}, now=T0 + 1)
    assert err["class"] == "Invalid" and err["reason"] == "argument_invalid"


# ------------------------------------------------------------------------------------------------
# Compare-and-set under a concurrent writer (storage.md §5)
def _concurrent_digest_change(conn: Statements, step_run_id: str) -> None:
    conn.execute("PRAGMA ignore_check_constraints = ON")
    conn.execute('UPDATE "StepRuns" SET step_run_digest = ? WHERE id = ?', ("f" * 64, step_run_id))
    conn.execute("PRAGMA ignore_check_constraints = OFF")


class ConcurrentDigestWriter(SqliteStore):
    """Another writer changes the StepRun's digest between the command's read and its compare-and-set."""

    def cas_step_run(self, mutation: dict[str, Any]) -> None:
        if mutation["mutationId"].startswith("workflow-frontier:"):
            _concurrent_digest_change(self.conn, mutation["stepRun"]["id"])
        super().cas_step_run(mutation)


class DigestBlindStore(SqliteStore):
    """Broken variant: its StepRun compare-and-set ignores the digest."""

    def cas_step_run(self, mutation: dict[str, Any]) -> None:
        if not mutation["mutationId"].startswith("workflow-frontier:"):
            return super().cas_step_run(mutation)
        _concurrent_digest_change(self.conn, mutation["stepRun"]["id"])
        new = mutation["stepRun"]
        cur = self.conn.execute('UPDATE "StepRuns" SET status = ?, version = ?, step_run_digest = ?, '
                                "updated_at_ms = ?, last_mutation_id = ?, ready_at_ms = ?, step_run_json = ? "
                                "WHERE id = ? AND version = ? AND status = ?",
                                (new["status"], new["version"], new["stepRunDigest"], new["updatedAtMs"],
                                 new["lastMutationId"], new["readyAtMs"], canonical_text(new), new["id"],
                                 mutation["expectedStepRunVersion"], mutation["previousStatus"]))
        assert cur.rowcount == 1
        return None


def _ready_for_frontier(port: CommandPort) -> None:
    admit(port)
    out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a",
                                              "binding": plans.binding("a")}, now=T0)
    fence = {"attemptId": out["attempt"]["id"], "workerId": "w1"}
    port.execute("claim_lease", fence | {"durationMs": 10_000}, now=T0)
    port.execute("start_attempt", fence | {"leaseGeneration": 1, "timeoutMs": None}, now=T0)
    port.execute("record_running", fence | {"leaseGeneration": 1}, now=T0)
    port.execute("complete_attempt", fence | {"leaseGeneration": 1, "exitCode": 0}, now=T0)


CONCURRENT_CHANGE = {"class": "Conflict", "code": "PLUGIN_PACKAGE_WORKFLOW_FRONTIER_CONFLICT",
                     "reason": "concurrent_change"}


def concurrency_problem(store_factory: type[SqliteStore]) -> str | None:
    """None when the backend refuses a frontier write whose StepRun changed under it, else the problem."""
    with SqliteAdapter(store_factory=store_factory) as port:
        _ready_for_frontier(port)
        before = port.snapshot()
        try:
            result = port.execute("advance_frontier", {"runId": "run-1"}, now=T0 + 10)
        except QlwfError as e:
            if e.to_json() != CONCURRENT_CHANGE:
                return f"wrong error {e.to_json()}"
            # the simulated writer's change rolls back together with the refused command
            return None if port.snapshot() == before else "the refused command left writes behind"
        return f"advance_frontier overwrote a concurrent change of the StepRun digest (answered {result['status']})"


def test_concurrent_change_is_a_conflict_and_writes_nothing() -> None:
    assert concurrency_problem(ConcurrentDigestWriter) is None


def test_a_compare_and_set_blind_to_the_digest_is_caught() -> None:
    problem = concurrency_problem(DigestBlindStore)
    assert problem == "advance_frontier overwrote a concurrent change of the StepRun digest (answered advanced)"


# ------------------------------------------------------------------------------------------------
# Storage error mapping (storage.md §6.1)
def test_constraint_violation_maps_to_conflict_and_rolls_back(port: SqliteAdapter) -> None:
    admit(port)
    admit(port, "run-2")
    event_id = ids.cancel_request_event_id("run-1", T0 + 7, "user")
    port.connection.execute(  # an unrelated event already holds the id request_cancel will derive
        'INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, payload, created_at_ms) '
        "VALUES (?, 'run-2', 99, 'x', ?, 'system', '{}', ?)", (event_id, event_id, T0))
    before = port.snapshot()
    err = error_of(port, "request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}}, T0 + 7)
    assert err == {"class": "Conflict", "code": "PLUGIN_PACKAGE_WORKFLOW_CANCEL_REQUEST_CONFLICT",
                   "reason": "constraint_violation"}
    assert port.snapshot() == before


def test_other_storage_errors_map_to_unavailable() -> None:
    class FailingStore(SqliteStore):
        def insert_event(self, event: dict[str, Any]) -> None:
            raise sqlite3.OperationalError("disk I/O error")

    with SqliteAdapter(store_factory=FailingStore) as port:
        plan = plans.make_plan("run-1", "plan-1", {"a": []}, T0)
        err = error_of(port, "admit_workflow", {"plan": plan})
        assert err == {"class": "Unavailable", "code": "PLUGIN_PACKAGE_WORKFLOW_ADMISSION_UNAVAILABLE",
                       "reason": "storage_error"}
        assert all(records == [] for records in port.snapshot().values())  # the Run insert rolled back


def test_a_real_non_constraint_error_maps_to_unavailable(tmp_path: Path) -> None:
    """A genuine SQLite error with an extended code (here: a read-only database, SQLITE_READONLY) is not
    a constraint: Unavailable storage_error, by the error's code as well as its class."""
    from qlwf.impl.sqlite.failures import map_storage_error

    path = tmp_path / "ro.sqlite3"
    SqliteAdapter(path).close()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.Error) as info:
            conn.execute('DELETE FROM "Runs"')
    finally:
        conn.close()
    assert getattr(info.value, "sqlite_errorcode", None) is not None
    err = map_storage_error(CommandErrors("admit_workflow"), info.value)
    assert (err.error_class, err.reason) == ("Unavailable", "storage_error")


# ------------------------------------------------------------------------------------------------
# Mirror-only drift (storage.md §3): JSON that disagrees with its columns
def test_step_run_json_disagreeing_with_its_columns_is_step_drift(port: SqliteAdapter) -> None:
    admit(port)
    raw_update(port, "UPDATE \"StepRuns\" SET step_run_json = json_set(step_run_json, '$.status', 'ready') "
                     "WHERE id = 'run-1:b'")
    before = port.snapshot()
    err = error_of(port, "advance_frontier", {"runId": "run-1"}, T0 + 1)
    assert (err["class"], err["reason"]) == ("Unavailable", "step_drift")
    assert port.snapshot() == before


def test_non_canonical_step_run_json_is_step_drift(port: SqliteAdapter) -> None:
    admit(port)
    raw_update(port, "UPDATE \"StepRuns\" SET step_run_json = ' ' || step_run_json WHERE id = 'run-1:a'")
    assert error_of(port, "admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a",
                                                 "binding": plans.binding("a")})["reason"] == "step_drift"


def test_admission_column_disagreeing_with_the_plan_is_plan_drift(port: SqliteAdapter) -> None:
    admit(port)
    raw_update(port, 'UPDATE "QingLong3PluginPackageWorkflowAdmissions" SET package_name = \'other-pkg\'')
    err = error_of(port, "request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}})
    assert (err["class"], err["reason"]) == ("Unavailable", "plan_drift")


def test_task_receipt_column_disagreeing_with_its_json_is_receipt_drift(port: SqliteAdapter) -> None:
    admit(port)
    out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a",
                                              "binding": plans.binding("a")}, now=T0)
    raw_update(port, 'UPDATE "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" SET attempt_number = 5')
    err = error_of(port, "claim_lease", {"attemptId": out["attempt"]["id"], "workerId": "w1", "durationMs": 5000})
    assert (err["class"], err["reason"]) == ("Unavailable", "receipt_drift")


def test_frontier_candidate_query_reads_needs_from_admission_steps(port: SqliteAdapter) -> None:
    admit(port, needs={"a": [], "b": ["a"], "c": ["a", "b"]})
    assert port.execute("frontier_candidates", {"limit": 5})["candidates"] == []
    _complete(port, "run-1", "a")
    page = port.execute("frontier_candidates", {"limit": 5})
    assert [c["runId"] for c in page["candidates"]] == ["run-1"] and page["truncated"] is False


def _complete(port: CommandPort, run_id: str, key: str) -> None:
    out = port.execute("admit_task_attempt", {"runId": run_id, "stepRunId": plans.step_run_id(run_id, key),
                                              "binding": plans.binding(key)}, now=T0)
    fence = {"attemptId": out["attempt"]["id"], "workerId": "w1"}
    port.execute("claim_lease", fence | {"durationMs": 10_000}, now=T0)
    port.execute("start_attempt", fence | {"leaseGeneration": 1, "timeoutMs": None}, now=T0)
    port.execute("complete_attempt", fence | {"leaseGeneration": 1, "exitCode": 0}, now=T0)


# ------------------------------------------------------------------------------------------------
# File databases
def test_file_database_keeps_its_state_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ql3.db"
    with SqliteAdapter(path) as port:
        admit(port)
        _complete(port, "run-1", "a")
        port.execute("advance_frontier", {"runId": "run-1"}, now=T0 + 1)
        snap = port.snapshot()
    with SqliteAdapter(path) as again:
        assert again.snapshot() == snap
        assert again.execute("advance_frontier", {"runId": "run-1"}, now=T0 + 2)["status"] == "unchanged"


def test_counter_ceiling_matches_the_model(port: SqliteAdapter) -> None:
    admit(port)
    raw_update(port, 'UPDATE "Runs" SET version = 2147483647, event_sequence = 2147483647')
    err = error_of(port, "request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}})
    assert err == {"class": "Unavailable", "code": T.FAMILIES["cancel_request"].unavailable,
                   "reason": "counter_overflow"}


def test_the_port_has_one_method_per_command(port: SqliteAdapter) -> None:
    from qlwf.impl.port import COMMAND_NAMES

    for name in COMMAND_NAMES:
        assert callable(getattr(CommandPort, name))
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, T0)
    assert port.admit_workflow(plan, now=T0)["status"] == "created"
    attempt = port.admit_task_attempt("run-1", "run-1:a", plans.binding("a"), now=T0)["attempt"]
    assert port.claim_lease(attempt["id"], "w1", 5000, now=T0)["status"] == "claimed"
    assert port.task_candidates({"limit": 3})["candidates"] == []
    assert port.request_cancel("run-1", "user", {"type": "user"}, now=T0 + 1)["status"] == "requested"
    assert port.converge_cancellation("run-1", now=T0 + 2)["status"] == "blocked"
