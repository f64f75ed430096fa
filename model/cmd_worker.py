"""The worker commands (commands.md §4.6–§4.12): claim, renew, release, start, running, fail_start,
complete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from . import ids
from . import messages as M
from . import tables as T
from .arguments import check_arguments
from .attempts import completion_status, fence_problem, lease_is_live
from .cmd_context import (
    CommandContext,
    RunCounter,
    bump_run,
    ceiling,
    put_attempt,
    put_lease,
    put_mutation,
    put_run,
    worker_actor,
)
from .cmd_loads import LoadedAttempt, at_epoch, at_running_epoch, clock_floor, load_attempt
from .errors import QlwfError
from .records import ATTEMPT_KEYS, ATTEMPT_LEASE_KEYS, LEASE_KEYS, Record, canonical, make_event
from .state import State, StateWriter
from .steprun import transition_step_run_mutation


def _attempt_event(la: LoadedAttempt, counter: RunCounter, kind: str, generation: int, type_: str,
                   actor: Record, payload_fn: Callable[[int], Record], now: int) -> Record:
    v, seq = counter.next()
    a = la.attempt
    return make_event(event_id=ids.task_execution_event_id(a["runId"], a["id"], generation, kind),
                      run_id=a["runId"], sequence=seq, type_=type_, actor=actor, attempt_id=a["id"],
                      step_run_id=a["stepRunId"], payload=payload_fn(v), created_at_ms=now)


def _mutate(ctx: CommandContext, tx: StateWriter, counter: RunCounter, step: Record, to: str, actor: Record,
            ids_: tuple[str, str], result_code: str | None = None, error_summary: str | None = None) -> Record:
    command: Record = {"expectedVersion": step["version"], "expectedDigest": step["stepRunDigest"],
                       "mutationId": ids_[0], "to": to, "atMs": ctx.now}
    if result_code is not None:
        command["resultCode"] = result_code
    if error_summary is not None:
        command["errorSummary"] = error_summary
    try:
        m = transition_step_run_mutation(step, command, counter.context(ids_[1], actor))
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    counter.next()
    put_mutation(tx, m)
    return cast(Record, m["stepRun"])


def claim_lease(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run, lease = la.attempt, la.loaded.run, la.lease

    def answer(status: str, reason: str | None = None) -> tuple[Record, State]:
        ctx.fire(T.decision(f"claim.{status}").id)
        return {"status": status, "reason": reason, "lease": lease}, state

    if a["status"] != "claimed":
        return answer("not_eligible", "attempt_state_mismatch")
    if run["status"] != "running":
        return answer("not_eligible", "run_state_mismatch")
    if "cancelRequestedAtMs" in run:
        return answer("not_eligible", "cancellation_requested")
    if not at_epoch(la.step, la.receipt):
        return answer("not_eligible", "stale_execution_authority")
    if lease is not None and lease["status"] == "completed":
        return answer("not_eligible", "lease_completed")
    if lease_is_live(lease, ctx.now):
        assert lease is not None
        return answer("idempotent" if lease["workerId"] == args["workerId"] else "leased")
    now, worker = ctx.now, args["workerId"]
    if lease is None:
        new_lease = {"attemptId": a["id"], "runId": a["runId"], "status": "leased", "version": 0,
                     "leaseGeneration": 1, "workerId": worker}
        ctx.fire(T.lease_row("claim_lease", None, "leased").id)
    else:
        new_lease = {k: lease[k] for k in ("attemptId", "runId")} | {
            "status": "leased", "version": lease["version"] + 1, "leaseGeneration": lease["leaseGeneration"] + 1,
            "workerId": worker}
        ctx.fire(T.lease_row("claim_lease", lease["status"], "leased").id)
    new_lease |= {"acquiredAtMs": now, "renewedAtMs": now, "expiresAtMs": now + args["durationMs"],
                  "updatedAtMs": now}
    ceiling(ctx, run["version"] + 1, new_lease["version"], new_lease["leaseGeneration"])
    tx = StateWriter(state, now)
    counter = RunCounter(run)
    put_lease(tx, new_lease)
    put_attempt(tx, a | {"workerId": worker, "leaseGeneration": new_lease["leaseGeneration"],
                         "leaseVersion": new_lease["version"], "leaseExpiresAtMs": new_lease["expiresAtMs"]})
    gen = new_lease["leaseGeneration"]
    tx.append_event(_attempt_event(
        la, counter, "lease_claimed", gen, "workflow.task_dispatch_leased", worker_actor(worker),
        lambda _v: {"attempt_id": a["id"], "lease_generation": gen, "execution_scope": T.EXECUTION_SCOPE,
                    "from_status": "ready", "to_status": "ready"}, now))
    put_run(tx, bump_run(tx, run, 1))
    ctx.fire(T.attempt_row("claim_lease", "claimed", "claimed").id)
    return {"status": "claimed", "reason": None, "lease": canonical(new_lease, LEASE_KEYS)}, tx.commit()


def _fence(ctx: CommandContext, la: LoadedAttempt, args: dict[str, Any]) -> None:
    problem = fence_problem(la.lease, args["workerId"], args["leaseGeneration"], ctx.now)
    if problem:
        raise ctx.conflict(problem, M.fence_failed(la.attempt["id"]))


def _same_holder(lease: Record | None, args: dict[str, Any]) -> bool:
    return (lease is not None and lease["workerId"] == args["workerId"]
            and lease["leaseGeneration"] == args["leaseGeneration"])


def _timeout_requested(state: State, attempt: Record) -> bool:
    return any(e["type"] == "workflow.task_timeout_requested" and e.get("attemptId") == attempt["id"]
               for e in state.events_of(attempt["runId"]))


def renew_lease(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    _fence(ctx, la, args)
    a, run, lease = la.attempt, la.loaded.run, la.lease
    assert lease is not None
    if a["status"] not in T.ACTIVE_ATTEMPT:
        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    now = ctx.now
    new_lease = lease | {"version": lease["version"] + 1, "renewedAtMs": now,
                         "expiresAtMs": now + args["durationMs"], "updatedAtMs": now}
    deadline = a.get("deadlineAtMs")
    writes_request = ("cancelRequestedAtMs" not in run and deadline is not None and deadline <= now
                      and not _timeout_requested(state, a))
    ceiling(ctx, new_lease["version"], *((run["version"] + 1,) if writes_request else ()))
    tx = StateWriter(state, now)
    put_lease(tx, new_lease)
    new_attempt = a | {"leaseVersion": new_lease["version"], "leaseExpiresAtMs": new_lease["expiresAtMs"]}
    put_attempt(tx, new_attempt)
    ctx.fire(T.lease_row("renew_lease", "leased", "leased").id)
    ctx.fire(T.attempt_row("renew_lease", a["status"], a["status"]).id)
    if "cancelRequestedAtMs" in run:
        status, reason = "stop_requested", run["cancelReason"]
        ctx.fire(T.decision("renew.stop.intent").id)
    elif writes_request:
        counter = RunCounter(run)
        tx.append_event(_attempt_event(
            la, counter, "timeout_requested", lease["leaseGeneration"], "workflow.task_timeout_requested",
            worker_actor(args["workerId"]),
            lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                       "lease_generation": lease["leaseGeneration"], "deadline_at_ms": deadline, "version": v}, now))
        put_run(tx, bump_run(tx, run, 1))
        status, reason = "stop_requested", "timeout"
        ctx.fire(T.decision("renew.stop.timeout_written").id)
    elif deadline is not None and deadline <= now:
        status, reason = "stop_requested", "timeout"
        ctx.fire(T.decision("renew.stop.timeout_repeat").id)
    else:
        status, reason = "renewed", None
        ctx.fire(T.decision("renew.renewed").id)
    return {"status": status, "reason": reason, "lease": canonical(new_lease, LEASE_KEYS)}, tx.commit()


def release_lease(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run, lease = la.attempt, la.loaded.run, la.lease
    if lease is not None and lease["status"] == "released" and _same_holder(lease, args):
        if lease["releaseReason"] == args["reason"]:
            ctx.fire(T.decision("release.replay").id)
            return {"status": "already_released", "lease": lease}, state
        raise ctx.conflict("replay_mismatch", M.RELEASED_OTHERWISE)
    _fence(ctx, la, args)
    assert lease is not None
    if a["status"] != "claimed":
        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    now = ctx.now
    new_lease = lease | {"status": "released", "version": lease["version"] + 1, "releasedAtMs": now,
                         "releaseReason": args["reason"],
                         "updatedAtMs": now}
    ceiling(ctx, new_lease["version"], run["version"] + 1)
    tx = StateWriter(state, now)
    put_lease(tx, new_lease)
    put_attempt(tx, {k: v for k, v in a.items() if k not in ATTEMPT_LEASE_KEYS})
    gen = lease["leaseGeneration"]
    tx.append_event(_attempt_event(
        la, RunCounter(run), "lease_released", gen, "workflow.task_dispatch_released", worker_actor(args["workerId"]),
        lambda _v: {"attempt_id": a["id"], "lease_generation": gen, "execution_scope": T.EXECUTION_SCOPE,
                    "from_status": "ready", "to_status": "ready", "release_reason": args["reason"]}, now))
    put_run(tx, bump_run(tx, run, 1))
    ctx.fire(T.lease_row("release_lease", "leased", "released").id)
    ctx.fire(T.attempt_row("release_lease", "claimed", "claimed").id)
    return {"status": "released", "lease": canonical(new_lease, LEASE_KEYS)}, tx.commit()


def start_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    timeout = args["timeoutMs"]
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run = la.attempt, la.loaded.run
    if a["status"] in ("starting", "running") and _same_holder(la.lease, args):
        ctx.fire(T.decision(f"start.replay.{a['status']}").id)
        return {"status": f"already_{a['status']}", "attempt": a}, state
    _fence(ctx, la, args)
    if a["status"] != "claimed":
        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", M.run_is(run["status"]))
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", M.CANCEL_INTENT)
    if not at_epoch(la.step, la.receipt):
        raise ctx.conflict("stale_execution_authority", M.LEFT_ADMITTED_EPOCH)
    ceiling(ctx, run["version"] + 1)
    now = ctx.now
    new_attempt = a | {"status": "starting"}
    if timeout is not None:
        new_attempt["deadlineAtMs"] = now + timeout
    tx = StateWriter(state, now)
    put_attempt(tx, new_attempt)
    gen = args["leaseGeneration"]
    tx.append_event(_attempt_event(
        la, RunCounter(run), "attempt_starting", gen, "workflow.task_attempt.starting", worker_actor(args["workerId"]),
        lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                   "from_status": "claimed", "to_status": "starting", "lease_generation": gen,
                   "deadline_at_ms": new_attempt.get("deadlineAtMs"), "version": v}, now))
    put_run(tx, bump_run(tx, run, 1))
    ctx.fire(T.attempt_row("start_attempt", "claimed", "starting").id)
    return {"status": "starting", "attempt": canonical(new_attempt, ATTEMPT_KEYS)}, tx.commit()


def record_running(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, run, step = la.attempt, la.loaded.run, la.step
    if a["status"] == "running" and _same_holder(la.lease, args):
        ctx.fire(T.decision("running.replay").id)
        return {"status": "already_running", "attempt": a}, state
    _fence(ctx, la, args)
    if a["status"] != "starting":
        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", M.run_is(run["status"]))
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", M.CANCEL_INTENT)
    if not at_epoch(step, la.receipt):
        raise ctx.conflict("stale_execution_authority", M.LEFT_ADMITTED_EPOCH)
    if step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise ctx.conflict("attempts_exhausted", M.ATTEMPTS_EXHAUSTED)
    ceiling(ctx, run["version"] + 2, a["callbackSequence"] + 1)
    now, gen, actor = ctx.now, args["leaseGeneration"], worker_actor(args["workerId"])
    tx = StateWriter(state, now)
    counter = RunCounter(run)
    new_attempt = a | {"status": "running", "startedAtMs": now, "callbackSequence": a["callbackSequence"] + 1}
    put_attempt(tx, new_attempt)
    tx.append_event(_attempt_event(
        la, counter, "attempt_running", gen, "workflow.task_attempt.running", actor,
        lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                   "from_status": "starting", "to_status": "running", "lease_generation": gen, "version": v}, now))
    _mutate(ctx, tx, counter, step, "running", actor,
            ids.task_execution_step_ids(a["runId"], a["id"], gen, "step_running"))
    put_run(tx, bump_run(tx, run, 2))
    ctx.fire(T.attempt_row("record_running", "starting", "running").id)
    ctx.fire(T.step_row("record_running", "ready", "running").id)
    return {"status": "running", "attempt": canonical(new_attempt, ATTEMPT_KEYS)}, tx.commit()


def _finish(state: State, ctx: CommandContext, la: LoadedAttempt, args: dict[str, Any], command: str,
            exit_code: int | None) -> tuple[Record, State]:
    """Shared effects of fail_start and complete_attempt (task-attempts.md §7)."""
    a, run, step, lease = la.attempt, la.loaded.run, la.step, la.lease
    assert lease is not None
    rule = completion_status(command, run, a, ctx.now, exit_code)
    target = rule.status
    codes = T.WORKER_PATH_CODES[(command, target)]
    from_starting = a["status"] == "starting"
    k = 2 if command == "fail_start" or not from_starting else 3
    callbacks = 1 if command == "fail_start" or from_starting else 0  # the attempt's callbackSequence + this
    ceiling(ctx, run["version"] + k, lease["version"] + 1, a["callbackSequence"] + callbacks)
    now, gen, actor = ctx.now, args["leaseGeneration"], worker_actor(args["workerId"])
    tx = StateWriter(state, now)
    counter = RunCounter(run)
    new_attempt = dict(a)
    if command == "complete_attempt" and from_starting:
        step = _mutate(ctx, tx, counter, step, "running", actor,
                       ids.task_execution_step_ids(a["runId"], a["id"], gen, "step_running"))
        new_attempt |= {"startedAtMs": now, "callbackSequence": a["callbackSequence"] + 1}
        ctx.fire(T.step_row("complete_attempt", "ready", "running").id)
    elif command == "fail_start":
        new_attempt["callbackSequence"] = a["callbackSequence"] + 1
    new_lease = lease | {"status": "completed", "version": lease["version"] + 1, "completedAtMs": now,
                         "updatedAtMs": now}
    put_lease(tx, new_lease)
    new_attempt |= {"status": target, "finishedAtMs": now, "leaseVersion": new_lease["version"]}
    if exit_code is not None:
        new_attempt["exitCode"] = exit_code
    if codes.attempt_error_code is not None:
        new_attempt["errorCode"] = codes.attempt_error_code
        new_attempt["errorSummary"] = codes.attempt_error_summary
    put_attempt(tx, new_attempt)
    tx.append_event(_attempt_event(
        la, counter, "attempt_terminal", gen, f"workflow.task_attempt.{target}", actor,
        lambda v: {"execution_scope": T.EXECUTION_SCOPE, "attempt_id": a["id"], "step_run_id": a["stepRunId"],
                   "from_status": a["status"], "to_status": target, "lease_generation": gen, "exit_code": exit_code,
                   "error_code": codes.attempt_error_code, "version": v}, now))
    _mutate(ctx, tx, counter, step, target, actor,
            ids.task_execution_step_ids(a["runId"], a["id"], gen, "step_terminal"),
            codes.step_result_code, codes.step_error_summary)
    put_run(tx, bump_run(tx, run, k))
    ctx.fire(rule.id)
    ctx.fire(T.lease_row(command, "leased", "completed").id)
    if command == "fail_start":
        ctx.fire(T.attempt_row(command, "starting", target).id)
        ctx.fire(T.step_row(command, "ready", target).id)
    else:
        ctx.fire(T.attempt_row(command, a["status"], target).id)
        ctx.fire(T.step_row(command, "running", target).id)
    result = {"status": "start_failed" if command == "fail_start" else "completed", "attemptStatus": target,
              "attempt": canonical(new_attempt, ATTEMPT_KEYS)}
    return result, tx.commit()


def _terminal_replay(ctx: CommandContext, la: LoadedAttempt, args: dict[str, Any]) -> Record | None:
    a, lease = la.attempt, la.lease
    if a["status"] in T.TERMINAL_ATTEMPT and lease is not None and lease["status"] == "completed" \
            and _same_holder(lease, args):
        ctx.fire(T.decision("finish.replay").id)
        return {"status": "already_terminal", "attemptStatus": a["status"], "attempt": a}
    return None


def fail_start(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    replay = _terminal_replay(ctx, la, args)
    if replay:
        return replay, state
    _fence(ctx, la, args)
    if la.attempt["status"] != "starting":
        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(la.attempt["status"]))
    if la.loaded.run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", M.run_is(la.loaded.run["status"]))
    if not at_epoch(la.step, la.receipt):
        raise ctx.conflict("stale_execution_authority", M.LEFT_ADMITTED_EPOCH)
    return _finish(state, ctx, la, args, "fail_start", None)


def complete_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    replay = _terminal_replay(ctx, la, args)
    if replay:
        return replay, state
    _fence(ctx, la, args)
    a = la.attempt
    if a["status"] not in ("starting", "running"):
        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if la.loaded.run["status"] != "running":
        raise ctx.conflict("run_state_mismatch", M.run_is(la.loaded.run["status"]))
    if (a["status"] == "starting" and not at_epoch(la.step, la.receipt)) or (
            a["status"] == "running" and not at_running_epoch(la.step, la.receipt)):
        raise ctx.conflict("stale_execution_authority", M.LEFT_ATTEMPT_EPOCH)
    if a["status"] == "starting" and la.step["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise ctx.conflict("attempts_exhausted", M.ATTEMPTS_EXHAUSTED)
    return _finish(state, ctx, la, args, "complete_attempt", args["exitCode"])
