"""Records: INV-6…INV-9 (state-machines.md §9): every stored record normalizes to itself, the step set
follows the plan, the StepRun history is its mutation ledger and its step events, the v1 domain."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import speedups
from . import tables as T
from .errors import QlwfError
from .inv_view import RunView, SystemView, invariant, per_run
from .records import Record, normalize_admission_receipt, normalize_plan, normalize_step_run, normalize_task_receipt
from .state import State
from .steprun import MUTATION_KEYS, mutation_digest


def _normalized(fn: Callable[[Any], Record], value: Any) -> tuple[Record | None, str | None, bool]:
    """fn(value) (or None and the message of its typed refusal), and whether it equals value."""

    def compute() -> tuple[Record | None, str | None, bool]:
        try:
            normalized = fn(value)
        except QlwfError as e:
            return None, e.message, False
        return normalized, None, bool(normalized == value)

    return speedups.reused(fn.__name__, (value,), compute)


def _normalizes(fn: Callable[[Any], Record], value: Any) -> bool:
    return _normalized(fn, value)[2]


@invariant("INV-6", "Record validity", "ADR-0226 §3 (fail-closed records); ADR-0228 §2")
def inv6(view: SystemView) -> list[str]:
    s = view.state
    out = []
    for pd, adm in s.admissions.items():
        if not _normalizes(normalize_plan, adm["plan"]) or adm["plan"]["planDigest"] != pd:
            out.append(f"plan {pd} does not normalize to itself")
        if not _normalizes(normalize_admission_receipt, adm["receipt"]):
            out.append(f"admission receipt of {pd} does not normalize")
    out += [f"StepRun {i} does not normalize" for i, r in s.step_runs.items() if not _normalizes(normalize_step_run, r)]
    out += [f"ledger post-image {i} does not normalize" for i, m in s.mutations.items()
            if not _normalizes(normalize_step_run, m["stepRun"]) or m["stepRunDigest"] != m["stepRun"]["stepRunDigest"]]
    out += [f"task receipt {i} does not normalize" for i, r in s.receipts.items()
            if not _normalizes(normalize_task_receipt, r)]
    return out


@invariant("INV-7", "Step set bijection and immutability", "ADR-0226 §3")
@per_run
def inv7(rv: RunView) -> list[str]:
    if rv.plan is None:
        return ["no plan"]
    plan = rv.plan
    if sorted(s["id"] for s in rv.steps) != sorted(p["stepRunId"] for p in plan["steps"]):
        return ["StepRuns are not in bijection with the plan steps"]
    out = []
    by_id = {s["id"]: s for s in rv.steps}
    for p in plan["steps"]:
        s = by_id[p["stepRunId"]]
        if (s["runId"], s["stepKey"], s["definitionRef"], s["definitionDigest"], s["kind"], s["required"],
                s["parentStepRunId"], s["inputRef"], s["createdAtMs"]) != (
                plan["runId"], p["stepKey"], p["taskDefinitionRef"], p["taskDefinitionDigest"], "task", True,
                None, None, plan["plannedAtMs"]):
            out.append(f"StepRun {s['id']} immutable fields differ from the plan")
    return out


def rebuild_mutation(state: State, entry: Record, previous: Record | None, event: Record | None) -> Record | None:
    """records.md §6.6: the full mutation recovered from its ledger entry (None if the event is missing)."""
    if event is None:
        return None
    prev = previous["stepRun"] if previous else None
    m = {
        "schema": T.SCHEMA_STEP_RUN_MUTATION, "mutationId": entry["mutationId"], "runId": entry["runId"],
        "expectedRunVersion": entry["runVersion"] - 1, "expectedRunEventSequence": entry["eventSequence"] - 1,
        "expectedStepRunVersion": prev["version"] if prev else None,
        "expectedStepRunDigest": prev["stepRunDigest"] if prev else None,
        "previousStatus": prev["status"] if prev else None, "stepRun": entry["stepRun"], "event": event,
    }
    assert tuple(m) == MUTATION_KEYS[:-1]
    return m


def _digest_recomputes(state: State, entry: Record, previous: Record | None, event: Record) -> bool:
    m = rebuild_mutation(state, entry, previous, event)
    return m is not None and mutation_digest(m) == entry["mutationDigest"]


@invariant("INV-8", "StepRun history = mutation ledger = step events", "ADR-0226 §3–§4")
@per_run
def inv8(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        ledger = rv.ledger_of_step(s["id"])
        versions = [m["stepRun"]["version"] for m in ledger]
        # length first: a drifted version near 2^31 must not build a 2^31-entry list
        if len(versions) != s["version"] or versions != list(range(1, len(versions) + 1)):
            out.append(f"StepRun {s['id']}: ledger versions {versions} are not 1..{s['version']}")
            continue
        if ledger[-1]["stepRun"] != s or s["lastMutationId"] != ledger[-1]["mutationId"]:
            out.append(f"StepRun {s['id']}: last ledger post-image differs from the StepRun")
        previous = None
        for entry in ledger:
            e = rv.event_by_id.get(entry["eventId"])
            want = "step.created" if entry["stepRun"]["version"] == 1 else f"step.{entry['stepRun']['status']}"
            if (e is None or e["sequence"] != entry["eventSequence"] or e["type"] != want
                    or e.get("stepRunId") != s["id"]):
                out.append(f"StepRun {s['id']}: ledger entry {entry['mutationId']} has no matching {want} event")
            else:
                if not speedups.reused("mutation", (entry, previous, e),
                                       functools.partial(_digest_recomputes, rv.state, entry, previous, e)):
                    out.append(f"StepRun {s['id']}: mutationDigest of {entry['mutationId']} does not recompute")
            previous = entry
        n_events = len(rv.step_events(s["id"]))
        if n_events != s["version"]:
            out.append(f"StepRun {s['id']}: {n_events} step events for version {s['version']}")
    return out


@invariant("INV-9", "v1 status domain", "D-1; D-12")
def inv9(view: SystemView) -> list[str]:
    out = []
    for s in view.state.step_runs.values():
        if s["status"] in ("waiting_approval", "lost"):
            out.append(f"StepRun {s['id']} is {s['status']} after a commit")
        if s["attemptCount"] not in (0, 1) or (s["attemptCount"] == 1) != (s["startedAtMs"] is not None):
            out.append(f"StepRun {s['id']}: attemptCount {s['attemptCount']} vs startedAtMs {s['startedAtMs']}")
        if s["outputRef"] is not None or s["approvalRequestId"] is not None:
            out.append(f"StepRun {s['id']} carries outputRef or approvalRequestId")
    return out
