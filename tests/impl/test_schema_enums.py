"""The status and enum CHECKs of both schemas restate model/tables.py: compare them, so that a change
of a table cannot leave a schema stale (and a schema edit cannot drift from the model).

The DDL is parsed, not executed: every `column IN ('a', ...)`, `column NOT IN (...)` and
`column = 'a'` inside a CREATE TABLE names only values of the column's model enum, and the column's
domain CHECK (its longest list) is exactly that enum.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from qlwf.model import tables as T

IMPL = Path(__file__).resolve().parents[2] / "impl"
_TABLE = re.compile(r'CREATE TABLE (?:IF NOT EXISTS )?(?:ql3\.)?"?(\w+)"?\s*\((.*?)\n\)', re.S)
_LIST = re.compile(r"\b(\w+)\s+(?:NOT\s+)?IN\s*\(\s*('[^']*'(?:\s*,\s*'[^']*')*)\s*\)", re.S)
_EQUALS = re.compile(r"\b(\w+)\s*=\s*'([^']*)'")

# logical table → (SQLite name, PostgreSQL name)
TABLE_NAMES = {
    "runs": ("Runs", "runs"),
    "step_runs": ("StepRuns", "step_runs"),
    "attempts": ("RunAttempts", "run_attempts"),
    "events": ("RunEvents", "run_events"),
    "admission_steps": ("QingLong3PluginPackageWorkflowAdmissionSteps", "plugin_package_workflow_admission_steps"),
    "task_admissions": ("QingLong3PluginPackageWorkflowTaskAttemptAdmissions",
                        "plugin_package_workflow_task_attempt_admissions"),
    "leases": ("RunDispatchLeases", "run_dispatch_leases"),
}
ADMITTED_STEP_STATUSES = ("pending", "ready")  # commands.md: a plan step starts pending, or ready with no needs
# (logical table, column) → the model's enum; the domain CHECK must be exactly it
ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("runs", "status"): T.RUN_STATUSES_ALL,
    ("runs", "cancel_reason"): T.CANCEL_REASONS,
    ("runs", "execution_origin"): T.EXECUTION_ORIGINS,
    ("runs", "execution_owner"): T.EXECUTION_OWNERS,
    ("step_runs", "status"): T.STEP_STATUSES,
    ("step_runs", "kind"): T.STEP_KINDS,
    ("attempts", "status"): T.ATTEMPT_STATUSES,
    ("events", "actor_type"): T.ACTOR_TYPES,
    ("admission_steps", "initial_status"): ADMITTED_STEP_STATUSES,
    ("task_admissions", "executor_type"): T.EXECUTOR_TYPES,
    ("leases", "status"): T.LEASE_STATUSES,
    ("leases", "release_reason"): T.RELEASE_REASONS,
}
# Where a backend's domain is narrower than the model enum on purpose (ql3's PostgreSQL schema holds
# runtime-owned Runs only, and leaves execution_origin unconstrained).
NARROWED: dict[str, dict[tuple[str, str], tuple[str, ...] | None]] = {
    "sqlite": {},
    "postgres": {("runs", "execution_owner"): (T.EXECUTION_OWNER,), ("runs", "execution_origin"): None},
}


def literal_lists(ddl: str) -> dict[str, dict[str, list[tuple[str, ...]]]]:
    """table → column → every literal list (or single `= 'x'` literal) the table's DDL names it with."""
    found: dict[str, dict[str, list[tuple[str, ...]]]] = {}
    for table, body in _TABLE.findall(ddl):
        columns = found.setdefault(table, {})
        for column, items in _LIST.findall(body):
            columns.setdefault(column, []).append(tuple(re.findall(r"'([^']*)'", items)))
        for column, value in _EQUALS.findall(body):
            columns.setdefault(column, []).append((value,))
    return found


def _ddl(backend: str) -> str:
    return (IMPL / backend / "schema.sql").read_text(encoding="utf-8")


def enum_problems(ddl: str, backend: str) -> list[str]:
    """Where `ddl` (backend's schema) and the model's enums disagree; [] when they agree."""
    parsed = literal_lists(ddl)
    index = 0 if backend == "sqlite" else 1
    problems = []
    for (table, column), enum in ENUMS.items():
        lists = parsed.get(TABLE_NAMES[table][index], {}).get(column, [])
        expected = NARROWED[backend].get((table, column), enum)
        stray = sorted({v for values in lists for v in values} - set(enum))
        if stray:
            problems.append(f"{table}.{column}: the DDL names {stray}, not in the model's enum {enum}")
        if expected is None:
            continue
        domain = max(lists, key=len, default=())
        if sorted(domain) != sorted(expected):
            problems.append(f"{table}.{column}: domain CHECK {domain} != model {expected}")
    return problems


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_schema_enum_checks_are_the_model_tables(backend: str) -> None:
    problems = enum_problems(_ddl(backend), backend)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_comparison_sees_a_stale_schema(backend: str) -> None:
    """A model value the DDL lacks, and a DDL value the model lacks, are both reported."""
    ddl = _ddl(backend)
    lacking = ddl.replace("'start_failed', 'capacity_changed', 'lease_expired'", "'start_failed', 'capacity_changed'")
    extra = ddl.replace("'reconcile', 'timeout'", "'reconcile', 'timeout', 'operator'")
    assert lacking != ddl and extra != ddl
    assert any(p.startswith("leases.release_reason: domain CHECK") for p in enum_problems(lacking, backend))
    assert any(p.startswith("runs.cancel_reason: the DDL names ['operator']") for p in enum_problems(extra, backend))


def test_every_enum_column_is_found_in_both_schemas() -> None:
    """The parser must see each constrained column (an empty parse would compare nothing)."""
    for index, backend in enumerate(("sqlite", "postgres")):
        parsed = literal_lists(_ddl(backend))
        for (table, column) in ENUMS:
            if NARROWED[backend].get((table, column), ()) is None:
                continue
            assert parsed.get(TABLE_NAMES[table][index], {}).get(column), f"{backend}: {table}.{column} not found"
