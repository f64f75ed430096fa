"""Run status, cancel intent and dependencies: INV-10…INV-18 (state-machines.md §9)."""

from __future__ import annotations

from . import tables as T
from .inv_view import TERMINAL_EVENT_TYPES, RunView, invariant, per_run


# ------------------------------------------------------------------------------------------------
# Run status
@invariant("INV-10", "Run shape", "ADR-0226 §4; ADR-0228 §4")
@per_run
def inv10(rv: RunView) -> list[str]:
    r = rv.run
    if r["status"] not in T.RUN_STATUSES:
        return [f"status {r['status']} is not a workflow Run status"]
    if r["status"] == "running":
        return ["running Run carries finishedAtMs/errorCode/errorSummary"] if any(
            k in r for k in ("finishedAtMs", "errorCode", "errorSummary")) else []
    if not rv.events or r.get("finishedAtMs") != rv.events[-1]["createdAtMs"]:
        return ["terminal finishedAtMs differs from the last event time"]
    return []


@invariant("INV-11", "Terminal closure", "ADR-0228 §4; ADR-0226 §3")
@per_run
def inv11(rv: RunView) -> list[str]:
    if rv.run["status"] == "running":
        return []
    out = [f"StepRun {s['id']} is {s['status']} in a terminal Run" for s in rv.steps
           if s["status"] not in T.TERMINAL_STEP]
    out += [f"attempt {a['id']} is active in a terminal Run" for a in rv.attempts if a["status"] in T.ACTIVE_ATTEMPT]
    out += [f"lease of {a['id']} is leased in a terminal Run" for a in rv.attempts
            if rv.state.leases.get(a["id"], {}).get("status") == "leased"]
    return out


@invariant("INV-12", "Parent terminal event is the last event", "ADR-0228 §4 (parent terminalized last)")
@per_run
def inv12(rv: RunView) -> list[str]:
    terminal = [e for e in rv.events if e["type"] in TERMINAL_EVENT_TYPES]
    if rv.run["status"] == "running":
        return [f"running Run has terminal event {terminal[0]['id']}"] if terminal else []
    if len(terminal) != 1 or terminal[0] is not rv.events[-1] or terminal[0]["type"] != f"workflow.{rv.run['status']}":
        return ["terminal Run must have exactly one terminal event, last, of its own status"]
    return []


@invariant("INV-13", "Terminal attribution", "ADR-0226 §3; ADR-0228 §3 (reason mapping); D-5")
@per_run
def inv13(rv: RunView) -> list[str]:
    r = rv.run
    if r["status"] == "running" or not rv.events:
        return []
    last = rv.events[-1]
    if not rv.intent:
        want = T.aggregate([s["status"] for s in rv.steps])
        code = T.FRONTIER_TERMINAL_ERROR_CODE.get(r["status"])
        if r["status"] != want or r.get("errorCode") != code or "errorSummary" in r \
                or last["actorType"] != "reconciler" or "actorId" in last:
            return [f"frontier terminal {r['status']} is not AGG={want} with code {code}"]
        return []
    target = T.CANCEL_REASON_TARGET[r["cancelReason"]]
    if (r["status"], r.get("errorCode"), r.get("errorSummary")) != (target.status, target.error_code,
                                                                     target.error_summary) \
            or (last["actorType"], last.get("actorId")) != ("reconciler", "runtime:cancellation"):
        return [f"cancelled terminal {r['status']} does not follow reason {r['cancelReason']}"]
    return []


# ------------------------------------------------------------------------------------------------
# Cancel intent
@invariant("INV-14", "Intent shape and its single counted event", "ADR-0228 §1; D-4")
@per_run
def inv14(rv: RunView) -> list[str]:
    r = rv.run
    if ("cancelRequestedAtMs" in r) != ("cancelReason" in r):
        return ["cancelRequestedAtMs and cancelReason are not paired"]
    events = [e for e in rv.events if e["type"] == "workflow.cancel_requested"]
    if not rv.intent:
        return ["cancel_requested event without intent"] if events else []
    if len(events) != 1:
        return [f"{len(events)} cancel_requested events"]
    e = events[0]
    if (e["payload"].get("cancel_reason"), e["payload"].get("cancel_requested_at_ms"), e["createdAtMs"]) != (
            r["cancelReason"], r["cancelRequestedAtMs"], r["cancelRequestedAtMs"]):
        return ["cancel_requested event disagrees with the Run's intent"]
    return []


NEW_WORK_TYPES = frozenset({"workflow.task_attempt_admitted", "workflow.task_dispatch_leased",
                            "workflow.task_attempt.starting", "workflow.task_attempt.running"})


@invariant("INV-15", "No new work after intent", "ADR-0228 §1; D-3")
@per_run
def inv15(rv: RunView) -> list[str]:
    if rv.cancel_event is None:
        return []
    after = [e for e in rv.events if e["sequence"] > rv.cancel_event["sequence"]]
    return [f"event {e['id']} ({e['type']}) after intent" for e in after
            if e["type"] in NEW_WORK_TYPES or (e["type"] == "step.ready" and e["payload"].get("from") == "pending")]


# ------------------------------------------------------------------------------------------------
# Dependencies
@invariant("INV-16", "Readiness implies dependencies", "ADR-0226 §3 (ready rule)")
@per_run
def inv16(rv: RunView) -> list[str]:
    if rv.plan is None:
        return []
    out = []
    needs = {p["stepKey"]: p["needs"] for p in rv.plan["steps"]}
    for s in rv.steps:
        if s["readyAtMs"] is not None:
            bad = [d for d in needs.get(s["stepKey"], []) if rv.step_by_key[d]["status"] != "succeeded"]
            if bad:
                out.append(f"StepRun {s['id']} was readied while needs {bad} are not succeeded")
        elif rv.attempts_of_step(s["id"]):
            out.append(f"StepRun {s['id']} has an attempt but no readyAtMs")
    return out


@invariant("INV-17", "Skip justification", "ADR-0226 §3 (transitive skip)")
@per_run
def inv17(rv: RunView) -> list[str]:
    if rv.plan is None:
        return []
    needs = {p["stepKey"]: p["needs"] for p in rv.plan["steps"]}
    out = []
    for s in rv.steps:
        if s["status"] != "skipped":
            continue
        if (s["resultCode"] != T.FRONTIER_SKIP_RESULT_CODE or s["errorSummary"] is not None
                or s["readyAtMs"] is not None):
            out.append(f"StepRun {s['id']}: skipped shape invalid")
        if not any(rv.step_by_key[d]["status"] in T.BLOCKING_STEP for d in needs[s["stepKey"]]):
            out.append(f"StepRun {s['id']} skipped without a blocking direct need")
    return out


@invariant("INV-18", "Pending shape", "ADR-0226 §3")
@per_run
def inv18(rv: RunView) -> list[str]:
    terminal = any(e["type"] in TERMINAL_EVENT_TYPES for e in rv.events)
    return [f"StepRun {s['id']}: pending with attempts, readyAtMs, version > 1 or a terminal Run" for s in rv.steps
            if s["status"] == "pending" and (rv.attempts_of_step(s["id"]) or s["readyAtMs"] is not None
                                             or s["version"] != 1 or terminal)]
