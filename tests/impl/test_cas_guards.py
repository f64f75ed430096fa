"""Every compare-and-set predicate of storage.md §5 is necessary, on both backends (issue 11 §3).

No lockstep trace has a second writer, so no trace can tell a guard from its absence. Here each
case names one predicate of one CAS in `impl/commands/guards.py` and a command that reaches that
CAS. A store subclass runs, on the command's own connection and inside its transaction, an UPDATE
of that one predicate column just before the CAS (a writer that slipped in between the command's
read and its write), then lets the real CAS run. Two tests per case and backend:

* with the guard as written, the command fails with Conflict `concurrent_change` (the command
  family's code, from model/tables.py) and the durable snapshot equals the one before the command:
  the underneath change rolled back with it;
* with only that predicate removed from the WHERE clause (the guards function monkeypatched), the
  same command over the same change succeeds. So the change breaks no other predicate and no
  schema check, and the failure above is that predicate's doing: every predicate is shown
  necessary, not just the three the issue asks for.

Companion columns. A change stays valid for the schema's CHECK constraints, and some predicate
columns cannot move alone; where a case changes more than one column, the others are never
predicates of that CAS, so the failure is still attributable to the one predicate:
* StepRun status pending → ready also sets ready_at_ms (status/time checks); every StepRun change
  also updates the step_run_json mirror (mirror checks on both backends).
* Lease status leased → completed also sets completed_at_ms (lease shape check).
* Attempt lease_generation NULL → 1 (the null-safe comparison, before the first claim) also sets
  worker_id, lease_version and lease_expires_at_ms (lease keys are all or nothing).

Not reachable by a change underneath:
* Run `execution_owner = 'runtime'` (convergence) on PostgreSQL: ql3_runs_execution_owner_ck pins
  the column to 'runtime', so no committed or in-transaction row can differ; the predicate is
  tested on SQLite (which admits 'legacy') and the PostgreSQL check itself is tested below.
* The identity predicates (id, run_id, attempt_id) are out of scope: they select the row, no
  command ever changes a key, and foreign keys reference them, so a key changed underneath is not
  a concurrent version of the row but a different row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.generate import plans
from qlwf.impl.commands import guards
from qlwf.impl.port import CommandPort, FixedClock
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.store import SqliteStore
from qlwf.model import tables as T
from qlwf.model.errors import QlwfError

REPO = Path(__file__).resolve().parents[2]
T0 = 1_000_000
USER = {"type": "user"}
RUN = "run-1"
Record = dict[str, Any]


# ------------------------------------------------------------------------------------------------
# Scenarios: each brings a fresh port to a state and names the command that then reaches the CAS.
@dataclass(frozen=True)
class Scenario:
    command: str
    build: Callable[[CommandPort], tuple[Record, int]]  # → the command's arguments and `now`


def scenario(command: str) -> Callable[[Callable[[CommandPort], tuple[Record, int]]], Scenario]:
    return lambda build: Scenario(command, build)


def _admit(port: CommandPort) -> None:
    plan = plans.make_plan(RUN, "plan-1", {"a": [], "b": ["a"]}, T0)
    port.execute("admit_workflow", {"plan": plan}, now=T0)


def _task(port: CommandPort) -> str:
    _admit(port)
    out = port.execute("admit_task_attempt", {"runId": RUN, "stepRunId": f"{RUN}:a", "binding": plans.binding("a")},
                       now=T0)
    attempt_id: str = out["attempt"]["id"]
    return attempt_id


def _leased(port: CommandPort) -> Record:
    """A claimed attempt whose lease (generation 1) expires at T0 + 10 s; the worker arguments."""
    attempt_id = _task(port)
    port.execute("claim_lease", {"attemptId": attempt_id, "workerId": "w1", "durationMs": 10_000}, now=T0)
    return {"attemptId": attempt_id, "workerId": "w1", "leaseGeneration": 1}


def _started(port: CommandPort) -> Record:
    worker = _leased(port)
    port.execute("start_attempt", worker | {"timeoutMs": None}, now=T0 + 1)
    return worker


@scenario("advance_frontier")
def advance_after_a(port: CommandPort) -> tuple[Record, int]:
    """a succeeded: the frontier makes b ready (StepRun CAS pending → ready) and bumps the Run."""
    worker = _started(port)
    port.execute("record_running", worker, now=T0 + 2)
    port.execute("complete_attempt", worker | {"exitCode": 0}, now=T0 + 3)
    return {"runId": RUN}, T0 + 4


@scenario("admit_task_attempt")
def admit_task(port: CommandPort) -> tuple[Record, int]:
    _admit(port)
    return {"runId": RUN, "stepRunId": f"{RUN}:a", "binding": plans.binding("a")}, T0 + 1


@scenario("recover_attempt")
def recover_expired_claim(port: CommandPort) -> tuple[Record, int]:
    return {"attemptId": _leased(port)["attemptId"], "evidence": "not_running"}, T0 + 10_000


@scenario("request_cancel")
def cancel(port: CommandPort) -> tuple[Record, int]:
    _admit(port)
    return {"runId": RUN, "reason": "user", "actor": USER}, T0 + 1


@scenario("converge_cancellation")
def converge_idle(port: CommandPort) -> tuple[Record, int]:
    """Cancel intent and no attempt: convergence cancels the StepRuns and terminalizes the Run."""
    _admit(port)
    port.execute("request_cancel", {"runId": RUN, "reason": "user", "actor": USER}, now=T0 + 1)
    return {"runId": RUN}, T0 + 2


@scenario("converge_cancellation")
def converge_unleased_claim(port: CommandPort) -> tuple[Record, int]:
    """A claimed attempt without a lease: convergence settles it (the attempt convergence CAS)."""
    _task(port)
    port.execute("request_cancel", {"runId": RUN, "reason": "user", "actor": USER}, now=T0 + 1)
    return {"runId": RUN}, T0 + 2


@scenario("claim_lease")
def first_claim(port: CommandPort) -> tuple[Record, int]:
    return {"attemptId": _task(port), "workerId": "w1", "durationMs": 10_000}, T0 + 1


@scenario("renew_lease")
def renew(port: CommandPort) -> tuple[Record, int]:
    return _leased(port) | {"durationMs": 10_000}, T0 + 1


@scenario("start_attempt")
def start(port: CommandPort) -> tuple[Record, int]:
    return _leased(port) | {"timeoutMs": None}, T0 + 1


@scenario("record_running")
def record_running(port: CommandPort) -> tuple[Record, int]:
    return _started(port), T0 + 2


@scenario("release_lease")
def release(port: CommandPort) -> tuple[Record, int]:
    return _leased(port) | {"reason": "declined"}, T0 + 1


# ------------------------------------------------------------------------------------------------
# Cases
# The CAS methods of the Store protocol: their guards function, table and key column per backend.
@dataclass(frozen=True)
class Target:
    guard_fn: str
    sqlite_table: str
    postgres_table: str
    key_column: str
    key: Callable[..., str]  # the row key from the CAS method's arguments


TARGETS = {
    "cas_run": Target("run", '"Runs"', "ql3.runs", "id", lambda guard, old, new: old["id"]),
    "cas_step_run": Target("step_run", '"StepRuns"', "ql3.step_runs", "id", lambda m: m["stepRun"]["id"]),
    "cas_attempt": Target("attempt", '"RunAttempts"', "ql3.run_attempts", "id", lambda old, new: old["id"]),
    "cas_attempt_convergence": Target("attempt_convergence", '"RunAttempts"', "ql3.run_attempts", "id",
                                      lambda old, new: old["id"]),
    "cas_lease": Target("lease", '"RunDispatchLeases"', "ql3.run_dispatch_leases", "attempt_id",
                        lambda old, new: old["attemptId"]),
}
BACKENDS = ("sqlite", "postgres")


@dataclass(frozen=True)
class Case:
    """One predicate of one CAS, a command that reaches it, and the change underneath that breaks it."""

    id: str
    cas: str  # Store method
    predicate: str  # as guards.py writes it; {m}: the dialect's parameter mark, {ns}: its null-safe equality
    scenario: Scenario
    sets: dict[str, str]  # column → SQL expression over the row's values before the UPDATE (both dialects)
    mirror: dict[str, str] = field(default_factory=dict)  # step_run_json key → SQL expression
    guard: str | None = None  # cas_run only: the Run guard whose call is raced
    backends: tuple[str, ...] = BACKENDS

    @property
    def target(self) -> Target:
        return TARGETS[self.cas]


def _run_cases(guard: str, scenario: Scenario, cancel_guard: bool) -> list[Case]:
    cases = [Case(f"run.{guard}.status", "cas_run", "status = 'running'", scenario,
                  {"status": "'waiting_approval'"}, guard=guard),
             Case(f"run.{guard}.version", "cas_run", "version = {m}", scenario, {"version": "version + 1"},
                  guard=guard),
             Case(f"run.{guard}.event_sequence", "cas_run", "event_sequence = {m}", scenario,
                  {"event_sequence": "event_sequence + 1"}, guard=guard)]
    if cancel_guard:  # intent appearing underneath: another request_cancel committed first
        cases.append(Case(f"run.{guard}.cancel_requested_at_ms", "cas_run", "cancel_requested_at_ms IS NULL",
                          scenario, {"cancel_requested_at_ms": "created_at_ms"}, guard=guard))
    return cases


DIGEST = "f" * 64
CASES: tuple[Case, ...] = (
    *_run_cases("frontier", advance_after_a, cancel_guard=True),
    *_run_cases("counters", admit_task, cancel_guard=True),
    *_run_cases("counters_any_intent", recover_expired_claim, cancel_guard=False),
    *_run_cases("cancel_request", cancel, cancel_guard=True),
    *_run_cases("convergence", converge_idle, cancel_guard=False),
    Case("run.convergence.cancel_requested_at_ms", "cas_run", "cancel_requested_at_ms = {m}", converge_idle,
         {"cancel_requested_at_ms": "cancel_requested_at_ms + 1"}, guard="convergence"),
    Case("run.convergence.cancel_reason", "cas_run", "cancel_reason = {m}", converge_idle,
         {"cancel_reason": "'policy'"}, guard="convergence"),
    Case("run.convergence.execution_owner", "cas_run", "execution_owner = 'runtime'", converge_idle,
         {"execution_owner": "'legacy'"}, guard="convergence", backends=("sqlite",)),
    Case("run.convergence.trigger_type", "cas_run", "trigger_type = 'plugin_package_workflow'", converge_idle,
         {"trigger_type": "'manual'"}, guard="convergence"),
    Case("step_run.version", "cas_step_run", "version = {m}", advance_after_a, {"version": "version + 1"},
         {"version": "version + 1"}),
    Case("step_run.step_run_digest", "cas_step_run", "step_run_digest = {m}", advance_after_a,
         {"step_run_digest": f"'{DIGEST}'"}, {"stepRunDigest": f"CAST('{DIGEST}' AS TEXT)"}),
    Case("step_run.status", "cas_step_run", "status = {m}", advance_after_a,
         {"status": "'ready'", "ready_at_ms": "created_at_ms"},
         {"status": "CAST('ready' AS TEXT)", "readyAtMs": "created_at_ms"}),
    Case("attempt.status", "cas_attempt", "status = {m}", start, {"status": "'starting'"}),
    Case("attempt.callback_sequence", "cas_attempt", "callback_sequence = {m}", record_running,
         {"callback_sequence": "callback_sequence + 1"}),
    Case("attempt.lease_generation", "cas_attempt", "lease_generation {ns}", renew,
         {"lease_generation": "lease_generation + 1"}),
    Case("attempt.lease_generation_null", "cas_attempt", "lease_generation {ns}", first_claim,
         {"worker_id": "'w0'", "lease_generation": "1", "lease_version": "0",
          "lease_expires_at_ms": "created_at_ms + 1"}),
    Case("attempt_convergence.status", "cas_attempt_convergence", "status = 'claimed'", converge_unleased_claim,
         {"status": "'starting'"}),
    Case("attempt_convergence.callback_sequence", "cas_attempt_convergence", "callback_sequence = {m}",
         converge_unleased_claim, {"callback_sequence": "callback_sequence + 1"}),
    Case("lease.status", "cas_lease", "status = {m}", release, {"status": "'completed'",
                                                               "completed_at_ms": "updated_at_ms"}),
    Case("lease.version", "cas_lease", "version = {m}", renew, {"version": "version + 1"}),
    Case("lease.lease_generation", "cas_lease", "lease_generation = {m}", recover_expired_claim,
         {"lease_generation": "lease_generation + 1"}),
)


# ------------------------------------------------------------------------------------------------
# Backends and the writer underneath
@dataclass(frozen=True)
class Backend:
    name: str
    dialect: guards.Dialect
    open: Callable[[type[Any]], CommandPort]  # a port over an empty database with this store class
    base_store: type[Any]


@pytest.fixture(scope="module")
def pg_backend_one_connection(pg_server: Any) -> Iterator[Any]:
    """The `postgres` backend with a pool of one connection."""
    from qlwf.conformance.backends.postgres import PostgresBackend

    factory = PostgresBackend(pool_size=1)
    yield factory
    factory.shutdown()


def _backend(request: pytest.FixtureRequest, name: str, ports: list[CommandPort]) -> Backend:
    if name == "sqlite":
        def open_sqlite(store: type[Any]) -> CommandPort:
            ports.append(SqliteAdapter(":memory:", FixedClock(), store_factory=store))
            return ports[-1]
        return Backend(name, guards.SQLITE, open_sqlite, SqliteStore)
    from qlwf.impl.postgres.adapter import PostgresAdapter
    from qlwf.impl.postgres.store import PgStore

    pg = request.getfixturevalue("pg_backend_one_connection")

    def open_postgres(store: type[Any]) -> CommandPort:
        pg.database.reset()
        ports.append(PostgresAdapter(pg.database, FixedClock(), store_factory=store))
        return ports[-1]
    return Backend(name, guards.POSTGRES, open_postgres, PgStore)


@pytest.fixture
def ports() -> Iterator[list[CommandPort]]:
    opened: list[CommandPort] = []
    yield opened
    for port in opened:
        port.close()


def underneath_sql(case: Case, backend: Backend) -> str:
    """The other writer's UPDATE of one row; every expression reads the row's values before it."""
    t = case.target
    sets = [f"{column} = {expression}" for column, expression in case.sets.items()]
    if case.mirror and backend.name == "sqlite":
        pairs = ", ".join(f"'$.{key}', {expression}" for key, expression in case.mirror.items())
        sets.append(f"step_run_json = json_set(step_run_json, {pairs})")
    elif case.mirror:
        json = "step_run_json"
        for key, expression in case.mirror.items():
            json = f"jsonb_set({json}, '{{{key}}}', to_jsonb({expression}))"
        sets.append(f"step_run_json = {json}")
    table = t.sqlite_table if backend.name == "sqlite" else t.postgres_table
    return f"UPDATE {table} SET {', '.join(sets)} WHERE {t.key_column} = {backend.dialect.mark}"


class Raced:
    """What one test's writer did: armed only for the command under test, fires at most once."""

    def __init__(self) -> None:
        self.armed = False
        self.fired = 0


def racing_store(case: Case, backend: Backend, raced: Raced) -> type[Any]:
    """A store whose `case.cas` first changes the row underneath on the same connection, then runs the CAS."""
    sql = underneath_sql(case, backend)

    def cas(self: Any, *args: Any) -> None:
        if raced.armed and not raced.fired and (case.guard is None or args[0] == case.guard):
            raced.fired += 1
            cursor = self.conn.execute(sql, (case.target.key(*args),))
            assert cursor.rowcount == 1, f"the writer underneath missed its row: {sql}"
        getattr(super(store, self), case.cas)(*args)

    store = type(f"Racing_{case.cas}", (backend.base_store,), {case.cas: cas})
    return store


def without_predicate(case: Case, dropped: list[str]) -> Callable[..., tuple[str, list[Any]]]:
    """The case's guards function with its predicate (and that predicate's parameter) removed."""
    original = getattr(guards, case.target.guard_fn)

    def guard_fn(d: guards.Dialect, *args: Any) -> tuple[str, list[Any]]:
        sql, params = original(d, *args)
        clause = " AND " + case.predicate.format(m=d.mark, ns=d.null_safe_int)
        where = sql.index(" WHERE ")
        assert sql.count(clause, where) == 1, f"{clause!r} is not in {sql!r}"
        at = sql.index(clause, where)
        marks = len(re.findall(re.escape(d.mark), clause))  # 0 for a literal, 1 for a compared value
        first = sql[:at].count(d.mark)
        dropped.append(clause)
        return sql[:at] + sql[at + len(clause):], params[:first] + params[first + marks:]

    return guard_fn


def _params() -> list[Any]:
    return [pytest.param(case, name, id=f"{name}-{case.id}",
                         marks=[pytest.mark.postgres] if name == "postgres" else [])
            for case in CASES for name in case.backends]


def _prepared(case: Case, backend: Backend) -> tuple[CommandPort, Raced, Record, int]:
    raced = Raced()
    port = backend.open(racing_store(case, backend, raced))
    args, now = case.scenario.build(port)
    raced.armed = True
    return port, raced, args, now


def guide_row(case: Case) -> str:
    """The case's row in docs/reviewers-guide.md §5 (predicates with dialect-neutral marks)."""
    predicate = case.predicate.format(m="?", ns="IS NOT DISTINCT FROM ?")
    backends = ", ".join(case.backends)
    return f"| `guards.{case.target.guard_fn}` | `{predicate}` | `{case.scenario.command}` | `{case.id}` | {backends} |"


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("case", "backend_name"), _params())
def test_a_change_underneath_fails_the_command_and_rolls_back(case: Case, backend_name: str,
                                                              request: pytest.FixtureRequest,
                                                              ports: list[CommandPort]) -> None:
    port, raced, args, now = _prepared(case, _backend(request, backend_name, ports))
    command = case.scenario.command
    before = port.snapshot()
    with pytest.raises(QlwfError) as err:
        port.execute(command, args, now=now)
    assert raced.fired == 1
    assert err.value.to_json() == {"class": "Conflict", "code": T.FAMILIES[T.COMMAND_FAMILY[command]].conflict,
                                   "reason": "concurrent_change"}
    assert port.snapshot() == before  # the writer's change rolled back with the refused command


@pytest.mark.parametrize(("case", "backend_name"), _params())
def test_without_the_predicate_the_change_goes_through(case: Case, backend_name: str,
                                                       request: pytest.FixtureRequest, ports: list[CommandPort],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The predicate is necessary: the CAS without it matches the changed row and the command commits."""
    port, raced, args, now = _prepared(case, _backend(request, backend_name, ports))
    dropped: list[str] = []
    monkeypatch.setattr(guards, case.target.guard_fn, without_predicate(case, dropped))
    before = port.snapshot()
    port.execute(case.scenario.command, args, now=now)
    assert raced.fired == 1 and dropped
    assert port.snapshot() != before


@pytest.mark.postgres
def test_postgres_pins_execution_owner_so_its_predicate_cannot_be_raced(pg_backend_one_connection: Any) -> None:
    import psycopg
    from qlwf.impl.postgres.adapter import PostgresAdapter

    pg_backend_one_connection.database.reset()
    port = PostgresAdapter(pg_backend_one_connection.database, FixedClock())
    try:
        _admit(port)
    finally:
        port.close()
    with psycopg.connect(pg_backend_one_connection.database.conninfo, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.CheckViolation, match="ql3_runs_execution_owner_ck"):
        conn.execute("UPDATE ql3.runs SET execution_owner = 'legacy' WHERE id = %s", (RUN,))


def _where_columns(sql: str) -> set[str]:
    return {p.split(" ")[0] for p in sql.split(" WHERE ", 1)[1].split(" AND ")} - {"id", "run_id", "attempt_id"}


def test_every_predicate_of_guards_py_has_a_case() -> None:
    """A predicate added to guards.py (or a Run guard) without a case here fails this test."""
    covered = {(c.target.guard_fn, c.guard, c.predicate.split(" ")[0]) for c in CASES}
    run: Record = {"id": RUN, "version": 1, "eventSequence": 1, "cancelRequestedAtMs": T0, "cancelReason": "user",
                   "status": "running"}
    for guard in guards.RUN_GUARDS:  # the WHERE clause each Run guard really renders
        columns = _where_columns(guards.run(guards.SQLITE, guard, run, run)[0])
        assert {("run", guard, c) for c in columns} <= covered, f"Run guard {guard}: {columns}"
    source = (REPO / "impl" / "commands" / "guards.py").read_text(encoding="utf-8")
    functions = dict(re.findall(r"^def ([a-z]\w*)\(d: Dialect(.*?)(?=^def |\Z)", source, re.S | re.M))
    assert set(functions) == {t.guard_fn for t in TARGETS.values()}
    for fn, body in functions.items():  # the other functions' WHERE clauses are literal f-strings
        columns = set(re.findall(r"(?:WHERE|AND) (\w+) ", body)) - {"id", "run_id", "attempt_id"}
        assert columns and {c for f, _, c in covered if f == fn} >= columns, f"guards.{fn}: {columns}"


def test_the_reviewers_guide_lists_every_case() -> None:
    text = (REPO / "docs" / "reviewers-guide.md").read_text(encoding="utf-8")
    listed = [line for line in text.splitlines() if line.startswith("| `guards.")]
    assert listed == [guide_row(case) for case in CASES], "docs/reviewers-guide.md §5 disagrees with CASES"
