"""Expected outcomes of the attempt commands, restated from their numbered check lists.

commands.md §4.5–§4.14 fix, for each command, the order of its checks and the outcome of the first
one that fails. For arguments of the right shape (the stateful machine's malformed inputs are
checked separately), this module recomputes that outcome from the state the command ran on, so the
machine can compare it with the model's answer. Only state facts are read; nothing of the model's
command code is reused.
"""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.records import Record
from qlwf.model.state import State

Expected = tuple[str, str | None]  # ("error", reason) or ("ok", status or None for "any status")


def _err(reason: str) -> Expected:
    return "error", reason


def _ok(status: str | None) -> Expected:
    return "ok", status


def fence_reason(lease: Record | None, worker: str, generation: int, now: int) -> str | None:
    """FENCE (commands.md §2.4): the first failing item."""
    if lease is None:
        return "lease_missing"
    if lease["status"] != "leased":
        return "not_leased"
    if lease["workerId"] != worker:
        return "worker_mismatch"
    if lease["leaseGeneration"] != generation:
        return "lease_generation_mismatch"
    return "lease_expired" if lease["expiresAtMs"] <= now else None


class _Facts:
    def __init__(self, state: State, a: Record) -> None:
        self.a = a
        self.run = state.runs[a["runId"]]
        self.step = state.step_runs[a["stepRunId"]]
        self.receipt = state.receipts[a["id"]]
        self.lease = state.leases.get(a["id"])
        self.now = state.clock
        self.intent = "cancelRequestedAtMs" in self.run
        r, s = self.receipt, self.step
        self.epoch = s["status"] == "ready" and (s["version"], s["stepRunDigest"]) == (r["stepRunVersion"],
                                                                                        r["stepRunDigest"])
        self.running_epoch = s["status"] == "running" and s["version"] == r["stepRunVersion"] + 1

    def holder(self, args: Record) -> bool:
        return self.lease is not None and (self.lease["workerId"], self.lease["leaseGeneration"]) == (
            args["workerId"], args["leaseGeneration"])


def _claim(f: _Facts, args: Record) -> Expected:
    reason = ("attempt_state_mismatch" if f.a["status"] != "claimed" else
              "run_state_mismatch" if f.run["status"] != "running" else
              "cancellation_requested" if f.intent else
              "stale_execution_authority" if not f.epoch else
              "lease_completed" if f.lease is not None and f.lease["status"] == "completed" else None)
    if reason:
        return _ok("not_eligible")
    lease = f.lease
    if lease is not None and lease["status"] == "leased" and lease["expiresAtMs"] > f.now:
        return _ok("idempotent" if lease["workerId"] == args["workerId"] else "leased")
    return _ok("claimed")


def _fenced(name: str, f: _Facts, args: Record) -> Expected:
    st = f.a["status"]
    fence = fence_reason(f.lease, args["workerId"], args["leaseGeneration"], f.now)
    if name == "release_lease" and f.lease is not None and f.lease["status"] == "released" and f.holder(args):
        return _ok("already_released") if f.lease.get("releaseReason") == args["reason"] else _err("replay_mismatch")
    if name == "start_attempt" and st in ("starting", "running") and f.holder(args):
        return _ok(f"already_{st}")
    if name == "record_running" and st == "running" and f.holder(args):
        return _ok("already_running")
    if name in ("fail_start", "complete_attempt") and st in T.TERMINAL_ATTEMPT and f.lease is not None \
            and f.lease["status"] == "completed" and f.holder(args):
        return _ok("already_terminal")
    if fence:
        return _err(fence)
    allowed = {"renew_lease": T.ACTIVE_ATTEMPT, "release_lease": {"claimed"}, "start_attempt": {"claimed"},
               "record_running": {"starting"}, "fail_start": {"starting"},
               "complete_attempt": {"starting", "running"}}[name]
    if st not in allowed:
        return _err("attempt_state_mismatch")
    if name in ("renew_lease", "release_lease"):
        return _ok(None if name == "renew_lease" else "released")
    if f.run["status"] != "running":
        return _err("run_state_mismatch")
    if name in ("start_attempt", "record_running") and f.intent:
        return _err("cancellation_requested")
    if (st != "running" and not f.epoch) or (st == "running" and not f.running_epoch):
        return _err("stale_execution_authority")
    if name in ("record_running", "complete_attempt") and st == "starting" \
            and f.step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        return _err("attempts_exhausted")
    return _ok({"start_attempt": "starting", "record_running": "running", "fail_start": "start_failed",
                "complete_attempt": "completed"}[name])


def _recover(f: _Facts, args: Record) -> Expected:
    if f.a["status"] not in T.ACTIVE_ATTEMPT:
        return _err("attempt_state_mismatch")
    if f.lease is None or f.lease["status"] != "leased":
        return _err("not_leased")
    if f.lease["expiresAtMs"] > f.now:
        return _err("lease_live")
    if f.a["status"] == "claimed":
        return _ok("requeued")
    return _ok({"running": "retry", "unknown": "manual", "not_running": "failed"}[args["evidence"]])


def _admit(state: State, args: Record) -> Expected:
    run, step = state.runs[args["runId"]], state.step_runs[args["stepRunId"]]
    plan = state.admission_of_run(run["id"])[0]["plan"]
    receipt = next((r for r in state.receipts.values() if (r["runId"], r["stepRunId"], r["stepRunVersion"])
                    == (run["id"], step["id"], step["version"])), None)
    binding = args["binding"]
    if receipt is not None:
        same = all(receipt[k] == v for k, v in binding.items())
        return _ok("existing") if same else _err("binding_mismatch")
    if step["status"] != "ready":
        return _err("step_not_ready")
    p = next(p for p in plan["steps"] if p["stepRunId"] == step["id"])
    if binding["resourceTaskId"] != p["taskId"] or binding["taskId"] != f"pkg:{plan['target']['packageName']}:" \
                                                                       f"{p['taskId']}":
        return _err("binding_inconsistent")
    if run["status"] != "running":
        return _err("run_not_running")
    if "cancelRequestedAtMs" in run:
        return _err("cancellation_requested")
    if step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        return _err("attempts_exhausted")
    return _ok("created")


def expected_outcome(name: str, args: Any, before: State) -> Expected | None:
    """The outcome the numbered checks prescribe, or None when the command is not covered here."""
    if not isinstance(args, dict):
        return None
    if name == "admit_task_attempt" and args.get("runId") in before.runs \
            and args.get("stepRunId") in before.step_runs and isinstance(args.get("binding"), dict):
        return _admit(before, args)
    attempt_id = args.get("attemptId")
    a = before.attempts.get(attempt_id) if isinstance(attempt_id, str) else None
    if a is None:
        return None
    f = _Facts(before, a)
    if name == "claim_lease":
        return _claim(f, args)
    if name == "recover_attempt":
        return _recover(f, args)
    if name in ("renew_lease", "release_lease", "start_attempt", "record_running", "fail_start", "complete_attempt"):
        return _fenced(name, f, args)
    return None


def convergence_expectation(state: State, run_id: str) -> Record | None:
    """converge_cancellation on a running Run with intent (cancellation.md §5, restated): which attempts
    block (claimed with a `leased` lease, starting, running), how many claimed attempts are settled, how
    many StepRuns are mutated, and whether the Run terminalizes."""
    run = state.runs[run_id]
    if run["status"] != "running" or "cancelRequestedAtMs" not in run:
        return None
    active = [a for a in state.attempts_of_run(run_id) if a["status"] in T.ACTIVE_ATTEMPT]
    blocked = sorted(a["id"] for a in active if a["status"] != "claimed"
                     or state.leases.get(a["id"], {}).get("status") == "leased")
    held = {a["stepRunId"] for a in active if a["id"] in blocked}
    steps = [s for s in state.steps_of_run(run_id) if s["status"] not in T.TERMINAL_STEP]
    blocked_steps = sorted(s["id"] for s in steps if s["id"] in held or s["status"] == "running")
    return {"status": "blocked" if blocked_steps else "terminal", "blockedAttemptIds": blocked,
            "blockedStepRunIds": blocked_steps, "settledAttempts": len(active) - len(blocked),
            "stepMutationCount": len(steps) - len(blocked_steps)}
