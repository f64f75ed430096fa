"""advance_frontier (commands.md §4.3, frontier.md §4, §6)."""

from __future__ import annotations

from typing import Any

from qlwf.model import messages as M
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.frontier import resolve_frontier
from qlwf.model.records import Record
from qlwf.model.steprun import ledger_entry

from . import arguments, locks
from .context import StoreTx
from .store import Store


def prepare(fail: CommandErrors, args: Any) -> dict[str, Any]:
    return arguments.command(fail, args)


def lock(store: Store, fail: CommandErrors, args: dict[str, Any]) -> None:
    locks.run_scope(store, args["runId"], all_steps=True)


def run(tx: StoreTx, args: dict[str, Any]) -> Record:
    store, fail, now = tx.store, tx.fail, tx.now
    loaded = tx.loads.run(args["runId"])
    run = loaded.run
    if "cancelRequestedAtMs" in run:
        raise fail.conflict("cancellation_requested", M.CANCEL_INTENT)
    steps = tx.loads.steps(loaded)
    tx.loads.clock_floor(run["id"], [], now)
    try:
        res = resolve_frontier({"plan": loaded.plan, "run": {**run, "status": "running"}, "stepRuns": steps,
                                "observedAtMs": now})
    except QlwfError as e:
        raise fail.unavailable("resolution_failed", e.message) from e
    base = {"runId": run["id"], "planDigest": loaded.plan["planDigest"]}
    mutations = res["stepMutations"]
    if run["status"] != "running":
        if mutations or res["terminalStatus"] != run["status"]:
            raise fail.unavailable("terminal_drift", M.FRONTIER_TERMINAL_DRIFT)
        return {"status": "settled", **base, "stepMutationCount": 0, "readyStepRunIds": [],
                "terminalStatus": run["status"], "runVersion": run["version"],
                "runEventSequence": run["eventSequence"], "observedAtMs": now}
    terminal = res["terminalTransition"]
    increment = len(mutations) + (1 if terminal else 0)
    if increment == 0:
        return {"status": "unchanged", **base, "stepMutationCount": 0, "readyStepRunIds": res["readyStepRunIds"],
                "terminalStatus": None, "runVersion": run["version"], "runEventSequence": run["eventSequence"],
                "observedAtMs": now}
    tx.ceiling(run["version"] + increment)
    new_run = dict(run)
    new_run["version"] = run["version"] + increment
    new_run["eventSequence"] = run["eventSequence"] + increment
    if terminal:
        new_run["status"] = terminal["status"]
        new_run["finishedAtMs"] = now
        if terminal["errorCode"] is not None:
            new_run["errorCode"] = terminal["errorCode"]
    # storage.md §4: StepRun CAS per mutation; Run CAS once; events and ledger entries; terminal event last.
    for m in mutations:
        store.cas_step_run(m)
    store.cas_run("frontier", run, new_run)
    for m in mutations:
        store.insert_event(m["event"])
        store.insert_mutation(ledger_entry(m, now))
    if terminal:
        store.insert_event(terminal["event"])
    return {"status": "terminal" if terminal else "advanced", **base, "stepMutationCount": len(mutations),
            "readyStepRunIds": [] if terminal else res["readyStepRunIds"],
            "terminalStatus": terminal["status"] if terminal else None, "runVersion": new_run["version"],
            "runEventSequence": new_run["eventSequence"], "observedAtMs": now}
