"""Boundaries a conformance run must meet on every backend, and how a lockstep step shows one.

A boundary is met by a command that agreed between the model and the backend while the state sat
exactly on a limit of the spec (records.md §2 constants, commands.md §2.5 counter ceiling,
task-attempts.md §4.1 lease expiry):

* the attempt budget (MAX_STEP_RUN_ATTEMPTS = 64): admission and `→ running` with attemptCount 63
  (the last allowed) and 64 (refused);
* the Run's attempt numbers (MAX_RUN_ATTEMPTS = 8192): admission with 8191 numbers used (the last
  is given) and with 8192 used (refused);
* the step limit (MAX_WORKFLOW_STEPS = 128): a plan of 128 steps admitted, one of 129 refused;
* the INT31 counters (INT31_MAX = 2147483647: Run version/eventSequence, StepRun version, lease
  version and generation, callbackSequence, plan generation): a command that writes the counter
  up to the ceiling, and one refused because the counter is already there;
* page limits: every paged query and the convergence page with limit 1, its maximum, maximum + 1;
* lease expiry and the task deadline: a command at now = expiresAtMs (deadlineAtMs) − 1, = , + 1;
* page situations (cancellation.md §8): a page holding a drifted workflow next to a healthy one, a
  page resumed from a cursor while a blocked cancelling Run sorts before it, a resumed page of size 1.

`BOUNDARIES` is the registry (name → what meets it); `met(before, step, outcome)` names the
boundaries one command step meets, judged on the model state before the step.
"""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.state import State
from qlwf.model.values import INT31_MAX

Record = dict[str, Any]

PAGE_COMMANDS: dict[str, int] = {q: T.QUERY_PAGES[q][0] for q in T.QUERY_PAGES} | {
    "converge_cancellation_page": T.MAX_CANCELLATION_PAGE}
FENCED = frozenset({"renew_lease", "release_lease", "start_attempt", "record_running", "fail_start",
                    "complete_attempt"})
# counter name → (what it counts, where it is read)
COUNTERS: dict[str, str] = {
    "run_version": "Run version and eventSequence",
    "step_version": "StepRun version",
    "lease_version": "lease version (mirrored as attempt.leaseVersion)",
    "lease_generation": "lease generation",
    "callback_sequence": "attempt callbackSequence",
    "plan_generation": "plan target generation",
}
OFFSETS = {-1: "before", 0: "at", 1: "after"}


def _registry() -> dict[str, str]:
    rows: dict[str, str] = {
        "attempt_budget:admit_last": "admit_task_attempt on a StepRun with attemptCount 63 is created",
        "attempt_budget:admit_refused": "admit_task_attempt on a StepRun with attemptCount 64 is refused",
        "attempt_budget:running_last": "record_running with attemptCount 63 raises it to 64",
        "attempt_budget:running_refused": "record_running with attemptCount 64 is refused",
        "attempt_number:last": f"admit_task_attempt on a Run that used {T.MAX_RUN_ATTEMPTS - 1} attempt numbers "
                               f"is created with number {T.MAX_RUN_ATTEMPTS}",
        "attempt_number:refused": f"admit_task_attempt on a Run that used all {T.MAX_RUN_ATTEMPTS} attempt numbers "
                                  "is refused",
        "step_limit:max": f"a plan of {T.MAX_WORKFLOW_STEPS} steps is admitted",
        "step_limit:over": f"a plan of {T.MAX_WORKFLOW_STEPS + 1} steps is refused",
    }
    for c, what in COUNTERS.items():
        rows[f"counter:{c}:reached"] = f"a command writes {what} = {INT31_MAX}"
        rows[f"counter:{c}:refused"] = f"a command meets {what} at {INT31_MAX} (or beyond) and is refused"
    for q, limit in PAGE_COMMANDS.items():
        rows[f"page_limit:{q}:1"] = f"{q} with limit 1"
        rows[f"page_limit:{q}:max"] = f"{q} with limit {limit}"
        rows[f"page_limit:{q}:over"] = f"{q} with limit {limit + 1} (Invalid)"
    for who in ("worker", "recovery"):
        for off, label in OFFSETS.items():
            rows[f"lease_expiry:{who}:{label}"] = f"a {who} command at lease expiresAtMs {off:+d} ms"
    for off, label in OFFSETS.items():
        rows[f"task_deadline:{label}"] = f"a worker command at the task deadlineAtMs {off:+d} ms"
    rows["page_situation:drift_with_healthy"] = ("a convergence page processes a drifted (failed) workflow and a "
                                                 "healthy one (D-6: one transaction per workflow)")
    rows["page_situation:resumed_past_blocked"] = ("a convergence page resumes from a cursor while a blocked "
                                                   "cancelling Run sorts at or before it (no head-of-line starvation)")
    rows["page_situation:size_1_resumed"] = "a convergence page of limit 1 resumes from a cursor and processes a Run"
    return rows


BOUNDARIES: dict[str, str] = _registry()


def _attempt(before: State, args: Any) -> Record | None:
    attempt_id = args.get("attemptId") if isinstance(args, dict) else None
    return before.attempts.get(attempt_id) if isinstance(attempt_id, str) else None


def _error(outcome: Record) -> Record | None:
    error = outcome.get("error")
    return error if isinstance(error, dict) else None


def _plan_boundaries(args: Any, outcome: Record) -> set[str]:
    plan = args.get("plan") if isinstance(args, dict) else None
    if not isinstance(plan, dict):
        return set()
    found = set()
    steps, target = plan.get("steps"), plan.get("target")
    created = outcome.get("ok", {}).get("status") == "created"
    if isinstance(steps, list):
        if len(steps) == T.MAX_WORKFLOW_STEPS and created:
            found.add("step_limit:max")
        if len(steps) == T.MAX_WORKFLOW_STEPS + 1 and _error(outcome):
            found.add("step_limit:over")
    generation = target.get("generation") if isinstance(target, dict) else None
    if type(generation) is int:
        if generation == INT31_MAX and created:
            found.add("counter:plan_generation:reached")
        if generation > INT31_MAX and _error(outcome):
            found.add("counter:plan_generation:refused")
    return found


def _page_boundaries(name: str, args: Any) -> set[str]:
    limit = args.get("limit") if isinstance(args, dict) else None
    if name not in PAGE_COMMANDS or type(limit) is not int:
        return set()
    label = {1: "1", PAGE_COMMANDS[name]: "max", PAGE_COMMANDS[name] + 1: "over"}.get(limit)
    return {f"page_limit:{name}:{label}"} if label else set()


def _page_situations(before: State, name: str, args: Any, outcome: Record) -> set[str]:
    page = outcome.get("ok")
    if name != "converge_cancellation_page" or not isinstance(page, dict) or not isinstance(args, dict):
        return set()
    found = set()
    statuses = [o["status"] for o in page["outcomes"]]
    if "failed" in statuses and any(s != "failed" for s in statuses):
        found.add("page_situation:drift_with_healthy")
    after = args.get("after")
    if isinstance(after, dict) and page["scanned"] > 0:
        if args["limit"] == 1:
            found.add("page_situation:size_1_resumed")
        cursor = (after["cancelRequestedAtMs"], after["runId"])
        blocking = {a["runId"] for a in before.attempts.values() if a["status"] in T.ACTIVE_ATTEMPT}
        if any(r["status"] == "running" and "cancelRequestedAtMs" in r and r["id"] in blocking
               and (r["cancelRequestedAtMs"], r["id"]) <= cursor for r in before.runs.values()):
            found.add("page_situation:resumed_past_blocked")
    return found


def _run_of(before: State, name: str, args: Any) -> Record | None:
    if not isinstance(args, dict):
        return None
    attempt = _attempt(before, args)
    run_id = attempt["runId"] if attempt is not None else args.get("runId")
    return before.runs.get(run_id) if isinstance(run_id, str) else None


def _counters(before: State, name: str, args: Any) -> dict[str, list[int]]:
    """The INT31 counters the command reads: its Run's, its StepRun's(s'), its attempt's and lease's."""
    values: dict[str, list[int]] = {c: [] for c in COUNTERS}
    run = _run_of(before, name, args)
    if run is not None:
        values["run_version"] += [run["version"], run["eventSequence"]]
        attempt = _attempt(before, args)
        step_ids = ([attempt["stepRunId"]] if attempt is not None
                    else [args["stepRunId"]] if isinstance(args.get("stepRunId"), str)
                    else [s["id"] for s in before.steps_of_run(run["id"])])
        values["step_version"] += [before.step_runs[s]["version"] for s in step_ids if s in before.step_runs]
        if attempt is not None:
            values["callback_sequence"].append(attempt["callbackSequence"])
            lease = before.leases.get(attempt["id"])
            if lease is not None:
                values["lease_version"].append(lease["version"])
                values["lease_generation"].append(lease["leaseGeneration"])
    return values


def _counter_boundaries(before: State, name: str, args: Any, outcome: Record, after: State | None) -> set[str]:
    found = set()
    read = _counters(before, name, args)
    if _error(outcome):
        found |= {f"counter:{c}:refused" for c, vs in read.items() if any(v >= INT31_MAX for v in vs)}
    elif after is not None:
        now = _counters(after, name, args)
        found |= {f"counter:{c}:reached" for c, vs in now.items()
                  if INT31_MAX in vs and INT31_MAX not in read[c]}
    return found


def _attempt_budget(before: State, name: str, args: Any, outcome: Record) -> set[str]:
    if name == "admit_task_attempt" and isinstance(args, dict):
        step_id = args.get("stepRunId")
        step = before.step_runs.get(step_id) if isinstance(step_id, str) else None
        kind = "admit"
    elif name == "record_running" and (a := _attempt(before, args)) is not None:
        step = before.step_runs.get(a["stepRunId"])
        kind = "running"
    else:
        return set()
    if step is None:
        return set()
    error = _error(outcome)
    if step["attemptCount"] == T.MAX_STEP_RUN_ATTEMPTS - 1 and error is None:
        ok = outcome["ok"].get("status") in ("created", "running")
        return {f"attempt_budget:{kind}_last"} if ok else set()
    if step["attemptCount"] == T.MAX_STEP_RUN_ATTEMPTS and error is not None \
            and error.get("reason") == "attempts_exhausted":
        return {f"attempt_budget:{kind}_refused"}
    return set()


def _attempt_numbers(before: State, name: str, args: Any, outcome: Record) -> set[str]:
    if name != "admit_task_attempt" or not isinstance(args, dict) or args.get("runId") not in before.runs:
        return set()
    used = max((a["attempt"] for a in before.attempts.values() if a["runId"] == args["runId"]), default=0)
    error = _error(outcome)
    if used == T.MAX_RUN_ATTEMPTS - 1 and error is None and outcome["ok"].get("status") == "created":
        return {"attempt_number:last"}
    if used >= T.MAX_RUN_ATTEMPTS and error is not None and error.get("reason") == "attempt_numbers_exhausted":
        return {"attempt_number:refused"}
    return set()


def _timing(before: State, name: str, args: Any) -> set[str]:
    attempt = _attempt(before, args)
    if attempt is None:
        return set()
    found = set()
    who = "worker" if name in FENCED or name == "claim_lease" else "recovery" if name == "recover_attempt" else None
    lease = before.leases.get(attempt["id"])
    if who and lease is not None and lease["status"] == "leased":
        label = OFFSETS.get(before.clock - lease["expiresAtMs"])
        if label:
            found.add(f"lease_expiry:{who}:{label}")
    if name in FENCED and "deadlineAtMs" in attempt and attempt["status"] in T.ACTIVE_ATTEMPT:
        label = OFFSETS.get(before.clock - attempt["deadlineAtMs"])
        if label:
            found.add(f"task_deadline:{label}")
    return found


def met(before: State, step: Record, outcome: Record, after: State | None = None) -> set[str]:
    """The boundaries of `BOUNDARIES` that one agreed command step meets (`before` = the model state
    the command ran on, its clock = the command's now; `after` = the state it left)."""
    if step.get("op") != "command":
        return set()
    name, args = step["name"], step["args"]
    found = _plan_boundaries(args, outcome) if name == "admit_workflow" else set()
    found |= _page_boundaries(name, args)
    found |= _page_situations(before, name, args, outcome)
    found |= _attempt_budget(before, name, args, outcome)
    found |= _attempt_numbers(before, name, args, outcome)
    found |= _timing(before, name, args)
    found |= _counter_boundaries(before, name, args, outcome, after)
    return found & BOUNDARIES.keys()


def report(seen: set[str] | frozenset[str]) -> Record:
    return {"met": sorted(b for b in BOUNDARIES if b in seen),
            "missing": sorted(b for b in BOUNDARIES if b not in seen)}
