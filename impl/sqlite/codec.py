"""SQLite tables over the shared column layouts (storage.md §1–§3).

JSON columns hold the model's canonical JSON text (`canonical_text`), byte for byte; booleans are
INTEGER 0/1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qlwf.impl.commands import columns as C
from qlwf.impl.commands.columns import (
    ADMISSION_COLUMNS,
    ADMISSION_STEP_COLUMNS,
    TASK_RECEIPT_COLUMNS,
    Layout,
    Record,
    Row,
    admission_columns,
    admission_step_record,
    admission_step_row,
    snake,
    task_receipt_columns,
)

__all__ = [
    "ADMISSIONS_TABLE", "ADMISSION_COLUMNS", "ADMISSION_STEPS_TABLE", "ADMISSION_STEP_COLUMNS", "ATTEMPTS", "EVENTS",
    "LEASES", "MUTATIONS", "RUNS", "STEP_RUNS", "TASK_RECEIPTS_TABLE", "TASK_RECEIPT_COLUMNS", "Codec", "Record",
    "admission_columns", "admission_step_record", "admission_step_row", "insert_sql", "snake",
    "task_receipt_columns",
]


@dataclass(frozen=True)
class Codec:
    """One SQLite table (quoted PascalCase name) and the layout of its record."""

    table: str
    layout: Layout

    @property
    def keys(self) -> tuple[str, ...]:
        return self.layout.keys

    @property
    def stored_keys(self) -> tuple[str, ...]:
        return self.layout.stored_keys

    @property
    def columns(self) -> tuple[str, ...]:
        return self.layout.columns

    @property
    def select_list(self) -> str:
        return self.layout.select_list

    def to_record(self, row: Row, parse: Callable[[str], Any] = json.loads) -> Record:
        return self.layout.to_record(row, parse)

    def to_row(self, record: Record) -> tuple[Any, ...]:
        return self.layout.to_row(record, bools_as_int=True)

    def insert_sql(self) -> str:
        return insert_sql(self.table, self.columns)


RUNS = Codec("Runs", C.RUNS)
ATTEMPTS = Codec("RunAttempts", C.ATTEMPTS)
LEASES = Codec("RunDispatchLeases", C.LEASES)
EVENTS = Codec("RunEvents", C.EVENTS)
STEP_RUNS = Codec("StepRuns", C.STEP_RUNS)
MUTATIONS = Codec("StepRunMutations", C.MUTATIONS)

ADMISSIONS_TABLE = "QingLong3PluginPackageWorkflowAdmissions"
ADMISSION_STEPS_TABLE = "QingLong3PluginPackageWorkflowAdmissionSteps"
TASK_RECEIPTS_TABLE = "QingLong3PluginPackageWorkflowTaskAttemptAdmissions"


def insert_sql(table: str, columns: Sequence[str]) -> str:
    return f'INSERT INTO "{table}" ({", ".join(columns)}) VALUES ({", ".join("?" for _ in columns)})'
