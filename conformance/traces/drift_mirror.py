"""The model's mirror of the `corrupt` trace step (drift injection).

A corrupt step overwrites one stored record: `patch` maps record keys to new values; JSON null
removes an optional key (Run, attempt, lease, receipt) or stores an explicit null (StepRun, whose
nullable keys are always present). Digests are NOT recomputed: that is the drift. The backend
applies the same patch to its rows (FaultInjection) and the lockstep harness checks that both
stores read back the same records, then that both refuse the drifted record the same way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from qlwf.impl.commands.drift_patch import patched
from qlwf.model.records import ATTEMPT_KEYS, LEASE_KEYS, RUN_KEYS, STEP_RUN_KEYS, TASK_RECEIPT_KEYS
from qlwf.model.state import State

Record = dict[str, Any]

# snapshot kind → (State field, canonical key order)
CORRUPTIBLE: dict[str, tuple[str, tuple[str, ...]]] = {
    "runs": ("runs", RUN_KEYS),
    "stepRuns": ("step_runs", STEP_RUN_KEYS),
    "attempts": ("attempts", ATTEMPT_KEYS),
    "leases": ("leases", LEASE_KEYS),
    "taskReceipts": ("receipts", TASK_RECEIPT_KEYS),
}


def apply_patch(kind: str, record: Record, patch: Record) -> Record:
    """The patched record, by the same rule the backends store it (impl/commands/drift_patch.py)."""
    _, keys = CORRUPTIBLE[kind]
    return patched(kind, record, patch, keys)


def corrupt_state(state: State, kind: str, key: list[Any], patch: Record) -> State:
    if kind not in CORRUPTIBLE:
        raise ValueError(f"record kind {kind!r} cannot be corrupted (supported: {tuple(CORRUPTIBLE)})")
    field, _ = CORRUPTIBLE[kind]
    table = getattr(state, field)
    if len(key) != 1 or key[0] not in table:
        raise ValueError(f"no {kind} record with key {key!r}")
    changes: dict[str, Any] = {field: {**table, key[0]: apply_patch(kind, table[key[0]], patch)}}  # a State field
    return replace(state, **changes)
