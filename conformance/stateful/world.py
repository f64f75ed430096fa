"""Read-only views of a model State that the stateful machine draws its arguments from."""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.invariants import consistent_binding
from qlwf.model.records import Record
from qlwf.model.state import State
from qlwf.model.system import frontier_candidate_rows, recovery_candidate_rows, task_candidate_rows

WORKERS = ("w1", "w2", "w3")
DURATIONS = (5000, 30000, 600000)
TIMEOUTS = (None, 1, 1000, 60000)
EXIT_CODES = (0, 0, 0, 1, -1, 2147483647)  # success half of the time, so that Runs can succeed
REASONS = ("timeout", "user", "timeout", "policy", "shutdown", "reconcile")  # timeout as often as the rest
ACTORS: tuple[Record, ...] = ({"type": "user", "id": "alice"}, {"type": "system"}, {"type": "scheduler", "id": "cron"})
FENCED = ("renew_lease", "release_lease", "start_attempt", "record_running", "fail_start", "complete_attempt")


def run_ids(state: State) -> list[str]:
    return sorted(state.runs)


def cancelling(state: State) -> list[str]:
    return sorted(r["id"] for r in state.runs.values() if r["status"] == "running" and "cancelRequestedAtMs" in r)


def frontier_candidates(state: State) -> list[str]:
    return [row["runId"] for _, row in frontier_candidate_rows(state)]


def task_candidates(state: State) -> list[tuple[str, str]]:
    return [(row["runId"], row["stepRunId"]) for _, row in task_candidate_rows(state)]


def step_ids(state: State) -> list[str]:
    return sorted(state.step_runs)


def binding(state: State, step_run_id: str) -> Record:
    """A binding consistent with the plan step (records.md §6.10)."""
    s = state.step_runs[step_run_id]
    plan = state.admission_of_run(s["runId"])[0]["plan"]
    step = next(p for p in plan["steps"] if p["stepRunId"] == step_run_id)
    return consistent_binding(plan, step)


def attempts(state: State, statuses: frozenset[str] | tuple[str, ...] = T.ACTIVE_ATTEMPT) -> list[Record]:
    return [state.attempts[k] for k in sorted(state.attempts) if state.attempts[k]["status"] in statuses]


def holders(state: State, alive: set[str], live: bool | None = None) -> list[tuple[Record, Record]]:
    """(attempt, lease) with a `leased` lease held by a worker still acting; live/expired filter."""
    out = []
    for a in attempts(state, tuple(T.ATTEMPT_STATUSES)):
        lease = state.leases.get(a["id"])
        if lease is None or lease["status"] != "leased" or lease["workerId"] not in alive:
            continue
        is_live = lease["expiresAtMs"] > state.clock
        if live is None or live == is_live:
            out.append((a, lease))
    return out


def in_flight_under_intent(state: State, alive: set[str]) -> list[tuple[Record, Record]]:
    """Live holders of starting or running attempts of cancelling Runs."""
    return [(a, lease) for a, lease in holders(state, alive, live=True)
            if a["status"] in ("starting", "running") and "cancelRequestedAtMs" in state.runs[a["runId"]]]


def with_lease(state: State) -> list[tuple[Record, Record]]:
    return [(state.attempts[k], state.leases[k]) for k in sorted(state.leases)]


def cancellable_with_work(state: State) -> list[str]:
    """Running Runs without intent that already have an attempt."""
    with_work = {a["runId"] for a in state.attempts.values()}
    return sorted(r["id"] for r in state.runs.values()
                  if r["status"] == "running" and "cancelRequestedAtMs" not in r and r["id"] in with_work)


def replayable(state: State) -> bool:
    """Some lease whose holder could repeat a durable command (worker release, completion, start, running)."""
    return any(lease.get("releaseReason") != "lease_expired" and (
        lease["status"] != "leased" or state.attempts[k]["status"] in ("starting", "running"))
        for k, lease in state.leases.items())


def expired(state: State) -> list[str]:
    return [row["attemptId"] for _, row in recovery_candidate_rows(state, state.clock)]


def fence(a: Record, lease: Record) -> dict[str, Any]:
    return {"attemptId": a["id"], "workerId": lease["workerId"], "leaseGeneration": lease["leaseGeneration"]}


def next_timer(state: State) -> int | None:
    """The earliest future lease expiry or task deadline (an instant where behaviour changes)."""
    times = [lease["expiresAtMs"] for lease in state.leases.values()
             if lease["status"] == "leased" and lease["expiresAtMs"] > state.clock]
    times += [a["deadlineAtMs"] for a in state.attempts.values()
              if a["status"] in T.ACTIVE_ATTEMPT and a.get("deadlineAtMs", 0) > state.clock]
    return min(times) if times else None


def fenced_args(name: str, f: dict[str, Any], duration: int, timeout: int | None, exit_code: int) -> dict[str, Any]:
    extras: dict[str, dict[str, Any]] = {
        "renew_lease": {"durationMs": duration}, "release_lease": {"reason": "declined"},
        "start_attempt": {"timeoutMs": timeout}, "complete_attempt": {"exitCode": exit_code}}
    return {**f, **extras.get(name, {})}


def natural_actions(state: State, alive: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The next step of every piece of work that can progress (commands with placeholder choices)."""
    out: list[tuple[str, dict[str, Any]]] = [("advance_frontier", {"runId": r}) for r in frontier_candidates(state)]
    out += [("admit_task_attempt", {"runId": r, "stepRunId": s, "binding": binding(state, s)})
            for r, s in task_candidates(state)]
    for a in attempts(state, ("claimed",)):
        lease = state.leases.get(a["id"])
        if lease is None or lease["status"] == "released" or lease["expiresAtMs"] <= state.clock:
            out.append(("claim_lease", {"attemptId": a["id"]}))
    for a, lease in holders(state, alive, live=True):
        nxt = {"claimed": ("start_attempt",), "starting": ("record_running", "complete_attempt", "fail_start"),
               "running": ("complete_attempt",)}.get(a["status"], ())
        out += [(n, fence(a, lease)) for n in nxt]
    out += [("recover_attempt", {"attemptId": aid}) for aid in expired(state)]
    out += [("converge_cancellation", {"runId": r}) for r in cancelling(state)]
    return out
