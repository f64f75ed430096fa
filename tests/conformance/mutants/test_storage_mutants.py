"""Every storage mutant of the manifest is caught by its named behavioural check on its backend.

The mutants (conformance/mutants/storage.py) break impl/commands, the SQL of both adapters and both
schemas, planted only in memory (code swapped from edited source, SQL constants replaced, schema
variants), so a crash leaves nothing behind. Checks:
* conformance:<backend> — the golden corpus, then seeded generated traces, in lockstep with the
  model; caught when a trace diverges (state, outcome or an invariant of the backend's state);
* cas-race:<backend> — the named case of tests/impl/test_cas_guards.py must fail: the command no longer
  refuses a change made underneath its compare-and-set;
* contract-test:sqlite — the named contract test of tests/ passes without the mutant and fails with it
  (situations no trace reaches: a clock regression, a released lease past its expiry);
* schema-refusal:<backend> — the named refusal test passes on the real schema and fails on the variant.
PostgreSQL entries are marked `postgres` and use the session's throwaway cluster.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance import backends
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import load_invariant_check, run_lockstep
from qlwf.conformance.mutants import Mutant, NotPlanted
from qlwf.conformance.mutants import storage as S
from qlwf.impl.port import CommandPort
from support import test_modules

GENERATED = 40  # after the corpus (the cancellation-order mutants are caught in generated traces 25–40)
SEED = 20261129
# A test fails by an assertion, pytest.fail or any error; each named test passes without the mutant
# (checked here for contract and refusal tests; tests/impl/test_cas_guards.py for the CAS cases).
FAILED = (Exception, pytest.fail.Exception)


def _params() -> list[Any]:
    return [pytest.param(m, id=m.name, marks=[pytest.mark.postgres] if m.backend == "postgres" else [])
            for m in S.MUTANTS]


@pytest.fixture(scope="module")
def pg_backend(pg_server: Any) -> Iterator[Any]:
    """For the CAS cases on PostgreSQL (tests/impl/test_cas_guards.py asks for it by this name)."""
    from qlwf.conformance.backends.postgres import PostgresBackend

    factory = PostgresBackend(pool_size=1)
    yield factory
    factory.shutdown()


def conformance_finding(backend: str) -> str | None:
    """The first lockstep divergence over the corpus and generated traces, or None. The backend's whole
    state and every outcome are compared with the model's after each step; invariants of the final
    state on top."""
    check = load_invariant_check()
    factory = backends.get(backend).create()
    try:
        traces = [*runner.corpus_traces(), *runner.generated_traces(GENERATED, SEED)]
        for trace in traces:
            port = factory.open()
            try:
                result = run_lockstep(trace, port, invariants=check, invariants_every_step=False)
            finally:
                port.close()
            if not result.passed:
                first = result.divergence.render().splitlines()[0] if result.divergence else "diverged"
                return f"{trace.name}: {first}"
    finally:
        factory.shutdown()
    return None


def cas_finding(mutant: Mutant, request: pytest.FixtureRequest) -> str | None:
    cas = test_modules.load("impl/test_cas_guards.py")

    case = next(c for c in cas.CASES if c.id == mutant.subject)
    assert mutant.backend is not None, mutant.check  # "cas-race:<backend>"
    ports: list[CommandPort] = []
    try:
        cas.test_a_change_underneath_fails_the_command_and_rolls_back(case, mutant.backend, request, ports)
    except FAILED as e:
        return f"cas case {case.id}: {str(e).splitlines()[0]}"
    finally:
        for port in ports:
            port.close()
    return None


def contract_test(subject: str) -> None:
    """Run one test function of tests/ (`module::function`); its only fixture may be a fresh SQLite `port`."""
    from qlwf.impl.sqlite.adapter import SqliteAdapter

    module, name = subject.split("::")
    test = getattr(test_modules.load_by_name(module), name)
    if "port" in inspect.signature(test).parameters:
        with SqliteAdapter() as port:
            test(port=port)
    else:
        test()


def contract_finding(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> str | None:
    contract_test(mutant.subject)  # passes without the mutant: the failure below is the mutant's doing
    assert mutant.plant is not None
    mutant.plant(monkeypatch)
    try:
        contract_test(mutant.subject)
    except FAILED as e:
        return f"{mutant.subject}: {str(e).splitlines()[0]}"
    return None


def sqlite_refusal(test_name: str, path: Path) -> None:
    """One refusal test of tests/impl/test_sqlite_schema.py on a fresh file database of the current schema."""
    schema = test_modules.load("impl/test_sqlite_schema.py")
    from qlwf.impl.sqlite.migrations import open_database

    test = getattr(schema, test_name)
    conn = open_database(path)
    try:
        if "seeded" in inspect.signature(test).parameters:
            schema.seed_admission(conn)
            test(seeded=conn)
        else:
            test(conn=conn)
    finally:
        conn.close()


def postgres_refusal(constraint: str, server: Any) -> None:
    """The tests/impl/test_pg_schema.py case of `constraint` on a fresh, seeded database of the current schema."""
    schema = test_modules.load("impl/test_pg_schema.py")

    (sql, params, sqlstate), = [(c[1], c[2], c[3]) for c in schema.CASES if c[4] == constraint]
    for conn in schema.seeded_connection(server, "qlwf_mutant"):
        error = schema.refused(conn, sql, params)
        assert (error.sqlstate, error.diag.constraint_name) == (sqlstate, constraint), error.diag.message_primary


def refusal_finding(mutant: Mutant, request: pytest.FixtureRequest, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> str | None:
    if mutant.backend == "sqlite":
        def run(tag: str) -> None:
            sqlite_refusal(mutant.subject, tmp_path / f"{tag}.sqlite3")
    else:
        server = request.getfixturevalue("pg_server")

        def run(tag: str) -> None:
            postgres_refusal(mutant.subject, server)
    run("schema")  # the refusal test passes on the real schema: the harness itself is sound
    assert mutant.plant is not None
    mutant.plant(monkeypatch)
    try:
        run("variant")
    except FAILED as e:
        return f"{mutant.subject}: {str(e).splitlines()[0]}"
    return None


@pytest.mark.parametrize("mutant", _params())
def test_storage_mutant_is_caught_by_its_check(mutant: Mutant, request: pytest.FixtureRequest, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert mutant.kind in ("conformance", "contract")
    if mutant.backend == "postgres" and not mutant.check.startswith("schema-refusal"):
        request.getfixturevalue("pg_server")
    if mutant.check.startswith("schema-refusal"):
        found = refusal_finding(mutant, request, tmp_path, monkeypatch)
    elif mutant.check.startswith("contract-test"):
        found = contract_finding(mutant, monkeypatch)
    else:
        assert mutant.plant is not None
        mutant.plant(monkeypatch)
        found = (conformance_finding(mutant.backend or "") if mutant.check.startswith("conformance")
                 else cas_finding(mutant, request))
    assert found, f"storage mutant {mutant.name} ({mutant.layer}: {mutant.breaks}) survived {mutant.check}"
    print(f"{mutant.name}: {found[:300]}")


def test_every_storage_layer_and_backend_has_mutants() -> None:
    layers = {(m.layer, m.check) for m in S.MUTANTS}
    for check in ("conformance:sqlite", "conformance:postgres", "contract-test:sqlite", "cas-race:sqlite",
                  "cas-race:postgres", "schema-refusal:sqlite", "schema-refusal:postgres"):
        assert any(c == check for _, c in layers), check
    assert {m.layer for m in S.MUTANTS} == {S.SEQ, S.SQLITE, S.POSTGRES, S.SCHEMA}


def test_a_missing_target_is_not_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(NotPlanted):
        S.code("qlwf.impl.commands.pages", "page_result", ("no such text", ""))(monkeypatch)
    with pytest.raises(NotPlanted):
        S.constant("qlwf.impl.sqlite.queries", "TASK_SQL", ("no such text", ""))(monkeypatch)
    with pytest.raises(NotPlanted):
        S.drop_constraint("CREATE TABLE t (a int)", "ql3_nothing_ck")


def test_planting_edits_nothing_on_disk_and_is_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    from qlwf.impl.commands import pages

    source = Path(pages.__file__).read_text(encoding="utf-8")
    code = pages.page_result.__code__
    with monkeypatch.context() as mp:
        S.code("qlwf.impl.commands.pages", "page_result", ('"truncated": len(rows) > limit',
                                                           '"truncated": len(rows) >= limit'))(mp)
        assert pages.page_result("task_candidates", [], 0)["truncated"] is True  # the mutant runs
    assert pages.page_result.__code__ is code and pages.page_result("task_candidates", [], 0)["truncated"] is False
    assert Path(pages.__file__).read_text(encoding="utf-8") == source


def test_drop_constraint_removes_exactly_one_clause() -> None:
    sql = ("CREATE TABLE t (\n    a int CONSTRAINT t_a_ck CHECK (a IN (1, 2)),\n    b int,\n"
           "    CONSTRAINT t_b_ck CHECK (b > 0 AND b < 'x)'),\n    CONSTRAINT t_last_ck CHECK (a <> b)\n);\n"
           "CREATE UNIQUE INDEX t_uidx ON t (a);\n")
    assert "t_a_ck" not in S.drop_constraint(sql, "t_a_ck") and "a int,\n" in S.drop_constraint(sql, "t_a_ck")
    assert S.drop_constraint(sql, "t_b_ck").count("CONSTRAINT") == 2
    assert S.drop_constraint(sql, "t_last_ck").endswith("CHECK (b > 0 AND b < 'x)')\n);\nCREATE UNIQUE INDEX "
                                                         "t_uidx ON t (a);\n")
    assert "INDEX" not in S.drop_constraint(sql, "t_uidx")
