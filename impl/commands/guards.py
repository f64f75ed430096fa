"""The compare-and-set predicates of storage.md §5, written once for both dialects.

Each function returns the `SET … WHERE …` part of an UPDATE and its parameters; a store prefixes
`UPDATE <table>` and requires exactly one changed row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qlwf.model.canonical import canonical_text
from qlwf.model.records import Record

from . import columns as C

# The StepRun columns a transition may change (everything else is identity).
STEP_RUN_MUTABLE = ("status", "version", "attemptCount", "outputRef", "approvalRequestId", "readyAtMs", "startedAtMs",
                    "finishedAtMs", "resultCode", "errorSummary", "updatedAtMs", "lastMutationId", "stepRunDigest")
RUN_GUARDS = ("frontier", "counters", "counters_any_intent", "cancel_request", "convergence")


@dataclass(frozen=True)
class Dialect:
    mark: str  # parameter placeholder
    json_mark: str  # placeholder of a JSON value bound as canonical text
    null_safe_int: str  # null-safe equality of an integer column with a parameter
    bools_as_int: bool


SQLITE = Dialect("?", "?", "IS ?", bools_as_int=True)
POSTGRES = Dialect("%s", "%s::jsonb", "IS NOT DISTINCT FROM %s::integer", bools_as_int=False)


def _set(d: Dialect, assignments: dict[str, Any]) -> str:
    return ", ".join(f"{column} = {d.mark}" for column in assignments)


def run(d: Dialect, guard: str, old: Record, new: Record) -> tuple[str, list[Any]]:
    """Run compare-and-set with one of the guards of storage.md §5."""
    m = d.mark
    where = f"id = {m} AND status = 'running' AND version = {m} AND event_sequence = {m}"
    params: list[Any] = [old["id"], old["version"], old["eventSequence"]]
    if guard in ("frontier", "counters", "cancel_request"):
        where += " AND cancel_requested_at_ms IS NULL"
    elif guard == "convergence":
        where += (" AND execution_owner = 'runtime' AND trigger_type = 'plugin_package_workflow'"
                  f" AND cancel_requested_at_ms = {m} AND cancel_reason = {m}")
        params += [old["cancelRequestedAtMs"], old["cancelReason"]]
    elif guard != "counters_any_intent":
        raise ValueError(f"unknown Run guard {guard}")
    sets = {"version": new["version"], "event_sequence": new["eventSequence"]}
    if guard in ("frontier", "convergence"):
        sets |= {"status": new["status"], "finished_at_ms": new.get("finishedAtMs"),
                 "error_code": new.get("errorCode"), "error_summary": new.get("errorSummary")}
    elif guard == "cancel_request":
        sets |= {"cancel_requested_at_ms": new["cancelRequestedAtMs"], "cancel_reason": new["cancelReason"]}
    return f"SET {_set(d, sets)} WHERE {where}", [*sets.values(), *params]


def step_run(d: Dialect, mutation: Record) -> tuple[str, list[Any]]:
    """StepRun transition guarded by id, run, version, digest and previous status; the JSON mirror follows."""
    new = mutation["stepRun"]
    layout = C.STEP_RUNS
    row = dict(zip(layout.stored_keys, layout.to_row(new, d.bools_as_int), strict=True))
    sets = {layout.column_of[k]: row[k] for k in STEP_RUN_MUTABLE}
    m = d.mark
    sql = (f"SET {_set(d, sets)}, step_run_json = {d.json_mark} WHERE id = {m} AND run_id = {m} AND version = {m} "
           f"AND step_run_digest = {m} AND status = {m}")
    return sql, [*sets.values(), canonical_text(new), new["id"], new["runId"], mutation["expectedStepRunVersion"],
                 mutation["expectedStepRunDigest"], mutation["previousStatus"]]


def attempt(d: Dialect, old: Record, new: Record) -> tuple[str, list[Any]]:
    """Worker and recovery paths: guard on status, callbackSequence and lease generation (null-safe)."""
    layout = C.ATTEMPTS
    row = dict(zip(layout.keys, layout.to_row(new, d.bools_as_int), strict=True))
    sets = {layout.column_of[k]: row[k] for k in layout.keys[4:]}  # all but id, runId, stepRunId, attempt
    m = d.mark
    sql = (f"SET {_set(d, sets)} WHERE id = {m} AND run_id = {m} AND status = {m} AND callback_sequence = {m} "
           f"AND lease_generation {d.null_safe_int}")
    return sql, [*sets.values(), old["id"], old["runId"], old["status"], old["callbackSequence"],
                 old.get("leaseGeneration")]


def attempt_convergence(d: Dialect, old: Record, new: Record) -> tuple[str, list[Any]]:
    """Convergence settles a claimed attempt; callbackSequence and lease keys are untouched."""
    sets = {"status": new["status"], "finished_at_ms": new["finishedAtMs"], "error_code": new["errorCode"],
            "error_summary": new["errorSummary"]}
    m = d.mark
    return (f"SET {_set(d, sets)} WHERE id = {m} AND run_id = {m} AND status = 'claimed' AND callback_sequence = {m}",
            [*sets.values(), old["id"], old["runId"], old["callbackSequence"]])


def lease(d: Dialect, old: Record, new: Record) -> tuple[str, list[Any]]:
    """Lease guarded by status, version and generation."""
    layout = C.LEASES
    row = dict(zip(layout.keys, layout.to_row(new, d.bools_as_int), strict=True))
    sets = {layout.column_of[k]: row[k] for k in layout.keys[2:]}  # all but attemptId, runId
    m = d.mark
    return (f"SET {_set(d, sets)} WHERE attempt_id = {m} AND status = {m} AND version = {m} AND lease_generation = {m}",
            [*sets.values(), old["attemptId"], old["status"], old["version"], old["leaseGeneration"]])
