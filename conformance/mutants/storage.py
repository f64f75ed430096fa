"""Storage mutants: impl/commands (check sequences, guards, pages), both adapters' SQL, both schemas.

Nothing is edited on disk. Three ways to plant one, each undone by the patcher:
* `code` — an in-memory edit of one function's source (impl/commands, store.py, queries.py): the
  text is changed, compiled in the function's own module namespace, and its code object swapped
  into the existing function, so every caller, however it imported the function, runs the mutant;
* `constant` — a module's SQL text constant replaced by an edited copy (queries.py, store.py);
* `schema` — the schema a fresh database is created from is an edited copy of schema.sql (a
  constraint dropped or changed), for SQLite through the migration list, for PostgreSQL through the
  schema loader.
An edit whose text is not found exactly once raises NotPlanted: the manifest cannot rot silently.

Checks: `conformance:<backend>` replays the golden corpus, then seeded generated traces, in
lockstep with the model; `contract-test:sqlite` runs one contract test of tests/ (a typed error or
a page the spec prescribes) where no trace reaches the situation; `cas-race:<backend>` runs one case
of tests/impl/test_cas_guards.py (a change
underneath the CAS must fail the command); `schema-refusal:<backend>` runs the refusal test of the
dropped constraint (tests/impl/test_sqlite_schema.py, tests/impl/test_pg_schema.py).
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable
from types import FunctionType, ModuleType
from typing import Any

from .base import Mutant, NotPlanted, Patcher

Edit = tuple[str, str]  # (text, replacement); the text must occur exactly once


def _edited(text: str, edits: tuple[Edit, ...], where: str) -> str:
    for old, new in edits:
        if text.count(old) != 1:
            raise NotPlanted(f"{where}: {old!r} occurs {text.count(old)} times, not once")
        text = text.replace(old, new)
    return text


def code(module: str, qualname: str, *edits: Edit) -> Callable[[Patcher], None]:
    """Swap the code of `module.qualname` (a function or a method) for its source with `edits` applied."""

    def plant(mp: Patcher) -> None:
        import importlib

        mod: ModuleType = importlib.import_module(module)
        owner: Any = mod
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn = inspect.unwrap(owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name))
        if not isinstance(fn, FunctionType) or fn.__code__.co_freevars:
            raise NotPlanted(f"{module}.{qualname} is not a plain function")
        source = _edited(textwrap.dedent(inspect.getsource(fn)), edits, f"{module}.{qualname}")
        namespace = dict(vars(mod))  # the module's globals, copied: the module itself is left alone
        exec(compile(source, f"<mutant of {module}.{qualname}>", "exec"), namespace)
        mp.setattr(fn, "__code__", namespace[name].__code__)

    return plant


def constant(module: str, name: str, *edits: Edit) -> Callable[[Patcher], None]:
    def plant(mp: Patcher) -> None:
        import importlib

        mod = importlib.import_module(module)
        mp.setattr(mod, name, _edited(getattr(mod, name), edits, f"{module}.{name}"))

    return plant


# ---- schema variants ---------------------------------------------------------------------------
def drop_constraint(sql: str, name: str) -> str:
    """schema.sql without the named constraint: a `CREATE UNIQUE INDEX name …;` statement, or a
    `CONSTRAINT name …` clause of a column or a table (with the comma that separated it)."""
    index = re.search(rf"CREATE UNIQUE INDEX (?:IF NOT EXISTS )?{name}\b[^;]*;", sql)
    if index:
        return sql[:index.start()] + sql[index.end():]
    matches = [m.start() for m in re.finditer(rf"\bCONSTRAINT {name}\b", sql)]
    if len(matches) != 1:
        raise NotPlanted(f"constraint {name} occurs {len(matches)} times in the schema")
    start = i = matches[0]
    depth = 0
    while True:
        ch = sql[i]
        if ch == "'":
            i = sql.index("'", i + 1)
        elif sql.startswith("--", i):
            i = sql.index("\n", i)
        elif ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif (ch == ")" or ch == ",") and depth == 0:
            break
        i += 1
    before = sql[:start].rstrip()
    while before.rsplit("\n", 1)[-1].lstrip().startswith("--"):  # the constraint's own comment lines
        before = before.rsplit("\n", 1)[0].rstrip()
    if before.endswith(","):  # a table constraint: drop the separating comma with it
        return before[:-1] + "\n" + sql[i:]
    return sql[:start].rstrip() + sql[i:]


def sqlite_schema(transform: Callable[[str], str]) -> Callable[[Patcher], None]:
    def plant(mp: Patcher) -> None:
        from qlwf.impl.sqlite import memory, migrations

        first = migrations.MIGRATIONS[0]
        text = first.load_sql()
        variant = transform(text)
        if variant == text:
            raise NotPlanted("the SQLite schema variant equals the schema")
        mp.setattr(migrations, "MIGRATIONS", (migrations.Migration(first.version, first.name, lambda: variant),
                                              *migrations.MIGRATIONS[1:]))
        memory._template.cache_clear()  # in-memory stores are cloned from a template of the schema
        mp.setattr(memory, "_template", _uncached(memory._template))

    return plant


def _uncached(template: Any) -> Callable[[], bytes]:
    """The template function without its cache, for the mutant's lifetime (the cached image is the
    schema's, and the next test clones it again once the patch is undone)."""
    fn: Callable[[], bytes] = template.__wrapped__
    return fn


def postgres_schema(transform: Callable[[str], str]) -> Callable[[Patcher], None]:
    def plant(mp: Patcher) -> None:
        from qlwf.impl.postgres import database

        text = database.schema_sql()
        variant = transform(text)
        if variant == text:
            raise NotPlanted("the PostgreSQL schema variant equals the schema")
        mp.setattr(database, "schema_sql", lambda: variant)

    return plant


def _dropping(name: str) -> Callable[[str], str]:
    return lambda sql: drop_constraint(sql, name)


def _replacing(*edits: Edit) -> Callable[[str], str]:
    return lambda sql: _edited(sql, edits, "schema.sql")


# ---- the mutants -------------------------------------------------------------------------------
C = "qlwf.impl.commands"
SQ = "qlwf.impl.sqlite"
PG = "qlwf.impl.postgres"
SEQ, SQLITE, POSTGRES, SCHEMA = "impl command sequence", "SQLite storage", "PostgreSQL storage", "schema"


def _conformance(name: str, breaks: str, layer: str, backend: str, plant: Callable[[Patcher], None]) -> Mutant:
    return Mutant(name, breaks, layer, f"conformance:{backend}", "conformance", plant)


def _cas(name: str, breaks: str, backend: str, case: str, plant: Callable[[Patcher], None]) -> Mutant:
    return Mutant(name, breaks, SEQ, f"cas-race:{backend}", "contract", plant, case)


def _contract(name: str, breaks: str, layer: str, test: str, plant: Callable[[Patcher], None]) -> Mutant:
    return Mutant(name, breaks, layer, "contract-test:sqlite", "contract", plant, test)


def _refusal(name: str, breaks: str, backend: str, test: str, plant: Callable[[Patcher], None]) -> Mutant:
    return Mutant(name, breaks, SCHEMA, f"schema-refusal:{backend}", "contract", plant, test)


CEILING_TEST = "test_sqlite_adapter::test_counter_ceiling_is_exact_for_worker_commands"
# impl passes the shared clock check (model/integrity.py) no leases: the floor is the last event only.
LEASE_FLOOR = ("self.store.last_event_time(run_id), leases)", "self.store.last_event_time(run_id), [])")
WITHOUT_DIGEST: tuple[Edit, ...] = (("AND step_run_digest = {m} AND status", "AND status"),
                                    ('mutation["expectedStepRunDigest"], ', ""))
WITHOUT_LEASE_VERSION: tuple[Edit, ...] = (("AND version = {m} AND", "AND"),
                                           ('old["status"], old["version"],', 'old["status"],'))
# Both stores format the active-attempt IN-list from model/tables.py once (impl/commands/store.ACTIVE_SQL)
# and bind it at import: the mutant edits each backend's bound copy.
ACTIVE_WITHOUT_RUNNING = ("'starting', 'running')", "'starting')")

MUTANTS: tuple[Mutant, ...] = (
    # impl/commands: check sequences and effects
    _conformance("task-attempt-number-restarts", "task-attempts.md §3: attempt numbers count up per Run "
                 "(1 + the highest used)", SEQ, "sqlite",
                 code(f"{C}.cmd_tasks", "run", ("n = 1 + store.max_attempt_number(run[\"id\"])", "n = 1"))),
    _conformance("claim-keeps-lease-generation", "commands.md §4.6: a new claim of a lease that was held "
                 "before takes generation + 1", SEQ, "sqlite",
                 code(f"{C}.cmd_worker", "claim_lease",
                      ('lease["leaseGeneration"] + 1)', 'lease["leaseGeneration"])'))),
    _conformance("converge-skips-run-cas", "cancellation.md §7: convergence writes the Run (terminal status, "
                 "counters) last", SEQ, "sqlite",
                 code(f"{C}.cmd_cancel", "converge", ('store.cas_run("convergence", run, res["run"])', "pass"))),
    _conformance("release-refuses-cancelling-run", "storage.md §5: a lease release moves the Run counters "
                 "whether or not the Run has cancel intent (counters_any_intent)", SEQ, "sqlite",
                 code(f"{C}.cmd_worker", "release_lease", ('cas_run("counters_any_intent"', 'cas_run("counters"'))),
    _conformance("recovery-consults-evidence-of-claim", "task-attempts.md §8: an expired unstarted claim is "
                 "requeued whatever the evidence", SEQ, "sqlite",
                 code(f"{C}.cmd_recovery", "run", ('if a["status"] == "claimed":',
                                                   'if a["status"] == "claimed" and args["evidence"] != "running":'))),
    _conformance("page-cursor-one-row-late", "commands.md §4.18: the next cursor is the last processed "
                 "candidate", SEQ, "sqlite",
                 code(f"{C}.pages", "assemble_page", ("last = rows[limit - 1]", "last = rows[limit]"))),
    _conformance("page-truncated-when-full", "commands.md §2.6: a page is truncated only when more rows "
                 "follow", SEQ, "sqlite",
                 code(f"{C}.pages", "page_result",
                      ('"truncated": len(rows) > limit', '"truncated": len(rows) >= limit'))),
    _conformance("renew-repeats-timeout-request", "S-5 / INV-31: a renew past the deadline requests the task "
                 "timeout once", SEQ, "sqlite",
                 code(f"{C}.cmd_worker", "renew_lease", ('and not tx.store.timeout_requested(run["id"], a["id"]))',
                                                         ")"))),
    _conformance("holder-ignores-generation", "commands.md §4.7–§4.12: a replay is recognized by worker and "
                 "lease generation", SEQ, "sqlite",
                 code(f"{C}.cmd_worker", "_same_holder",
                      ('\n            and lease["leaseGeneration"] == args["leaseGeneration"]',
                                                          ""))),
    _conformance("task-admission-ignores-intent", "D-3 / INV-15: no task attempt is admitted after cancel "
                 "intent", SEQ, "sqlite",
                 code(f"{C}.cmd_tasks", "run", ('if "cancelRequestedAtMs" in run:', "if False:"))),
    _contract("clock-floor-ignores-leases", "S-14: the observation time may not precede the last lease "
              "update either", SEQ, "test_sqlite_adapter::test_clock_regression_below_a_lease_update_fails_closed",
              code(f"{C}.loads", "Loads.clock_floor", LEASE_FLOOR)),
    _contract("clock-floor-missing", "S-14: an observation time before the Run's last event is a clock "
              "regression", SEQ, "test_sqlite_adapter::test_clock_regression_fails_closed",
              code(f"{C}.loads", "Loads.clock_floor", ("if regression is not None:", "if False:"))),
    # Survivors of the Cosmic Ray run (docs/mutation-survivors.md), killed by the contract tests added for them
    _contract("recovery-accepts-released-lease", "commands.md §4.14: recovery needs a `leased` lease", SEQ,
              "test_sqlite_adapter::test_recovery_refuses_a_released_lease",
              code(f"{C}.cmd_recovery", "run",
                   ('if lease is None or lease["status"] != "leased":', "if lease is None:"))),
    _contract("start-ceiling-counts-two-events", "commands.md §2.5: start_attempt appends one event; the ceiling "
              "is checked for exactly that", SEQ, CEILING_TEST, code(f"{C}.cmd_worker", "start_attempt",
                   ('tx.ceiling(run["version"] + 1)', 'tx.ceiling(run["version"] + 2)'))),
    _contract("renew-ceiling-ignores-timeout-request", "commands.md §2.5: a renew that appends the timeout "
              "request moves the Run counters past the ceiling check", SEQ, CEILING_TEST,
              code(f"{C}.cmd_worker", "renew_lease", ('(run["version"] + 1,)', '(run["version"] + 0,)'))),
    _contract("terminal-drift-needs-mutations", "frontier.md §6: a terminal Run must recompute to its stored "
              "status", SEQ, "test_sqlite_adapter::test_a_terminal_run_that_recomputes_to_another_status_is_drift",
              code(f"{C}.cmd_frontier", "run", ('if mutations or res["terminalStatus"] != run["status"]:',
                                                'if mutations and res["terminalStatus"] != run["status"]:'))),
    # impl/commands/guards.py: each CAS predicate, raced by a second writer (both dialects share the text)
    _cas("step-run-cas-without-digest", "storage.md §5: the StepRun CAS compares the digest", "sqlite",
         "step_run.step_run_digest",
         code(f"{C}.guards", "step_run", *WITHOUT_DIGEST)),
    _cas("frontier-run-cas-without-intent", "storage.md §5: the frontier's Run CAS requires no cancel intent",
         "sqlite", "run.frontier.cancel_requested_at_ms",
         code(f"{C}.guards", "run", ('if guard in ("frontier", "counters", "cancel_request"):',
                                     'if guard in ("counters", "cancel_request"):'),
              ('elif guard != "counters_any_intent":', 'elif guard not in ("counters_any_intent", "frontier"):'))),
    _cas("lease-cas-without-version", "storage.md §5: the lease CAS compares the lease version", "sqlite",
         "lease.version",
         code(f"{C}.guards", "lease", *WITHOUT_LEASE_VERSION)),
    _cas("attempt-cas-without-callback-sequence", "storage.md §5: the attempt CAS compares callbackSequence",
         "sqlite", "attempt.callback_sequence",
         code(f"{C}.guards", "attempt", ("AND callback_sequence = {m} ", ""),
              ('old["status"], old["callbackSequence"],', 'old["status"],'))),
    _cas("convergence-attempt-cas-without-status", "storage.md §5: convergence settles only a `claimed` attempt",
         "sqlite", "attempt_convergence.status",
         code(f"{C}.guards", "attempt_convergence", (" AND status = 'claimed'", ""))),
    _cas("pg-step-run-cas-without-digest", "storage.md §5: the StepRun CAS compares the digest", "postgres",
         "step_run.step_run_digest",
         code(f"{C}.guards", "step_run", *WITHOUT_DIGEST)),
    _cas("pg-lease-cas-without-version", "storage.md §5: the lease CAS compares the lease version", "postgres",
         "lease.version",
         code(f"{C}.guards", "lease", *WITHOUT_LEASE_VERSION)),
    # impl/sqlite: store.py statements and candidate queries
    _conformance("sqlite-active-without-running", "storage.md §4: active attempts are claimed, starting and "
                 "running", SQLITE, "sqlite", constant(f"{SQ}.store", "ACTIVE_SQL", ACTIVE_WITHOUT_RUNNING)),
    _conformance("sqlite-receipt-ignores-epoch", "task-attempts.md §3: one task admission per StepRun epoch "
                 "(run, step, version)", SQLITE, "sqlite",
                 code(f"{SQ}.store", "SqliteStore.receipt_for_epoch", (" AND step_run_version = ?", ""),
                      ("(run_id, step_run_id, version)", "(run_id, step_run_id)"))),
    _contract("sqlite-last-event-is-first", "S-14: the clock floor is the Run's latest event", SQLITE,
              "test_sqlite_adapter::test_clock_regression_fails_closed",
              code(f"{SQ}.store", "SqliteStore.last_event_time", ("ORDER BY sequence DESC", "ORDER BY sequence"))),
    _conformance("sqlite-timeout-request-never-found", "S-5: a recorded task timeout request is found again",
                 SQLITE, "sqlite", code(f"{SQ}.store", "SqliteStore.timeout_requested",
                                        ("'workflow.task_timeout_requested'", "'workflow.task_timeout'"))),
    _conformance("sqlite-frontier-lists-cancelling-runs", "frontier.md §5: no frontier candidate has cancel "
                 "intent", SQLITE, "sqlite",
                 constant(f"{SQ}.queries", "FRONTIER_SQL", ("AND r.cancel_requested_at_ms IS NULL ", ""))),
    _conformance("sqlite-task-candidates-include-admitted", "task-attempts.md §2: a StepRun epoch with an "
                 "admission is no task candidate", SQLITE, "sqlite",
                 constant(f"{SQ}.queries", "TASK_SQL", ("AND NOT EXISTS (SELECT 1", "AND 1 = 1 OR EXISTS (SELECT 1"))),
    _contract("sqlite-recovery-lists-released-leases", "task-attempts.md §9: only leased, expired leases are "
              "recovery candidates", SQLITE, "test_sqlite_adapter::test_recovery_candidates_list_only_leased_leases",
              constant(f"{SQ}.queries", "RECOVERY_SQL", ("AND l.status = 'leased' ", ""))),
    _conformance("sqlite-cancellation-order-by-id", "cancellation.md §8: candidates in (cancelRequestedAtMs, "
                 "runId) order", SQLITE, "sqlite",
                 constant(f"{SQ}.queries", "CANCELLATION_SQL", ("ORDER BY cancel_requested_at_ms, id", "ORDER BY id"))),
    _conformance("sqlite-keyset-repeats-cursor-row", "commands.md §2.6: a page starts strictly after its "
                 "cursor", SQLITE, "sqlite", code(f"{SQ}.queries", "_rows", ("} > (?, ?)", "} >= (?, ?)"))),
    # impl/postgres: store.py statements and candidate queries
    _conformance("pg-active-without-running", "storage.md §4: active attempts are claimed, starting and running",
                 POSTGRES, "postgres", constant(f"{PG}.store", "ACTIVE_SQL", ACTIVE_WITHOUT_RUNNING)),
    _conformance("pg-frontier-lists-cancelling-runs", "frontier.md §5: no frontier candidate has cancel intent",
                 POSTGRES, "postgres",
                 constant(f"{PG}.queries", "FRONTIER_SQL", ("AND r.cancel_requested_at_ms IS NULL ", ""))),
    _conformance("pg-cancellation-order-by-id", "cancellation.md §8: candidates in (cancelRequestedAtMs, runId) "
                 "order", POSTGRES, "postgres",
                 constant(f"{PG}.queries", "CANCELLATION_SQL", ('ORDER BY cancel_requested_at_ms, id COLLATE "C"',
                                                                'ORDER BY id COLLATE "C"'))),
    _conformance("pg-receipt-ignores-epoch", "task-attempts.md §3: one task admission per StepRun epoch (run, "
                 "step, version)", POSTGRES, "postgres",
                 code(f"{PG}.store", "PgStore.receipt_for_epoch", (" AND step_run_version = %s", ""),
                      ("(run_id, step_run_id, version)", "(run_id, step_run_id)"))),
    # schemas
    _conformance("sqlite-step-key-unique-across-runs", "storage.md §2: step keys are unique per Run, not across "
                 "Runs", SCHEMA, "sqlite",
                 sqlite_schema(_replacing(('ON "StepRuns" (run_id, step_key)', 'ON "StepRuns" (step_key)')))),
    _conformance("pg-step-key-unique-across-runs", "storage.md §2: step keys are unique per Run, not across Runs",
                 SCHEMA, "postgres",
                 postgres_schema(_replacing(("ql3_step_runs_run_step_uidx UNIQUE (run_id, step_key)",
                                             "ql3_step_runs_run_step_uidx UNIQUE (step_key)")))),
    _refusal("sqlite-no-step-key-unique", "storage.md §2: one StepRun per (run, step key)", "sqlite",
             "test_duplicate_step_key_in_run_is_rejected", sqlite_schema(_dropping("ql3_step_runs_run_step_uidx"))),
    _refusal("sqlite-no-event-sequence-unique", "storage.md §2: one event per (run, sequence)", "sqlite",
             "test_duplicate_event_sequence_is_rejected", sqlite_schema(_dropping("ql3_run_events_run_sequence_uidx"))),
    _refusal("sqlite-no-attempt-number-unique", "storage.md §2: one attempt per (run, attempt number)", "sqlite",
             "test_duplicate_attempt_number_is_rejected",
             sqlite_schema(_dropping("ql3_run_attempts_run_attempt_uidx"))),
    _refusal("sqlite-no-attempt-lease-shape-check", "records.md §6.7: an attempt's lease keys are all present or "
             "all absent", "sqlite", "test_attempt_with_partial_lease_fields_is_rejected",
             sqlite_schema(_dropping("ql3_run_attempts_lease_shape_ck"))),
    _refusal("sqlite-no-lease-shape-check", "records.md §6.8: a leased lease has no release time", "sqlite",
             "test_leased_lease_with_release_time_is_rejected",
             sqlite_schema(_dropping("ql3_run_dispatch_leases_shape_ck"))),
    _refusal("pg-no-run-status-check", "storage.md §2: a Run status is one of the Run statuses", "postgres",
             "ql3_runs_status_ck", postgres_schema(_dropping("ql3_runs_status_ck"))),
    _refusal("pg-no-attempt-step-run-fk", "storage.md §2: an attempt references a StepRun of its Run", "postgres",
             "ql3_run_attempts_step_run_fk", postgres_schema(_dropping("ql3_run_attempts_step_run_fk"))),
    _refusal("pg-no-idempotency-unique", "storage.md §2: one Run per (project, idempotency key)", "postgres",
             "ql3_runs_project_idempotency_uidx", postgres_schema(_dropping("ql3_runs_project_idempotency_uidx"))),
)
