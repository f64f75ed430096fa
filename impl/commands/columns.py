"""Record keys ↔ columns, shared by both dialects (storage.md §1–§3).

A record key in camelCase maps to the same words in snake_case; column names are identical on
SQLite and PostgreSQL, only table names and value types differ. NULL maps to an absent optional key
(Run, RunAttempt, DispatchLease, RunEvent) or to an explicit null (StepRun). JSON columns are
presented to the command logic as the model's canonical JSON text (`canonical_text`).
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
class Layout:
    """Column layout of one table whose columns mirror a record's top-level keys."""

    keys: tuple[str, ...]
    null_is_absent: bool  # False: StepRun keeps nullable keys as explicit nulls
    json_keys: tuple[str, ...] = ()  # keys stored as JSON (canonical text on SQLite, jsonb on PostgreSQL)
    bool_keys: tuple[str, ...] = ()  # keys stored as INTEGER 0/1 (SQLite) or boolean (PostgreSQL)
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
    def column_of(self) -> dict[str, str]:
        return dict(zip(self.stored_keys, self.columns, strict=True))

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

    def to_row(self, record: Record, bools_as_int: bool = True) -> tuple[Any, ...]:
        values = []
        for key in self.stored_keys:
            value = record.get(key)
            if value is not None and key in self.json_keys:
                value = canonical_text(value)
            elif bools_as_int and key in self.bool_keys and isinstance(value, bool):
                value = int(value)
            values.append(value)
        return tuple(values)


RUNS = Layout(RUN_KEYS, null_is_absent=True)
ATTEMPTS = Layout(ATTEMPT_KEYS, null_is_absent=True)
LEASES = Layout(LEASE_KEYS, null_is_absent=True)
EVENTS = Layout(EVENT_KEYS, null_is_absent=True, json_keys=("payload",))
STEP_RUNS = Layout(STEP_RUN_KEYS, null_is_absent=False, bool_keys=("required",),
                   constants=(("schema", T.SCHEMA_STEP_RUN),))
MUTATIONS = Layout(LEDGER_KEYS, null_is_absent=True, json_keys=("stepRun",), renamed=(("stepRun", "step_run_json"),))

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
ADMISSION_JSON_COLUMNS = ("plan_json", "receipt_json")


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


def admission_step_record(row: Row, parse: Callable[[str], Any] = json.loads) -> Record:
    out = dict(zip(ADMISSION_STEP_KEYS, row, strict=True))
    out["needs"] = parse(out["needs"])
    return out


def admission_step_row(entry: Record) -> tuple[Any, ...]:
    return tuple(canonical_text(entry[k]) if k == "needs" else entry[k] for k in ADMISSION_STEP_KEYS)
