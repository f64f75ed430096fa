"""Counters and log: INV-1…INV-5 (state-machines.md §9)."""

from __future__ import annotations

from collections import Counter

from . import speedups
from .admission import admission_ledger, normalized_plan_bundle
from .errors import QlwfError
from .inv_records import _normalized
from .inv_view import RunView, SystemView, invariant, per_run
from .records import Record, normalize_plan
from .values import is_identifier, is_portable_id


@invariant("INV-1", "Counter equality", "ADR-0226 §4; ADR-0228 §4")
@per_run
def inv1(rv: RunView) -> list[str]:
    r = rv.run
    if r["version"] == r["eventSequence"] == len(rv.events):
        return []
    return [f"version {r['version']}, eventSequence {r['eventSequence']}, {len(rv.events)} events"]


@invariant("INV-2", "Contiguous, unique event log", "ADR-0226 §4; ADR-0228 §4")
def inv2(view: SystemView) -> list[str]:
    out = []
    ids = Counter(e["id"] for rv in view.runs for e in rv.events)
    out += [f"event id {i} used {n} times" for i, n in ids.items() if n > 1]
    for rv in view.runs:
        seqs = [e["sequence"] for e in rv.events]
        if seqs != list(range(1, len(seqs) + 1)):
            out.append(f"Run {rv.run['id']}: sequences {seqs} are not 1..n")
        keys = Counter(e.get("dedupeKey") for e in rv.events)
        out += [f"Run {rv.run['id']}: dedupeKey {k} repeated" for k, n in keys.items() if n > 1]
        out += [f"event {e['id']}: dedupeKey differs from id or wrong runId" for e in rv.events
                if e.get("dedupeKey") != e["id"] or e["runId"] != rv.run["id"]]
    return out


@invariant("INV-3", "Portable identifiers", "ADR-0228 §2 (portable ids); D-9")
def inv3(view: SystemView) -> list[str]:
    s = view.state
    out = [f"Run id {r} not portable" for r in s.runs if not is_portable_id(r)]
    out += [f"event id {e['id']} not portable" for rv in view.runs for e in rv.events if not is_portable_id(e["id"])]
    out += [f"attempt id {a} not portable" for a in s.attempts if not is_portable_id(a)]
    out += [f"StepRun id {i} not an IDENTIFIER" for i in s.step_runs if not is_identifier(i)]
    out += [f"mutation id {i} not an IDENTIFIER" for i in s.mutations if not is_identifier(i)]
    out += [f"worker id {a['workerId']} not an IDENTIFIER" for a in s.attempts.values()
            if "workerId" in a and not is_identifier(a["workerId"])]
    return out


@invariant("INV-4", "Time monotonicity", "ADR-0226 §2 (monotonic observation time); D-8")
def inv4(view: SystemView) -> list[str]:
    out = []
    for rv in view.runs:
        times = [e["createdAtMs"] for e in rv.events]
        if times != sorted(times):
            out.append(f"Run {rv.run['id']}: event times decrease")
        if times and (min(times) < rv.run["createdAtMs"] or times[-1] > view.state.clock):
            out.append(f"Run {rv.run['id']}: event time before the Run or after now")
        for s in rv.steps:
            step_events = rv.step_events(s["id"])
            if step_events and step_events[-1]["createdAtMs"] != s["updatedAtMs"]:
                out.append(f"StepRun {s['id']}: updatedAtMs differs from its latest step event")
    return out


@invariant("INV-5", "Frozen admission evidence", "ADR-0226 §5")
@per_run
def inv5(rv: RunView) -> list[str]:
    if rv.admission is None:
        return ["no unique admission"]
    plan = rv.admission["plan"]
    bundle, problem = speedups.reused("bundle", (plan,), lambda: _bundle(plan))
    if bundle is None:
        return [f"stored plan does not build a bundle: {problem}"]
    n = len(bundle["plan"]["steps"])
    out = []
    if list(rv.events[: n + 1]) != [bundle["admissionEvent"], *(m["event"] for m in bundle["stepMutations"])]:
        out.append("admission events differ from the bundle")
    if rv.admission["receipt"] != bundle["receipt"]:
        out.append("admission receipt differs from the bundle")
    for entry in admission_ledger(bundle):
        ledger = rv.ledger_of_step(entry["stepRunId"])
        if not ledger or ledger[0] != entry:
            out.append(f"first ledger entry of {entry['stepRunId']} differs")
    return out


def _bundle(plan: Record) -> tuple[Record | None, str | None]:
    """create_admission_bundle(plan), or the message of its refusal; the plan's normalization is
    INV-6's (the same record, reused by identity where reuse is on)."""
    normalized, problem, _ = _normalized(normalize_plan, plan)
    if normalized is None:
        return None, problem
    try:
        return normalized_plan_bundle(normalized), None
    except QlwfError as e:
        return None, e.message
