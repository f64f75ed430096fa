"""Drift injection shared by the backends (impl.port.FaultInjection): how a patch rewrites a record.

A `corrupt` step overwrites one stored record behind the commands' back; columns and JSON mirrors are
rewritten together (a record-level drift the model mirrors in conformance/traces/drift_mirror.py). Digests are
not recomputed: that is the drift.
"""

from __future__ import annotations

from qlwf.model.records import Record, canonical

CORRUPTIBLE_KINDS = ("runs", "stepRuns", "attempts", "leases", "taskReceipts")


def patched(kind: str, record: Record, patch: Record, keys: tuple[str, ...]) -> Record:
    """Apply `patch` the way the harness defines it: null removes an optional key, except on StepRuns."""
    unknown = sorted(set(patch) - set(keys) | ({"schema"} & set(patch) if kind == "stepRuns" else set()))
    if unknown:  # a StepRun's schema has no column: it cannot drift in this store
        raise ValueError(f"cannot patch {kind} keys {unknown}")
    out = dict(record)
    for k, v in patch.items():
        if v is None and kind != "stepRuns":
            out.pop(k, None)
        else:
            out[k] = v
    return canonical(out, keys)
