"""advance_frontier (commands.md §4.3).
"""

from __future__ import annotations

from typing import Any

from . import messages as M
from . import tables as T
from .arguments import check_arguments
from .cmd_context import CommandContext, bump_run, ceiling, put_mutation, put_run
from .cmd_loads import clock_floor, load_run, load_steps
from .errors import QlwfError
from .frontier import resolve_frontier
from .records import Record
from .state import State, StateWriter


def advance_frontier(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
    check_arguments(ctx, args, ctx.now)
    loaded = load_run(state, ctx, args["runId"])
    run = loaded.run
    if "cancelRequestedAtMs" in run:
        raise ctx.conflict("cancellation_requested", M.CANCEL_INTENT)
    steps = load_steps(state, ctx, loaded)
    clock_floor(state, ctx, run["id"], [])
    try:
        res = resolve_frontier({"plan": loaded.plan, "run": {**run, "status": "running"}, "stepRuns": steps,
                                "observedAtMs": ctx.now})
    except QlwfError as e:
        raise ctx.unavailable("resolution_failed", e.message) from e
    base = {"runId": run["id"], "planDigest": loaded.plan["planDigest"]}
    mutations = res["stepMutations"]
    if run["status"] != "running":
        if mutations or res["terminalStatus"] != run["status"]:
            raise ctx.unavailable("terminal_drift", M.FRONTIER_TERMINAL_DRIFT)
        ctx.fire(T.decision("frontier.settled").id)
        return {"status": "settled", **base, "stepMutationCount": 0, "readyStepRunIds": [],
                "terminalStatus": run["status"], "runVersion": run["version"],
                "runEventSequence": run["eventSequence"], "observedAtMs": ctx.now}, state
    terminal = res["terminalTransition"]
    increment = len(mutations) + (1 if terminal else 0)
    if increment == 0:
        ctx.fire(T.decision("frontier.unchanged").id)
        return {"status": "unchanged", **base, "stepMutationCount": 0, "readyStepRunIds": res["readyStepRunIds"],
                "terminalStatus": None, "runVersion": run["version"], "runEventSequence": run["eventSequence"],
                "observedAtMs": ctx.now}, state
    ceiling(ctx, run["version"] + increment)
    tx = StateWriter(state, ctx.now)
    for m in mutations:
        put_mutation(tx, m)
        ctx.fire(T.step_row("advance_frontier", m["previousStatus"], m["stepRun"]["status"]).id)
    new_run = bump_run(tx, run, increment)
    if terminal:
        new_run["status"] = terminal["status"]
        new_run["finishedAtMs"] = ctx.now
        if terminal["errorCode"] is not None:
            new_run["errorCode"] = terminal["errorCode"]
        tx.append_event(terminal["event"])
        ctx.fire(T.run_row("advance_frontier", "running", terminal["status"]).id)
    put_run(tx, new_run)
    status = "terminal" if terminal else "advanced"
    return {"status": status, **base, "stepMutationCount": len(mutations),
            "readyStepRunIds": [] if terminal else res["readyStepRunIds"],
            "terminalStatus": terminal["status"] if terminal else None, "runVersion": new_run["version"],
            "runEventSequence": new_run["eventSequence"], "observedAtMs": ctx.now}, tx.commit()
