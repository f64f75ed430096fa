"""Bounds, candidates and codes: INV-27…INV-31 (state-machines.md §9), and `consistent_binding`, the
binding that agrees with a plan step (INV-29 admits every candidate with it)."""

from __future__ import annotations

from collections import Counter

from . import tables as T
from .errors import QlwfError
from .frontier import resolve_frontier
from .inv_view import RunView, SystemView, invariant, per_run
from .records import Record
from .values import INT31_MAX


@invariant("INV-27", "Counter bounds", "D-12; records.md §2.3")
def inv27(view: SystemView) -> list[str]:
    s = view.state
    out = [f"Run {r['id']} counters overflow" for r in s.runs.values()
           if max(r["version"], r["eventSequence"]) > INT31_MAX]
    out += [f"StepRun {x['id']} version/attemptCount out of bounds" for x in s.step_runs.values()
            if x["version"] > INT31_MAX or not 0 <= x["attemptCount"] <= 1]
    out += [f"lease {k} counters overflow" for k, x in s.leases.items()
            if x["version"] > INT31_MAX or x["leaseGeneration"] > INT31_MAX]
    out += [f"attempt {a['id']} number > 8192" for a in s.attempts.values() if a["attempt"] > T.MAX_RUN_ATTEMPTS]
    return out


@invariant("INV-28", "Frontier candidate exactness", "ADR-0226 §1, §4 (bounded candidates, no empty writes)")
def inv28(view: SystemView) -> list[str]:
    # §9 INV-28 is an "iff" about what frontier_candidates returns: every Run, including terminal Runs
    # and Runs with intent (which must never be listed), is checked against the query's own rows. The
    # check used to skip those Runs and test the candidacy predicate instead of the query.
    from .system import frontier_candidate_rows  # the check reads the query itself

    listed = {row["runId"] for _, row in frontier_candidate_rows(view.state)}
    out = []
    for rv in view.runs:
        r = rv.run
        writes = False
        if r["status"] == "running" and not rv.intent and rv.plan is not None:
            now = max([rv.state.clock, *(s["updatedAtMs"] for s in rv.steps)])
            try:
                res = resolve_frontier({"plan": rv.plan, "run": r, "stepRuns": rv.steps, "observedAtMs": now})
            except QlwfError as e:
                out.append(f"Run {r['id']}: frontier resolution fails: {e.message}")
                continue
            writes = bool(res["stepMutations"]) or res["terminalTransition"] is not None
        candidate = r["id"] in listed
        if candidate != writes:
            out.append(f"Run {r['id']}: candidate={candidate} but running without intent and advance would "
                       f"write={writes}")
    return out


@invariant("INV-29", "Task candidate exactness", "ADR-0226 §4 (ready projection is not a claim)")
def inv29(view: SystemView) -> list[str]:
    from .system import apply, task_candidate_rows  # the check drives the command itself

    s = view.state
    epochs = {(r["runId"], r["stepRunId"], r["stepRunVersion"]) for r in s.receipts.values()}
    listed = {row["stepRunId"] for _, row in task_candidate_rows(s)}
    out = []
    for x in s.step_runs.values():
        r = s.runs[x["runId"]]
        want = (r["status"] == "running" and "cancelRequestedAtMs" not in r and x["status"] == "ready"
                and x["attemptCount"] < T.MAX_STEP_RUN_ATTEMPTS and (x["runId"], x["id"], x["version"]) not in epochs)
        if want != (x["id"] in listed):
            out.append(f"StepRun {x['id']}: candidate listing {x['id'] in listed} but predicate {want}")
        if want:
            adm = s.admission_of_run(x["runId"])[0]
            step = next(p for p in adm["plan"]["steps"] if p["stepRunId"] == x["id"])
            binding = consistent_binding(adm["plan"], step)
            now = max(s.clock, *(e["createdAtMs"] for e in s.events_of(x["runId"])))
            try:
                res = apply(s.with_clock(now), {"name": "admit_task_attempt", "args": {
                    "runId": x["runId"], "stepRunId": x["id"], "binding": binding}})
            except Exception as e:
                out.append(f"admitting candidate StepRun {x['id']} crashes: {type(e).__name__}: {e}")
                continue
            exhausted = res.error is not None and res.error.reason == "attempt_numbers_exhausted"
            if not exhausted and (res.error is not None or res.result is None or res.result["status"] != "created"):
                out.append(f"candidate StepRun {x['id']} is not admissible: {res.error}")
    return out


def consistent_binding(plan: Record, step: Record, executor_type: str = "remote_worker") -> Record:
    """A binding that agrees with the plan step (records.md §6.10); digests derive from the step."""
    digest = step["taskDefinitionDigest"]
    return {"resourceTaskId": step["taskId"], "taskReconciliationReceiptDigest": digest,
            "taskId": f"pkg:{plan['target']['packageName']}:{step['taskId']}", "taskRevision": f"qltd:v1:1:{digest}",
            "taskDefinitionDigest": digest, "executorType": executor_type, "executionDigest": digest}


def _expected_step_codes(rv: RunView, s: Record) -> tuple[str | None, str | None] | None:
    """The §8 row for the path that terminalized StepRun s, or None when the path is unknown."""
    mid = s["lastMutationId"]
    if mid.startswith("workflow-frontier:"):
        return T.FRONTIER_SKIP_RESULT_CODE, None
    if mid.startswith("wcm:"):
        timeout = bool(rv.run.get("cancelReason") == "timeout")
        ledger = rv.ledger_of_step(s["id"])
        prev = ledger[-2]["stepRun"]["status"] if len(ledger) > 1 else None
        d = T.CANCEL_STEP_TABLE.get((prev, timeout)) if prev is not None else None
        return (d.result_code, d.error_summary) if d and d.action == "mutate" else None
    if mid.startswith("wrf:"):
        c = T.RECOVERY_PATH_CODES["execution_not_running"]
        return c.step_result_code, c.step_error_summary
    if mid.startswith("wxm:"):
        owner = [a for a in rv.attempts_of_step(s["id"]) if a["status"] == s["status"]]
        if not owner:
            return None
        command = "complete_attempt" if "startedAtMs" in owner[-1] else "fail_start"
        wc = T.WORKER_PATH_CODES.get((command, s["status"]))
        return (wc.step_result_code, wc.step_error_summary) if wc else None
    return None


def _expected_attempt_codes(rv: RunView, a: Record) -> tuple[str | None, str | None] | None:
    e = rv.terminal_attempt_event(a["id"])
    if e is None:
        return None
    if e["id"].startswith("wca:"):
        t = T.CANCEL_REASON_TARGET[rv.run["cancelReason"]]
        return t.error_code, t.error_summary
    if e["id"].startswith("wra:"):
        c = T.RECOVERY_PATH_CODES[e["payload"]["reason"]]
        return c.attempt_error_code, c.attempt_error_summary
    command = "complete_attempt" if "startedAtMs" in a else "fail_start"
    wc = T.WORKER_PATH_CODES.get((command, a["status"]))
    return (wc.attempt_error_code, wc.attempt_error_summary) if wc else None


@invariant("INV-30", "Codes by path", "D-11; ADR-0226 §3; ADR-0228 §3")
@per_run
def inv30(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        if s["status"] in T.TERMINAL_STEP:
            want = (None, None) if s["status"] == "succeeded" else _expected_step_codes(rv, s)
            if want != (s["resultCode"], s["errorSummary"]):
                out.append(f"StepRun {s['id']} {s['status']} carries {s['resultCode']!r}/{s['errorSummary']!r}, "
                           f"path expects {want}")
    for a in rv.attempts:
        if a["status"] in T.TERMINAL_ATTEMPT:
            want = _expected_attempt_codes(rv, a)
            if want != (a.get("errorCode"), a.get("errorSummary")):
                out.append(f"attempt {a['id']} {a['status']} carries {a.get('errorCode')!r}, path expects {want}")
    return out


@invariant("INV-31", "Task timeout requests at most once per attempt", "S-5; D-3")
@per_run
def inv31(rv: RunView) -> list[str]:
    out = []
    requests = Counter(e.get("attemptId") for e in rv.events if e["type"] == "workflow.task_timeout_requested")
    for aid, n in requests.items():
        a = rv.state.attempts.get(aid or "")
        e = next(e for e in rv.events if e["type"] == "workflow.task_timeout_requested" and e.get("attemptId") == aid)
        if n > 1:
            out.append(f"attempt {aid} has {n} timeout requests")
        if a is None or a.get("deadlineAtMs") is None or a["deadlineAtMs"] > e["createdAtMs"]:
            out.append(f"timeout request for {aid} before its deadline")
        if rv.cancel_event is not None and rv.cancel_event["sequence"] < e["sequence"]:
            out.append(f"timeout request for {aid} written under intent")
    return out
