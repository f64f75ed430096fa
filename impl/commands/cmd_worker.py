"""Worker commands: lease claim/renew/release, start, running, start failure, completion (commands.md §4.6–§4.12)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qlwf.model import ids
from qlwf.model import messages as M
from qlwf.model import tables as T
from qlwf.model.attempts import completion_status, fence_problem, lease_is_live
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.records import ATTEMPT_KEYS, ATTEMPT_LEASE_KEYS, LEASE_KEYS, Record, canonical, make_event
from qlwf.model.steprun import ledger_entry, transition_step_run_mutation

from . import arguments, locks
from .context import RunCounter, StoreTx, worker_actor
from .loads import LoadedAttempt
from .store import Store

Args = dict[str, Any]


def prepare(fail: CommandErrors, args: Any) -> Args:
    return arguments.command(fail, args)


def lock(store: Store, fail: CommandErrors, args: Args) -> None:
    locks.attempt_scope(store, args["attemptId"])


def _load(tx: StoreTx, args: Args) -> LoadedAttempt:
    arguments.at_now(tx.fail, args, tx.now)
    la = tx.loads.attempt(args["attemptId"])
    tx.loads.clock_floor(la.attempt["runId"], [la.lease], tx.now)
    return la


def _at_epoch(step: Record, receipt: Record) -> bool:
    return bool(step["status"] == "ready" and step["version"] == receipt["stepRunVersion"]
                and step["stepRunDigest"] == receipt["stepRunDigest"])


def _at_running_epoch(step: Record, receipt: Record) -> bool:
    return bool(step["status"] == "running" and step["version"] == receipt["stepRunVersion"] + 1)


def _same_holder(lease: Record | None, args: Args) -> bool:
    return (lease is not None and lease["workerId"] == args["workerId"]
            and lease["leaseGeneration"] == args["leaseGeneration"])


def _fence(tx: StoreTx, la: LoadedAttempt, args: Args) -> Record:
    problem = fence_problem(la.lease, args["workerId"], args["leaseGeneration"], tx.now)
    if problem:
        raise tx.fail.conflict(problem, M.fence_failed(la.attempt["id"]))
    assert la.lease is not None
    return la.lease


def _event(tx: StoreTx, la: LoadedAttempt, counter: RunCounter, kind: str, generation: int, type_: str, actor: Record,
           payload: Callable[[int], Record]) -> Record:
    version, sequence = counter.next()
    a = la.attempt
    return make_event(event_id=ids.task_execution_event_id(a["runId"], a["id"], generation, kind), run_id=a["runId"],
                      sequence=sequence, type_=type_, actor=actor, attempt_id=a["id"], step_run_id=a["stepRunId"],
                      payload=payload(version), created_at_ms=tx.now)


def _mutation(tx: StoreTx, counter: RunCounter, step: Record, to: str, actor: Record, ids_: tuple[str, str],
              result_code: str | None = None, error_summary: str | None = None) -> Record:
    command: Record = {"expectedVersion": step["version"], "expectedDigest": step["stepRunDigest"],
                       "mutationId": ids_[0], "to": to, "atMs": tx.now}
    if result_code is not None:
        command["resultCode"] = result_code
    if error_summary is not None:
        command["errorSummary"] = error_summary
    try:
        m = transition_step_run_mutation(step, command, counter.context(ids_[1], actor))
    except QlwfError as e:
        raise tx.fail.unavailable("resolution_failed", e.message) from e
    counter.next()
    return m


def _bumped(run: Record, k: int) -> Record:
    return run | {"version": run["version"] + k, "eventSequence": run["eventSequence"] + k}


# ------------------------------------------------------------------------------------------------
def claim_lease(tx: StoreTx, args: Args) -> Record:
    la = _load(tx, args)
    a, run, lease, now = la.attempt, la.loaded.run, la.lease, tx.now

    def answer(status: str, reason: str | None = None) -> Record:
        return {"status": status, "reason": reason, "lease": lease}

    if a["status"] != "claimed":
        return answer("not_eligible", "attempt_state_mismatch")
    if run["status"] != "running":
        return answer("not_eligible", "run_state_mismatch")
    if "cancelRequestedAtMs" in run:
        return answer("not_eligible", "cancellation_requested")
    if not _at_epoch(la.step, la.receipt):
        return answer("not_eligible", "stale_execution_authority")
    if lease is not None and lease["status"] == "completed":
        return answer("not_eligible", "lease_completed")
    if lease_is_live(lease, now):
        assert lease is not None
        return answer("idempotent" if lease["workerId"] == args["workerId"] else "leased")
    worker = args["workerId"]
    version, generation = (0, 1) if lease is None else (lease["version"] + 1, lease["leaseGeneration"] + 1)
    new_lease = {"attemptId": a["id"], "runId": a["runId"], "status": "leased", "version": version,
                 "leaseGeneration": generation, "workerId": worker, "acquiredAtMs": now, "renewedAtMs": now,
                 "expiresAtMs": now + args["durationMs"], "updatedAtMs": now}
    tx.ceiling(run["version"] + 1, version, generation)
    new_attempt = canonical(a | {"workerId": worker, "leaseGeneration": generation, "leaseVersion": version,
                                 "leaseExpiresAtMs": new_lease["expiresAtMs"]}, ATTEMPT_KEYS)
    event = _event(tx, la, RunCounter(run), "lease_claimed", generation, "workflow.task_dispatch_leased",
                   worker_actor(worker),
                   lambda _v: {"attempt_id": a["id"], "lease_generation": generation,
                               "execution_scope": T.EXECUTION_SCOPE, "from_status": "ready", "to_status": "ready"})
    # storage.md §4: lease insert or CAS; attempt CAS; Run CAS; event.
    if lease is None:
        tx.store.insert_lease(new_lease)
    else:
        tx.store.cas_lease(lease, new_lease)
    tx.store.cas_attempt(a, new_attempt)
    tx.store.cas_run("counters", run, _bumped(run, 1))
    tx.store.insert_event(event)
    return {"status": "claimed", "reason": None, "lease": canonical(new_lease, LEASE_KEYS)}


def renew_lease(tx: StoreTx, args: Args) -> Record:
    la = _load(tx, args)
    lease = _fence(tx, la, args)
    a, run, now = la.attempt, la.loaded.run, tx.now
    if a["status"] not in T.ACTIVE_ATTEMPT:
        raise tx.fail.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    new_lease = lease | {"version": lease["version"] + 1, "renewedAtMs": now, "expiresAtMs": now + args["durationMs"],
                         "updatedAtMs": now}
    deadline = a.get("deadlineAtMs")
    writes_request = ("cancelRequestedAtMs" not in run and deadline is not None and deadline <= now
                      and not tx.store.timeout_requested(run["id"], a["id"]))
    # commands.md §2.5: only a renew that appends the timeout request moves the Run counters.
    tx.ceiling(new_lease["version"], *((run["version"] + 1,) if writes_request else ()))
    new_attempt = a | {"leaseVersion": new_lease["version"], "leaseExpiresAtMs": new_lease["expiresAtMs"]}
    # storage.md §4: lease CAS; attempt CAS; (timeout request: Run CAS; event).
    tx.store.cas_lease(lease, new_lease)
    tx.store.cas_attempt(a, new_attempt)
    if "cancelRequestedAtMs" in run:
        status, reason = "stop_requested", run["cancelReason"]
    elif writes_request:
        generation = lease["leaseGeneration"]
        event = _event(tx, la, RunCounter(run), "timeout_requested", generation, "workflow.task_timeout_requested",
                       worker_actor(args["workerId"]),
                       lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"],
                                  "step_run_id": a["stepRunId"], "lease_generation": generation,
                                  "deadline_at_ms": deadline, "version": v})
        tx.store.cas_run("counters", run, _bumped(run, 1))
        tx.store.insert_event(event)
        status, reason = "stop_requested", "timeout"
    elif deadline is not None and deadline <= now:
        status, reason = "stop_requested", "timeout"
    else:
        status, reason = "renewed", None
    return {"status": status, "reason": reason, "lease": canonical(new_lease, LEASE_KEYS)}


def release_lease(tx: StoreTx, args: Args) -> Record:
    la = _load(tx, args)
    a, run, lease, now = la.attempt, la.loaded.run, la.lease, tx.now
    if lease is not None and lease["status"] == "released" and _same_holder(lease, args):
        if lease["releaseReason"] == args["reason"]:
            return {"status": "already_released", "lease": lease}
        raise tx.fail.conflict("replay_mismatch", M.RELEASED_OTHERWISE)
    lease = _fence(tx, la, args)
    if a["status"] != "claimed":
        raise tx.fail.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    new_lease = canonical(lease | {"status": "released", "version": lease["version"] + 1, "releasedAtMs": now,
                                   "releaseReason": args["reason"], "updatedAtMs": now}, LEASE_KEYS)
    tx.ceiling(new_lease["version"], run["version"] + 1)
    new_attempt = {k: v for k, v in a.items() if k not in ATTEMPT_LEASE_KEYS}
    generation = lease["leaseGeneration"]
    event = _event(tx, la, RunCounter(run), "lease_released", generation, "workflow.task_dispatch_released",
                   worker_actor(args["workerId"]),
                   lambda _v: {"attempt_id": a["id"], "lease_generation": generation,
                               "execution_scope": T.EXECUTION_SCOPE, "from_status": "ready", "to_status": "ready",
                               "release_reason": args["reason"]})
    # storage.md §4: lease CAS; attempt CAS; Run CAS; event.
    tx.store.cas_lease(lease, new_lease)
    tx.store.cas_attempt(a, new_attempt)
    tx.store.cas_run("counters_any_intent", run, _bumped(run, 1))
    tx.store.insert_event(event)
    return {"status": "released", "lease": new_lease}


def start_attempt(tx: StoreTx, args: Args) -> Record:
    la = _load(tx, args)
    a, run = la.attempt, la.loaded.run
    if a["status"] in ("starting", "running") and _same_holder(la.lease, args):
        return {"status": f"already_{a['status']}", "attempt": a}
    _fence(tx, la, args)
    if a["status"] != "claimed":
        raise tx.fail.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if run["status"] != "running":
        raise tx.fail.conflict("run_state_mismatch", M.run_is(run["status"]))
    if "cancelRequestedAtMs" in run:
        raise tx.fail.conflict("cancellation_requested", M.CANCEL_INTENT)
    if not _at_epoch(la.step, la.receipt):
        raise tx.fail.conflict("stale_execution_authority", M.LEFT_ADMITTED_EPOCH)
    tx.ceiling(run["version"] + 1)
    new_attempt = a | {"status": "starting"}
    if args["timeoutMs"] is not None:
        new_attempt["deadlineAtMs"] = tx.now + args["timeoutMs"]
    new_attempt = canonical(new_attempt, ATTEMPT_KEYS)
    generation = args["leaseGeneration"]
    event = _event(tx, la, RunCounter(run), "attempt_starting", generation, "workflow.task_attempt.starting",
                   worker_actor(args["workerId"]),
                   lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"],
                              "step_run_id": a["stepRunId"], "from_status": "claimed", "to_status": "starting",
                              "lease_generation": generation, "deadline_at_ms": new_attempt.get("deadlineAtMs"),
                              "version": v})
    # storage.md §4: attempt CAS; Run CAS; event.
    tx.store.cas_attempt(a, new_attempt)
    tx.store.cas_run("counters", run, _bumped(run, 1))
    tx.store.insert_event(event)
    return {"status": "starting", "attempt": new_attempt}


def record_running(tx: StoreTx, args: Args) -> Record:
    la = _load(tx, args)
    a, run, step = la.attempt, la.loaded.run, la.step
    if a["status"] == "running" and _same_holder(la.lease, args):
        return {"status": "already_running", "attempt": a}
    _fence(tx, la, args)
    if a["status"] != "starting":
        raise tx.fail.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if run["status"] != "running":
        raise tx.fail.conflict("run_state_mismatch", M.run_is(run["status"]))
    if "cancelRequestedAtMs" in run:
        raise tx.fail.conflict("cancellation_requested", M.CANCEL_INTENT)
    if not _at_epoch(step, la.receipt):
        raise tx.fail.conflict("stale_execution_authority", M.LEFT_ADMITTED_EPOCH)
    if step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise tx.fail.conflict("attempts_exhausted", M.ATTEMPTS_EXHAUSTED)
    tx.ceiling(run["version"] + 2, a["callbackSequence"] + 1)
    now, generation, actor = tx.now, args["leaseGeneration"], worker_actor(args["workerId"])
    counter = RunCounter(run)
    new_attempt = canonical(a | {"status": "running", "startedAtMs": now,
                                 "callbackSequence": a["callbackSequence"] + 1}, ATTEMPT_KEYS)
    event = _event(tx, la, counter, "attempt_running", generation, "workflow.task_attempt.running", actor,
                   lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"],
                              "step_run_id": a["stepRunId"], "from_status": "starting", "to_status": "running",
                              "lease_generation": generation, "version": v})
    m = _mutation(tx, counter, step, "running", actor,
                  ids.task_execution_step_ids(a["runId"], a["id"], generation, "step_running"))
    # storage.md §4: attempt CAS; StepRun CAS; Run CAS; attempt event; step event; ledger entry.
    tx.store.cas_attempt(a, new_attempt)
    tx.store.cas_step_run(m)
    tx.store.cas_run("counters", run, _bumped(run, 2))
    tx.store.insert_event(event)
    tx.store.insert_event(m["event"])
    tx.store.insert_mutation(ledger_entry(m, now))
    return {"status": "running", "attempt": new_attempt}


def _terminal_replay(la: LoadedAttempt, args: Args) -> Record | None:
    a, lease = la.attempt, la.lease
    if (a["status"] in T.TERMINAL_ATTEMPT and lease is not None and lease["status"] == "completed"
            and _same_holder(lease, args)):
        return {"status": "already_terminal", "attemptStatus": a["status"], "attempt": a}
    return None


def fail_start(tx: StoreTx, args: Args) -> Record:
    la = _load(tx, args)
    replay = _terminal_replay(la, args)
    if replay:
        return replay
    _fence(tx, la, args)
    if la.attempt["status"] != "starting":
        raise tx.fail.conflict("attempt_state_mismatch", M.attempt_is(la.attempt["status"]))
    if la.loaded.run["status"] != "running":
        raise tx.fail.conflict("run_state_mismatch", M.run_is(la.loaded.run["status"]))
    if not _at_epoch(la.step, la.receipt):
        raise tx.fail.conflict("stale_execution_authority", M.LEFT_ADMITTED_EPOCH)
    return _finish(tx, la, args, "fail_start", None)


def complete_attempt(tx: StoreTx, args: Args) -> Record:
    la = _load(tx, args)
    replay = _terminal_replay(la, args)
    if replay:
        return replay
    _fence(tx, la, args)
    a = la.attempt
    if a["status"] not in ("starting", "running"):
        raise tx.fail.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if la.loaded.run["status"] != "running":
        raise tx.fail.conflict("run_state_mismatch", M.run_is(la.loaded.run["status"]))
    if (a["status"] == "starting" and not _at_epoch(la.step, la.receipt)) or (
            a["status"] == "running" and not _at_running_epoch(la.step, la.receipt)):
        raise tx.fail.conflict("stale_execution_authority", M.LEFT_ATTEMPT_EPOCH)
    if a["status"] == "starting" and la.step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise tx.fail.conflict("attempts_exhausted", M.ATTEMPTS_EXHAUSTED)
    return _finish(tx, la, args, "complete_attempt", args["exitCode"])


def _finish(tx: StoreTx, la: LoadedAttempt, args: Args, command: str, exit_code: int | None) -> Record:
    """What fail_start and complete_attempt both write once their checks passed (task-attempts.md §7)."""
    a, run, step, lease = la.attempt, la.loaded.run, la.step, la.lease
    assert lease is not None
    target = completion_status(command, run, a, tx.now, exit_code).status
    codes = T.WORKER_PATH_CODES[(command, target)]
    from_starting = a["status"] == "starting"
    k = 2 if command == "fail_start" or not from_starting else 3
    callbacks = 1 if command == "fail_start" or from_starting else 0  # callbackSequence grows by this
    tx.ceiling(run["version"] + k, lease["version"] + 1, a["callbackSequence"] + callbacks)
    now, generation, actor = tx.now, args["leaseGeneration"], worker_actor(args["workerId"])
    counter = RunCounter(run)
    mutations: list[Record] = []
    new_attempt = dict(a)
    if command == "complete_attempt" and from_starting:
        synthetic = _mutation(tx, counter, step, "running", actor,
                              ids.task_execution_step_ids(a["runId"], a["id"], generation, "step_running"))
        mutations.append(synthetic)
        step = synthetic["stepRun"]
        new_attempt |= {"startedAtMs": now, "callbackSequence": a["callbackSequence"] + 1}
    elif command == "fail_start":
        new_attempt["callbackSequence"] = a["callbackSequence"] + 1
    new_lease = lease | {"status": "completed", "version": lease["version"] + 1, "completedAtMs": now,
                         "updatedAtMs": now}
    new_attempt |= {"status": target, "finishedAtMs": now, "leaseVersion": new_lease["version"]}
    if exit_code is not None:
        new_attempt["exitCode"] = exit_code
    if codes.attempt_error_code is not None:
        new_attempt["errorCode"] = codes.attempt_error_code
        new_attempt["errorSummary"] = codes.attempt_error_summary
    new_attempt = canonical(new_attempt, ATTEMPT_KEYS)
    event = _event(tx, la, counter, "attempt_terminal", generation, f"workflow.task_attempt.{target}", actor,
                   lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"],
                              "step_run_id": a["stepRunId"], "from_status": a["status"], "to_status": target,
                              "lease_generation": generation, "exit_code": exit_code,
                              "error_code": codes.attempt_error_code, "version": v})
    terminal = _mutation(tx, counter, step, target, actor,
                         ids.task_execution_step_ids(a["runId"], a["id"], generation, "step_terminal"),
                         codes.step_result_code, codes.step_error_summary)
    mutations.append(terminal)
    # storage.md §4: (synthetic StepRun CAS); lease CAS; attempt CAS; terminal StepRun CAS; Run CAS;
    # events in sequence order; ledger entries.
    if len(mutations) == 2:
        tx.store.cas_step_run(mutations[0])
    tx.store.cas_lease(lease, canonical(new_lease, LEASE_KEYS))
    tx.store.cas_attempt(a, new_attempt)
    tx.store.cas_step_run(terminal)
    tx.store.cas_run("counters_any_intent", run, _bumped(run, k))
    for e in sorted([event, *(m["event"] for m in mutations)], key=lambda e: e["sequence"]):
        tx.store.insert_event(e)
    for m in mutations:
        tx.store.insert_mutation(ledger_entry(m, now))
    return {"status": "start_failed" if command == "fail_start" else "completed", "attemptStatus": target,
            "attempt": new_attempt}


COMMANDS: dict[str, Callable[[StoreTx, Args], Record]] = {
    "claim_lease": claim_lease,
    "renew_lease": renew_lease,
    "release_lease": release_lease,
    "start_attempt": start_attempt,
    "record_running": record_running,
    "fail_start": fail_start,
    "complete_attempt": complete_attempt,
}
