"""Per-command postconditions checked by the stateful machine, independent of the model's code paths.

They restate small, table-shaped parts of the spec directly: error families (commands.md §2.3), the
outcome catalogue and the event counts of every command (commands.md §3, state-machines.md §6), "an
error or a replay writes nothing" (commands.md §1.2, §2.7), no new work under cancel intent (D-3,
cancellation.md §1), recovery under intent (D-2), and the start-failure/completion and renew
mappings (task-attempts.md §4.3, §7).
"""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.records import Record
from qlwf.model.state import State
from qlwf.model.system import Outcome

from .contracts import convergence_expectation, expected_outcome

NO_WRITE = frozenset({"existing", "idempotent", "leased", "not_eligible", "already_released", "already_starting",
                      "already_running", "already_terminal", "settled", "unchanged", "retry", "manual"})
PAGE_KEYS = {"candidates", "truncated", "next"}


def allowed_codes(name: str) -> set[str]:
    family = T.FAMILIES[T.COMMAND_FAMILY[name]]
    codes = {c for c in family if c}
    return codes | ({T.FAMILIES["plan"].invalid or ""} if name == "admit_workflow" else set())


def _events(state: State) -> dict[str, int]:
    return {run_id: len(events) for run_id, events in state.events.items()}


def _delta(before: State, after: State) -> dict[str, int]:
    b, a = _events(before), _events(after)
    return {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b) if a.get(k, 0) != b.get(k, 0)}


def _attempt_run(before: State, args: Record) -> tuple[Record | None, Record | None]:
    a = before.attempts.get(args.get("attemptId", ""))
    return a, before.runs.get(a["runId"]) if a else None


def _timeout_requested(before: State, attempt: Record) -> bool:
    return any(e["type"] == "workflow.task_timeout_requested" and e.get("attemptId") == attempt["id"]
               for e in before.events_of(attempt["runId"]))


def expected_events(name: str, args: Record, before: State, result: Record) -> int | None:
    """Events the command appends to its Run (state-machines.md §6), None when not a single-Run write."""
    status = result.get("status")
    if status in NO_WRITE:
        return 0
    a, _ = _attempt_run(before, args)
    fixed = {"admit_task_attempt": 1, "claim_lease": 1, "release_lease": 1, "start_attempt": 1, "record_running": 2,
             "fail_start": 2, "request_cancel": 1}
    if name in fixed:
        return fixed[name]
    if name == "complete_attempt":
        return 3 if a and a["status"] == "starting" else 2
    if name == "recover_attempt":
        return 3 if a and a["status"] == "running" else 2
    if name == "renew_lease":
        first_request = (status == "stop_requested" and result.get("reason") == "timeout" and a is not None
                         and not _timeout_requested(before, a) and "cancelRequestedAtMs" not in before.runs[a["runId"]])
        return 1 if first_request else 0
    terminal_event = 1 if status == "terminal" else 0
    if name == "advance_frontier":
        step_events: int = result["stepMutationCount"]
        return step_events + terminal_event
    if name == "converge_cancellation":
        written: int = result["settledAttempts"] + result["stepMutationCount"]
        return written + terminal_event
    return None


def completion_target(name: str, run: Record, attempt: Record, now: int, exit_code: int | None) -> str:
    """task-attempts.md §7, first matching rule."""
    if "cancelRequestedAtMs" in run:
        return "timed_out" if run["cancelReason"] == "timeout" else "cancelled"
    if attempt.get("deadlineAtMs") is not None and attempt["deadlineAtMs"] <= now:
        return "timed_out"
    if name == "complete_attempt" and exit_code == 0:
        return "succeeded"
    return "failed"


def _mapping_problems(name: str, args: Record, before: State, result: Record) -> list[str]:
    a, run = _attempt_run(before, args)
    now = before.clock
    out: list[str] = []
    if a is None or run is None:
        return out
    intent = "cancelRequestedAtMs" in run
    status = result.get("status")
    if name in ("fail_start", "complete_attempt") and status in ("start_failed", "completed"):
        want = completion_target(name, run, a, now, args.get("exitCode"))
        if result["attemptStatus"] != want:
            out.append(f"{name} mapped to {result['attemptStatus']}, task-attempts.md §7 requires {want}")
    if name == "renew_lease":
        deadline = a.get("deadlineAtMs")
        answer = ("stop_requested", run["cancelReason"]) if intent else ("stop_requested", "timeout") if (
            deadline is not None and deadline <= now) else ("renewed", None)
        if (status, result.get("reason")) != answer:
            out.append(f"renew answered {(status, result.get('reason'))}, task-attempts.md §4.3 requires {answer}")
    if name == "claim_lease" and intent and a["status"] == "claimed" and run["status"] == "running" \
            and (status, result.get("reason")) != ("not_eligible", "cancellation_requested"):
        out.append(f"claim under intent answered {status} (D-3 requires not_eligible/cancellation_requested)")
    if intent and (name, status) in {("start_attempt", "starting"), ("record_running", "running")}:
        out.append(f"{name} crossed the start barrier under cancel intent (D-3)")
    return out


def _result_problems(name: str, args: Record, before: State, after: State, result: Record) -> list[str]:
    """The result reports what is stored (commands.md §4 result definitions)."""
    status = result.get("status")
    aid = args.get("attemptId", "")  # a string wherever it is read: the command answered, so its arguments were valid
    out: list[str] = []

    def same(label: str, got: Any, want: Any) -> None:
        if got != want:
            out.append(f"{name} result {label} {got!r:.120} differs from the stored {want!r:.120}")

    if name in ("claim_lease", "renew_lease", "release_lease"):
        same("lease", result.get("lease"), after.leases.get(aid))
    if name in ("start_attempt", "record_running", "fail_start", "complete_attempt", "recover_attempt"):
        same("attempt", result.get("attempt"), after.attempts.get(aid))
    if name in ("fail_start", "complete_attempt"):
        same("attemptStatus", result.get("attemptStatus"), after.attempts[aid]["status"])
    if name == "recover_attempt":
        was = before.attempts[aid]["status"]
        want = "requeued" if was == "claimed" else {"not_running": "failed", "running": "retry",
                                                    "unknown": "manual"}[args["evidence"]]
        same("status", status, want)
    if name == "admit_task_attempt":
        attempt = result["attempt"]
        same("attempt", attempt, after.attempts.get(attempt["id"]))
        same("receipt", result["receipt"], after.receipts.get(attempt["id"]))
    if name == "admit_workflow":
        adm = after.admission_of_run(args["plan"]["runId"])
        same("receipt", result["receipt"], adm[0]["receipt"] if adm else None)
    if name == "request_cancel":
        run = after.runs[args["runId"]]
        same("intent", (result["cancelRequestedAtMs"], result["cancelReason"], result["runVersion"]),
             (run["cancelRequestedAtMs"], run["cancelReason"], run["version"]))
    if name == "converge_cancellation" and (decision := convergence_expectation(before, args["runId"])) is not None:
        same("decision", {k: result[k] for k in decision}, decision)
    if name in ("advance_frontier", "converge_cancellation"):
        run = after.runs[args["runId"]]
        same("counters", (result["runVersion"], result["runEventSequence"]), (run["version"], run["eventSequence"]))
        terminal = run["status"] if status in ("terminal", "settled") else None
        same("terminalStatus", result["terminalStatus"], terminal)
        if name == "advance_frontier":
            ready = {s["id"] for s in after.steps_of_run(run["id"]) if s["status"] == "ready"}
            listed = set(result["readyStepRunIds"])
            if status == "advanced" and (result["stepMutationCount"] < 1 or not listed <= ready):
                out.append(f"advanced result {result} disagrees with commands.md §4.3")
            if status in ("terminal", "settled") and result["readyStepRunIds"]:
                out.append("a terminal advance lists ready StepRuns")
    return out


def _run_intent(before: State, name: str, args: Record) -> bool:
    if "runId" in args and isinstance(args["runId"], str):
        run = before.runs.get(args["runId"])
        return run is not None and "cancelRequestedAtMs" in run
    return False


def contract_problems(name: str, args: Any, before: State, out: Outcome) -> list[str]:
    """The model's answer against the outcome restated from the command's check list (contracts.py)."""
    if out.error is not None and out.error.reason == "argument_invalid":
        return []  # malformed arguments are checked by the machine's own expectations
    want = expected_outcome(name, args, before)
    if want is None:
        return []
    kind, detail = want
    got = ("error", out.error.reason) if out.error is not None else ("ok", (out.result or {}).get("status"))
    if got[0] != kind or (detail is not None and got[1] != detail):
        return [f"{name} answered {got}, its check list (commands.md §4) prescribes {want}"]
    return []


def check_outcome(name: str, args: Any, before: State, out: Outcome) -> list[str]:
    """Every violated postcondition of one executed command (empty when all hold)."""
    problems: list[str] = contract_problems(name, args, before, out)
    if out.error is not None:
        e = out.error
        if out.state != before:
            problems.append(f"error {e.to_json()} changed the state")
        if e.code not in allowed_codes(name):
            problems.append(f"error code {e.code} is not of the {name} family")
        if e.error_class == "Unavailable":
            problems.append(f"Unavailable {e.reason} on an untampered model state")
        if name == "recover_attempt" and isinstance(args, dict):
            a, _ = _attempt_run(before, args)
            lease = before.leases.get(a["id"]) if a else None
            if (a is not None and a["status"] in T.ACTIVE_ATTEMPT and lease is not None and lease["status"] == "leased"
                    and lease["expiresAtMs"] <= before.clock and (a["status"] == "claimed"
                                                                   or args.get("evidence") == "not_running")
                    and e.reason != "argument_invalid"):
                problems.append(f"recovery of an expired lease refused ({e.reason}); D-2 applies with or without "
                                "intent")
        return problems
    result = out.result or {}
    if name.endswith("_candidates"):
        if set(result) - PAGE_KEYS or (out.state is not before and out.state != before):
            problems.append("a query wrote or returned unexpected keys")
        return problems
    if name == "converge_cancellation_page":
        return problems
    status = result.get("status")
    if status not in T.COMMAND_OUTCOMES[name]:
        problems.append(f"{name} answered {status!r}, not an outcome of commands.md §3")
    if status in NO_WRITE and out.state != before:
        problems.append(f"{name} answered {status} but wrote")
    want = expected_events(name, args, before, result)
    delta = _delta(before, out.state)
    if name == "admit_workflow" and status == "created":
        plan = args["plan"]
        want_delta = {plan["runId"]: len(plan["steps"]) + 1}
        if delta != want_delta:
            problems.append(f"admission appended {delta}, expected {want_delta}")
    elif want is not None and sum(delta.values()) != want:
        problems.append(f"{name} {status} appended {sum(delta.values())} events, state-machines.md §6 says {want}")
    if len(delta) > 1:
        problems.append(f"{name} wrote events to several Runs: {sorted(delta)}")
    writes = status not in NO_WRITE
    if writes and name in ("advance_frontier", "admit_task_attempt") and _run_intent(before, name, args):
        problems.append(f"{name} wrote under cancel intent (D-3/D-5)")
    problems += _mapping_problems(name, args, before, result)
    problems += _result_problems(name, args, before, out.state, result)
    return problems


def transition_problems(before: State, step: dict[str, Any], out: Outcome) -> list[str]:
    """check_outcome as an explorer Checker (a module-level function, so that --jobs workers can use it)."""
    return check_outcome(step["name"], step["args"], before, out)
