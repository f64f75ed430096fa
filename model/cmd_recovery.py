"""recover_attempt (commands.md §4.14).
"""

from __future__ import annotations

from typing import Any

from . import messages as M
from . import tables as T
from .arguments import check_arguments
from .cmd_context import CommandContext, ceiling, put_attempt, put_lease, put_mutation, put_run
from .cmd_loads import clock_floor, load_attempt
from .errors import QlwfError
from .records import ATTEMPT_KEYS, Record, canonical
from .recovery import build_task_recovery
from .state import State, StateWriter


def recover_attempt(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    la = load_attempt(state, ctx, args["attemptId"])
    clock_floor(state, ctx, la.attempt["runId"], [la.lease])
    a, lease, run = la.attempt, la.lease, la.loaded.run
    if a["status"] not in T.ACTIVE_ATTEMPT:
        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if lease is None or lease["status"] != "leased":
        raise ctx.conflict("not_leased", M.NOT_LEASED)
    if lease["expiresAtMs"] > ctx.now:
        raise ctx.conflict("lease_live", M.LEASE_LIVE)
    if a["status"] == "claimed":
        reason = "unstarted_claim_expired"
    elif args["evidence"] == "running":
        ctx.fire(T.decision("recover.retry").id)
        return {"status": "retry", "attempt": a}, state
    elif args["evidence"] == "unknown":
        ctx.fire(T.decision("recover.manual").id)
        return {"status": "manual", "attempt": a}, state
    else:
        reason = "execution_not_running"
    try:
        b = build_task_recovery({"admission": la.receipt, "run": run, "attempt": a, "stepRun": la.step,
                                 "reason": reason, "observedAtMs": ctx.now})
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    now = ctx.now
    new_lease = lease | {"status": "released", "version": lease["version"] + 1, "releasedAtMs": now,
                         "releaseReason": "lease_expired",
                         "updatedAtMs": now}
    ceiling(ctx, new_lease["version"], b["run"]["version"])
    tx = StateWriter(state, now)
    put_lease(tx, new_lease)
    new_attempt = b["attempt"] | {"leaseVersion": new_lease["version"]}
    put_attempt(tx, new_attempt)
    tx.append_event(b["attemptEvent"])
    for m in b["stepMutations"]:
        put_mutation(tx, m)
    put_run(tx, b["run"])
    ctx.fire(T.lease_row("recover_attempt", "leased", "released").id)
    ctx.fire(T.attempt_row("recover_attempt", a["status"], "lost").id)
    if reason == "unstarted_claim_expired":
        ctx.fire(T.step_row("recover_attempt", "ready", "ready").id)
    elif a["status"] == "starting":
        ctx.fire(T.step_row("recover_attempt", "ready", "failed").id)
    else:
        ctx.fire(T.step_row("recover_attempt", "running", "lost").id)
        ctx.fire(T.step_row("recover_attempt", "lost", "failed").id)
    return {"status": b["disposition"], "attempt": canonical(new_attempt, ATTEMPT_KEYS)}, tx.commit()
