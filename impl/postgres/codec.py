"""PostgreSQL tables over the shared column layouts, and canonical JSON from jsonb (storage.md §1–§3).

jsonb keeps neither key order nor formatting, so every jsonb value read back is rebuilt in the
record's canonical key order (records.md §6, event payloads per the catalogue of §6.11) before the
command logic sees it as canonical text; digests are therefore never computed over jsonb text.
Reordering never drops or changes a value: keys outside the canonical order keep their place at the
end, so drift stays visible. `bigint` values are parsed into Python ints (decimal strings accepted)
and their range is left to the record rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from qlwf.impl.commands import columns as C
from qlwf.impl.commands.columns import Layout, Record
from qlwf.model.canonical import canonical_text
from qlwf.model.records import (
    ADMISSION_RECEIPT_KEYS,
    ADMISSION_RECEIPT_STEP_KEYS,
    PLAN_KEYS,
    PLAN_STEP_KEYS,
    STEP_RUN_KEYS,
    TARGET_KEYS,
    TASK_RECEIPT_KEYS,
)

RUNS_TABLE = "ql3.runs"
ATTEMPTS_TABLE = "ql3.run_attempts"
LEASES_TABLE = "ql3.run_dispatch_leases"
EVENTS_TABLE = "ql3.run_events"
STEP_RUNS_TABLE = "ql3.step_runs"
MUTATIONS_TABLE = "ql3.step_run_mutations"
ADMISSIONS_TABLE = "ql3.plugin_package_workflow_admissions"
ADMISSION_STEPS_TABLE = "ql3.plugin_package_workflow_admission_steps"
TASK_RECEIPTS_TABLE = "ql3.plugin_package_workflow_task_attempt_admissions"

# Children before parents, so one statement can empty every table (conformance reset).
ALL_TABLES = (ADMISSION_STEPS_TABLE, TASK_RECEIPTS_TABLE, MUTATIONS_TABLE, LEASES_TABLE, EVENTS_TABLE,
              ATTEMPTS_TABLE, ADMISSIONS_TABLE, STEP_RUNS_TABLE, RUNS_TABLE)

# records.md §6.11: payload keys in order, per event shape (the key sets are pairwise distinct).
PAYLOAD_ORDERS: tuple[tuple[str, ...], ...] = (
    ("planId", "planDigest", "publicationDigest", "workflowId", "workflowDefinitionDigest", "stepCount"),
    ("stepRunId", "stepKey", "kind", "from", "to", "version", "stepRunDigest"),
    ("planDigest", "workflowId", "stepCount", "status"),
    ("planDigest", "stepRunId", "stepRunVersion", "resourceTaskId", "taskId", "taskRevision", "executorType",
     "executionDigest", "attemptNumber"),
    ("attempt_id", "lease_generation", "execution_scope", "from_status", "to_status"),
    ("attempt_id", "lease_generation", "execution_scope", "from_status", "to_status", "release_reason"),
    ("execution_scope", "attempt_id", "step_run_id", "from_status", "to_status", "lease_generation",
     "deadline_at_ms", "version"),
    ("execution_scope", "attempt_id", "step_run_id", "from_status", "to_status", "lease_generation", "version"),
    ("execution_scope", "attempt_id", "step_run_id", "from_status", "to_status", "lease_generation", "exit_code",
     "error_code", "version"),
    ("execution_scope", "attempt_id", "step_run_id", "lease_generation", "deadline_at_ms", "version"),
    ("execution_scope", "attempt_id", "step_run_id", "from_status", "to_status", "reason", "error_code", "version"),
    ("execution_scope", "attempt_id", "step_run_id", "from_status", "to_status", "cancel_reason",
     "cancel_requested_at_ms", "error_code", "version"),
    ("from_status", "to_status", "step_count", "cancel_reason", "cancel_requested_at_ms", "error_code", "version"),
    ("cancel_reason", "cancel_requested_at_ms", "version"),
)
_PAYLOAD_ORDER_BY_KEYS = {frozenset(order): order for order in PAYLOAD_ORDERS}
assert len(_PAYLOAD_ORDER_BY_KEYS) == len(PAYLOAD_ORDERS)

_TASK_REVISION = re.compile(r"^qltd:v1:([1-9][0-9]{0,9}):[0-9a-f]{64}$")


def ordered(value: Any, order: Sequence[str]) -> Any:
    """`value` with the keys of `order` first, in that order, then any other keys; non-objects unchanged."""
    if not isinstance(value, dict):
        return value
    out = {k: value[k] for k in order if k in value}
    out.update((k, v) for k, v in value.items() if k not in out)
    return out


def plan_value(value: Any) -> Any:
    plan = ordered(value, PLAN_KEYS)
    if isinstance(plan, dict):
        if "target" in plan:
            plan["target"] = ordered(plan["target"], TARGET_KEYS)
        if isinstance(plan.get("steps"), list):
            plan["steps"] = [ordered(s, PLAN_STEP_KEYS) for s in plan["steps"]]
    return plan


def admission_receipt_value(value: Any) -> Any:
    receipt = ordered(value, ADMISSION_RECEIPT_KEYS)
    if isinstance(receipt, dict) and isinstance(receipt.get("steps"), list):
        receipt["steps"] = [ordered(s, ADMISSION_RECEIPT_STEP_KEYS) for s in receipt["steps"]]
    return receipt


def task_receipt_value(value: Any) -> Any:
    return ordered(value, TASK_RECEIPT_KEYS)


def step_run_value(value: Any) -> Any:
    return ordered(value, STEP_RUN_KEYS)


def payload_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    order = _PAYLOAD_ORDER_BY_KEYS.get(frozenset(value))
    return value if order is None else ordered(value, order)


def text(value: Any) -> str:
    """Canonical JSON text of an already reordered jsonb value."""
    return canonical_text(value)


def bigint(value: Any) -> Any:
    """A bigint column value as an int; a driver may deliver decimal strings (storage.md §3)."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}", value):
        return int(value)
    return value


def source_revision(task_revision: str) -> int | None:
    """The integer of `qltd:v1:<n>:<digest>` (storage.md §2.8: PostgreSQL stores it separately)."""
    m = _TASK_REVISION.match(task_revision)
    return int(m.group(1)) if m else None


class Table:
    """One PostgreSQL table: its name, the shared layout and the `bigint` columns to parse."""

    def __init__(self, name: str, layout: Layout, bigints: tuple[str, ...]) -> None:
        self.name = name
        self.layout = layout
        self.columns = layout.columns
        self._bigint_index = tuple(i for i, c in enumerate(layout.columns) if c in bigints)
        self.select_list = ", ".join(layout.columns)
        json_columns = {layout.column_of[k] for k in layout.json_keys}
        # The same columns with jsonb as its text (snapshot.py keys its memo on whole rows, which must hash).
        self.text_select_list = ", ".join(f"{c}::text" if c in json_columns else c for c in layout.columns)
        values = ", ".join("%s::jsonb" if k in layout.json_keys else "%s" for k in layout.stored_keys)
        self.insert_sql = f"INSERT INTO {name} ({self.select_list}) VALUES ({values})"

    def to_record(self, row: Sequence[Any], parse: Callable[[Any], Any] = lambda v: v) -> Record:
        """The record of a row; `parse` decodes its JSON columns (by default jsonb arrives decoded)."""
        values = list(row)
        for i in self._bigint_index:
            values[i] = bigint(values[i])
        record = self.layout.to_record(values, parse=parse)
        if self.layout is C.EVENTS:
            record["payload"] = payload_value(record["payload"])
        elif self.layout is C.MUTATIONS:
            record["stepRun"] = step_run_value(record["stepRun"])
        return record

    def to_row(self, record: Record) -> tuple[Any, ...]:
        return self.layout.to_row(record, bools_as_int=False)


_TIMES = ("created_at_ms", "started_at_ms", "finished_at_ms", "cancel_requested_at_ms", "lease_expires_at_ms",
          "deadline_at_ms", "ready_at_ms", "updated_at_ms", "committed_at_ms", "acquired_at_ms", "renewed_at_ms",
          "expires_at_ms", "released_at_ms", "completed_at_ms", "admitted_at_ms")

RUNS = Table(RUNS_TABLE, C.RUNS, _TIMES)
ATTEMPTS = Table(ATTEMPTS_TABLE, C.ATTEMPTS, _TIMES)
LEASES = Table(LEASES_TABLE, C.LEASES, _TIMES)
EVENTS = Table(EVENTS_TABLE, C.EVENTS, _TIMES)
MUTATIONS = Table(MUTATIONS_TABLE, C.MUTATIONS, _TIMES)
STEP_RUNS = Table(STEP_RUNS_TABLE, C.STEP_RUNS, _TIMES)

# Columns read back as-is from the immutable ledgers; JSON columns are converted by the readers.
ADMISSION_COLUMNS = C.ADMISSION_COLUMNS
ADMISSION_STEP_COLUMNS = C.ADMISSION_STEP_COLUMNS
TASK_RECEIPT_COLUMNS = C.TASK_RECEIPT_COLUMNS


def admission_row(values: Sequence[Any]) -> dict[str, Any]:
    """An admission row as the command logic reads it: JSON columns as canonical text."""
    row = dict(zip(ADMISSION_COLUMNS, values, strict=True))
    row["admitted_at_ms"] = bigint(row["admitted_at_ms"])
    row["plan_json"] = text(plan_value(row["plan_json"]))
    row["receipt_json"] = text(admission_receipt_value(row["receipt_json"]))
    return row


def receipt_row(values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip((*TASK_RECEIPT_COLUMNS, "receipt_json"), values, strict=True))
    row["admitted_at_ms"] = bigint(row["admitted_at_ms"])
    row["receipt_json"] = text(task_receipt_value(row["receipt_json"]))
    return row


def admission_step_record(values: Sequence[Any]) -> Record:
    return C.admission_step_record(values, parse=lambda v: v)


def insert_sql(table: str, columns: Sequence[str], json_columns: Sequence[str] = ()) -> str:
    values = ", ".join("%s::jsonb" if c in json_columns else "%s" for c in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})"


def receipt_columns(receipt: Record, plan: Record) -> dict[str, Any]:
    """The task receipt row: the shared columns plus `source_revision` (storage.md §2.8)."""
    row = C.task_receipt_columns(receipt, plan)
    row["source_revision"] = source_revision(receipt["taskRevision"])
    return row
