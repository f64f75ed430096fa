"""Rows ↔ canonical records for the SQLite tables (storage.md §1–§3).

A record key in camelCase maps to the same words in snake_case. NULL maps to an absent optional
key (Run, RunAttempt, DispatchLease, RunEvent) or to an explicit null (StepRun). JSON columns
hold the model's canonical JSON text (`canonical_text`), byte for byte.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qlwf.model import tables as T
from qlwf.model.canonical import canonical_text
from qlwf.model.records import (
    ATTEMPT_KEYS,
    EVENT_KEYS,
    LEASE_KEYS,
    RUN_KEYS,
    STEP_RUN_KEYS,
    TASK_RECEIPT_KEYS,
)
from qlwf.model.steprun import LEDGER_KEYS

Record = dict[str, Any]
Row = Sequence[Any]


@functools.cache
def snake(key: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", key).lower()


@dataclass(frozen=True)
class Codec:
    """Column layout of one table whose columns mirror a record's top-level keys."""

    table: str
    keys: tuple[str, ...]
    null_is_absent: bool  # False: StepRun keeps nullable keys as explicit nulls
    json_keys: tuple[str, ...] = ()  # keys stored as canonical JSON text
    bool_keys: tuple[str, ...] = ()  # keys stored as INTEGER 0/1
    renamed: tuple[tuple[str, str], ...] = ()  # (key, column) where the column name is not snake(key)
    constants: tuple[tuple[str, Any], ...] = ()  # keys with a fixed value and no column (StepRun schema)

    @functools.cached_property
    def stored_keys(self) -> tuple[str, ...]:
        fixed = dict(self.constants)
        return tuple(k for k in self.keys if k not in fixed)

    @functools.cached_property
    def columns(self) -> tuple[str, ...]:
        names = dict(self.renamed)
        return tuple(names.get(k, snake(k)) for k in self.stored_keys)

    @functools.cached_property
    def select_list(self) -> str:
        return ", ".join(self.columns)

    @functools.cached_property
    def _plain(self) -> bool:
        return self.null_is_absent and not (self.constants or self.json_keys or self.bool_keys)

    def to_record(self, row: Row, parse: Callable[[str], Any] = json.loads) -> Record:
        """Rebuild the record; `parse` decodes the JSON columns (the snapshot reader passes a memo)."""
        if self._plain:
            return {k: v for k, v in zip(self.keys, row, strict=True) if v is not None}
        fixed = dict(self.constants)
        values = iter(row)
        out: Record = {}
        for key in self.keys:
            if key in fixed:
                out[key] = fixed[key]
                continue
            value = next(values)
            if value is None:
                if not self.null_is_absent:
                    out[key] = None
                continue
            if key in self.json_keys:
                value = parse(value)
            elif key in self.bool_keys:
                value = bool(value) if value in (0, 1) else value
            out[key] = value
        return out

    def to_row(self, record: Record) -> tuple[Any, ...]:
        values = []
        for key in self.stored_keys:
            value = record.get(key)
            if value is not None and key in self.json_keys:
                value = canonical_text(value)
            elif key in self.bool_keys and isinstance(value, bool):
                value = int(value)
            values.append(value)
        return tuple(values)

    def insert_sql(self) -> str:
        return (f'INSERT INTO "{self.table}" ({self.select_list}) '
                f"VALUES ({', '.join('?' for _ in self.stored_keys)})")


RUNS = Codec("Runs", RUN_KEYS, null_is_absent=True)
ATTEMPTS = Codec("RunAttempts", ATTEMPT_KEYS, null_is_absent=True)
LEASES = Codec("RunDispatchLeases", LEASE_KEYS, null_is_absent=True)
EVENTS = Codec("RunEvents", EVENT_KEYS, null_is_absent=True, json_keys=("payload",))
STEP_RUNS = Codec("StepRuns", STEP_RUN_KEYS, null_is_absent=False, bool_keys=("required",),
                  constants=(("schema", T.SCHEMA_STEP_RUN),))
MUTATIONS = Codec("StepRunMutations", LEDGER_KEYS, null_is_absent=True, json_keys=("stepRun",),
                  renamed=(("stepRun", "step_run_json"),))

ADMISSIONS_TABLE = "QingLong3PluginPackageWorkflowAdmissions"
ADMISSION_STEPS_TABLE = "QingLong3PluginPackageWorkflowAdmissionSteps"
TASK_RECEIPTS_TABLE = "QingLong3PluginPackageWorkflowTaskAttemptAdmissions"

# Task receipt columns mirrored from the record (every key but the schema); the table adds generation_digest
# and project_id, which come from the plan target.
TASK_RECEIPT_COLUMNS = tuple(snake(k) for k in TASK_RECEIPT_KEYS if k != "schema")

ADMISSION_STEP_KEYS = ("planDigest", "runId", "stepKey", "stepRunId", "taskId", "taskDefinitionRef",
                       "taskDefinitionDigest", "needs", "initialStatus", "mutationId", "eventId")
ADMISSION_STEP_COLUMNS = tuple("needs_json" if k == "needs" else snake(k) for k in ADMISSION_STEP_KEYS)

# Admission columns derived from the plan target (storage.md §2.6), in table order.
ADMISSION_TARGET_KEYS = ("projectId", "packageName", "installationId", "lockDigest", "generation",
                         "generationDigest", "materializedRevisionDigest", "publicationDigest", "workflowId",
                         "workflowDefinitionDigest")
ADMISSION_COLUMNS = ("plan_digest", "plan_id", "run_id", *(snake(k) for k in ADMISSION_TARGET_KEYS), "step_count",
                     "admitted_at_ms", "final_run_version", "final_run_event_sequence", "receipt_digest", "plan_json",
                     "receipt_json")


def admission_columns(plan: Record, receipt: Record) -> dict[str, Any]:
    """The admission row as the plan and receipt determine it (storage.md §2.6)."""
    target = plan["target"]
    return {
        "plan_digest": plan["planDigest"], "plan_id": plan["planId"], "run_id": plan["runId"],
        **{snake(k): target[k] for k in ADMISSION_TARGET_KEYS},
        "step_count": len(plan["steps"]), "admitted_at_ms": plan["plannedAtMs"],
        "final_run_version": receipt["finalRunVersion"], "final_run_event_sequence": receipt["finalRunEventSequence"],
        "receipt_digest": receipt["receiptDigest"], "plan_json": canonical_text(plan),
        "receipt_json": canonical_text(receipt),
    }


def task_receipt_columns(receipt: Record, plan: Record) -> dict[str, Any]:
    """The task attempt admission row (storage.md §2.8): the receipt plus two plan-target columns."""
    row = {snake(k): receipt[k] for k in TASK_RECEIPT_KEYS if k != "schema"}
    row["generation_digest"] = plan["target"]["generationDigest"]
    row["project_id"] = plan["target"]["projectId"]
    row["receipt_json"] = canonical_text(receipt)
    return row


def admission_step_record(row: Row) -> Record:
    out = dict(zip(ADMISSION_STEP_KEYS, row, strict=True))
    out["needs"] = json.loads(out["needs"])
    return out


def admission_step_row(entry: Record) -> tuple[Any, ...]:
    return tuple(canonical_text(entry[k]) if k == "needs" else entry[k] for k in ADMISSION_STEP_KEYS)


def insert_sql(table: str, columns: Sequence[str]) -> str:
    return f'INSERT INTO "{table}" ({", ".join(columns)}) VALUES ({", ".join("?" for _ in columns)})'
