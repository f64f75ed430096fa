"""request_cancel, converge_cancellation and its page (commands.md §4.15, §4.17–§4.18;
cancellation.md §7–§8).
"""

from __future__ import annotations

from typing import Any

from . import ids
from . import messages as M
from . import tables as T
from .arguments import check_arguments, check_page
from .cancellation import (
    RULE_STEP_BLOCKED_ATTEMPT,
    accumulate_page,
    check_page_result,
    page_outcome,
    resolve_cancellation,
)
from .cmd_context import CommandContext, bump_run, ceiling, put_attempt, put_mutation, put_run
from .cmd_loads import check_lease_mirror, check_receipt, clock_floor, load_run, load_steps
from .cmd_queries import cancellation_candidate_rows
from .errors import Conflict, QlwfError
from .records import RUN_KEYS, Record, canonical, make_event
from .state import State, StateWriter


# ------------------------------------------------------------------------------------------------
# request_cancel (commands.md §4.15)
def request_cancel(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    loaded = load_run(state, ctx, args["runId"])
    run = loaded.run
    clock_floor(state, ctx, run["id"], [])

    def answer(status: str, r: Record) -> Record:
        return {"status": status, "runId": r["id"], "cancelRequestedAtMs": r["cancelRequestedAtMs"],
                "cancelReason": r["cancelReason"], "runVersion": r["version"]}

    if "cancelRequestedAtMs" in run:
        ctx.fire(T.decision("cancel_request.existing").id)
        return answer("existing", run), state
    if run["status"] != "running":
        raise ctx.conflict("run_terminal", M.run_is(run["status"]))
    ceiling(ctx, run["version"] + 1)
    now = ctx.now
    tx = StateWriter(state, now)
    new_run = bump_run(tx, run, 1) | {"cancelRequestedAtMs": now, "cancelReason": args["reason"]}
    tx.append_event(make_event(
        event_id=ids.cancel_request_event_id(run["id"], now, args["reason"]), run_id=run["id"],
        sequence=new_run["eventSequence"], type_="workflow.cancel_requested", actor=args["actor"],
        payload={"cancel_reason": args["reason"], "cancel_requested_at_ms": now, "version": new_run["version"]},
        created_at_ms=now))
    put_run(tx, new_run)
    ctx.fire(T.run_row("request_cancel", "running", "running").id)
    return answer("requested", canonical(new_run, RUN_KEYS)), tx.commit()


# ------------------------------------------------------------------------------------------------
# converge_cancellation (commands.md §4.17, cancellation.md §7)
def _converge(state: State, ctx: CommandContext, run_id: str) -> tuple[Record, State]:
    loaded = load_run(state, ctx, run_id)
    run = loaded.run
    if "cancelRequestedAtMs" not in run:
        raise ctx.conflict("not_cancelling", M.NO_CANCEL_INTENT)
    if run["status"] != "running":
        if run["status"] != T.CANCEL_REASON_TARGET[run["cancelReason"]].status:
            raise ctx.unavailable("terminal_drift", M.CANCEL_TERMINAL_DRIFT)
        ctx.fire(T.decision("converge.settled").id)
        return {"status": "settled", "runId": run["id"], "settledAttempts": 0, "stepMutationCount": 0,
                "blockedAttemptIds": [], "blockedStepRunIds": [], "terminalStatus": run["status"],
                "runVersion": run["version"], "runEventSequence": run["eventSequence"],
                "observedAtMs": ctx.now}, state
    steps = load_steps(state, ctx, loaded)
    active: list[Record] = []
    leases = []
    for a in sorted(state.attempts_of_run(run["id"]), key=lambda a: a["id"]):
        if a["status"] not in T.ACTIVE_ATTEMPT:
            continue
        receipt = check_receipt(ctx, a, state.receipts.get(a["id"]))
        lease = state.leases.get(a["id"])
        check_lease_mirror(ctx, a, lease)
        leases.append(lease)
        active.append({"admission": receipt, "attempt": a, "leaseStatus": lease["status"] if lease else None})
    clock_floor(state, ctx, run["id"], leases)
    explain: dict[str, str] = {}
    try:
        res = resolve_cancellation({"run": run, "stepRuns": steps, "activeTaskAttempts": active,
                                    "observedAtMs": ctx.now}, explain=explain)
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    for active_entry in active:
        fired = active_entry["attempt"]
        ctx.fire(T.cancel_attempt_id(fired["status"], active_entry["leaseStatus"]))
    timeout = run["cancelReason"] == "timeout"
    for s in steps:  # a StepRun held by a blocked attempt is decided before the table is read (§5)
        held = explain[s["id"]] == RULE_STEP_BLOCKED_ATTEMPT
        ctx.fire(T.decision("converge.step_held").id if held else T.cancel_step_id(s["status"], timeout))
    tx = StateWriter(state, ctx.now)
    for t in res["attemptTransitions"]:
        put_attempt(tx, t["attempt"])
        tx.append_event(t["event"])
        ctx.fire(T.attempt_row("converge_cancellation", "claimed", t["attempt"]["status"]).id)
    for m in res["stepMutations"]:
        put_mutation(tx, m)
        ctx.fire(T.step_row("converge_cancellation", m["previousStatus"], m["stepRun"]["status"]).id)
    terminal = res["terminalTransition"]
    if terminal:
        tx.append_event(terminal["event"])
        ctx.fire(T.run_row("converge_cancellation", "running", terminal["status"]).id)
    if res["run"]["version"] != run["version"] or res["run"]["status"] != run["status"]:
        put_run(tx, res["run"])
    status = "terminal" if terminal else "blocked"
    result = {"status": status, "runId": run["id"], "settledAttempts": len(res["attemptTransitions"]),
              "stepMutationCount": len(res["stepMutations"]), "blockedAttemptIds": res["blockedAttemptIds"],
              "blockedStepRunIds": res["blockedStepRunIds"],
              "terminalStatus": terminal["status"] if terminal else None, "runVersion": res["run"]["version"],
              "runEventSequence": res["run"]["eventSequence"], "observedAtMs": ctx.now}
    return result, tx.commit()


def converge_cancellation(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    return _converge(state, ctx, args["runId"])


def converge_cancellation_page(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    limit, after = check_page(ctx, args, "cancellation_candidates")
    rows = [row for key, row in cancellation_candidate_rows(state) if after is None or key > after][: limit + 1]
    outcomes = []
    current = state
    for row in rows[:limit]:
        sub = CommandContext("converge_cancellation", ctx.now, ctx.rules)
        try:
            result, current = _converge(current, sub, row["runId"])
        except QlwfError as e:
            if isinstance(e, Conflict) and e.reason == "run_missing":
                outcomes.append(page_outcome(row["runId"], "raced"))
            else:
                outcomes.append(page_outcome(row["runId"], "failed", error=e.to_json()))
            continue
        status = "raced" if result["status"] == "settled" else result["status"]
        outcomes.append(page_outcome(row["runId"], status, result))
    scanned, runs, attempts, blocked = accumulate_page(outcomes)
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = {"cancelRequestedAtMs": last["cancelRequestedAtMs"], "runId": last["runId"]}
    result = {"scanned": scanned, "settledRuns": runs, "settledAttempts": attempts, "blocked": blocked,
              "hasMore": bool(cancellation_candidate_rows(current)), "next": next_cursor, "outcomes": outcomes}
    check_page_result(limit, result)
    ctx.fire(T.decision("page").id)
    return result, current
