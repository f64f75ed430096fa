"""request_cancel and cancellation convergence (commands.md §4.15, §4.17; cancellation.md §2–§7)."""

from __future__ import annotations

from typing import Any

from qlwf.model import ids
from qlwf.model import messages as M
from qlwf.model import tables as T
from qlwf.model.cancellation import resolve_cancellation
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.records import RUN_KEYS, Record, canonical, make_event
from qlwf.model.steprun import ledger_entry

from . import arguments, locks
from .context import StoreTx
from .store import Store


def prepare_request(fail: CommandErrors, args: Any) -> dict[str, Any]:
    return arguments.command(fail, args)


def lock_request(store: Store, fail: CommandErrors, args: dict[str, Any]) -> None:
    locks.run_scope(store, args["runId"])


def request_cancel(tx: StoreTx, args: dict[str, Any]) -> Record:
    fail, now = tx.fail, tx.now
    loaded = tx.loads.run(args["runId"])
    run = loaded.run
    tx.loads.clock_floor(run["id"], [], now)

    def answer(status: str, r: Record) -> Record:
        return {"status": status, "runId": r["id"], "cancelRequestedAtMs": r["cancelRequestedAtMs"],
                "cancelReason": r["cancelReason"], "runVersion": r["version"]}

    if "cancelRequestedAtMs" in run:
        return answer("existing", run)  # whatever the new reason, actor or Run status (S-9)
    if run["status"] != "running":
        raise fail.conflict("run_terminal", M.run_is(run["status"]))
    tx.ceiling(run["version"] + 1)
    new_run = canonical(run | {"version": run["version"] + 1, "eventSequence": run["eventSequence"] + 1,
                               "cancelRequestedAtMs": now, "cancelReason": args["reason"]}, RUN_KEYS)
    event = make_event(
        event_id=ids.cancel_request_event_id(run["id"], now, args["reason"]), run_id=run["id"],
        sequence=new_run["eventSequence"], type_="workflow.cancel_requested", actor=args["actor"],
        payload={"cancel_reason": args["reason"], "cancel_requested_at_ms": now, "version": new_run["version"]},
        created_at_ms=now)
    # storage.md §4: Run CAS; event.
    tx.store.cas_run("cancel_request", run, new_run)
    tx.store.insert_event(event)
    return answer("requested", new_run)


def prepare_converge(fail: CommandErrors, args: Any) -> dict[str, Any]:
    return arguments.command(fail, args)


def lock_converge(store: Store, fail: CommandErrors, args: dict[str, Any]) -> None:
    locks.convergence_scope(store, fail, args["runId"])


def converge_cancellation(tx: StoreTx, args: dict[str, Any]) -> Record:
    return converge(tx, args["runId"])


def converge(tx: StoreTx, run_id: str) -> Record:
    """One workflow in one transaction (cancellation.md §7)."""
    store, fail, loads, now = tx.store, tx.fail, tx.loads, tx.now
    loaded = loads.run(run_id)
    run = loaded.run
    if "cancelRequestedAtMs" not in run:
        raise fail.conflict("not_cancelling", M.NO_CANCEL_INTENT)
    if run["status"] != "running":
        if run["status"] != T.CANCEL_REASON_TARGET[run["cancelReason"]].status:
            raise fail.unavailable("terminal_drift", M.CANCEL_TERMINAL_DRIFT)
        return {"status": "settled", "runId": run["id"], "settledAttempts": 0, "stepMutationCount": 0,
                "blockedAttemptIds": [], "blockedStepRunIds": [], "terminalStatus": run["status"],
                "runVersion": run["version"], "runEventSequence": run["eventSequence"], "observedAtMs": now}
    steps = loads.steps(loaded)
    active: list[Record] = []
    leases = []
    for a in store.active_attempts_of_run(run["id"]):
        receipt = loads.receipt(a)
        lease = store.lease(a["id"])
        loads.lease_mirror(a, lease)
        leases.append(lease)
        active.append({"admission": receipt, "attempt": a, "leaseStatus": lease["status"] if lease else None})
    loads.clock_floor(run["id"], leases, now)
    try:
        res = resolve_cancellation({"run": run, "stepRuns": steps, "activeTaskAttempts": active,
                                    "observedAtMs": now})
    except QlwfError as e:
        raise fail.unavailable("resolution_failed", e.message) from e
    by_id = {entry["attempt"]["id"]: entry["attempt"] for entry in active}
    # cancellation.md §7: attempt CAS + event each; StepRun CAS + event + ledger entry each;
    # terminal event; Run CAS last.
    for t in res["attemptTransitions"]:
        store.cas_attempt_convergence(by_id[t["attempt"]["id"]], t["attempt"])
        store.insert_event(t["event"])
    for m in res["stepMutations"]:
        store.cas_step_run(m)
        store.insert_event(m["event"])
        store.insert_mutation(ledger_entry(m, now))
    terminal = res["terminalTransition"]
    if terminal:
        store.insert_event(terminal["event"])
    if res["run"]["version"] != run["version"] or res["run"]["status"] != run["status"]:
        store.cas_run("convergence", run, res["run"])
    return {"status": "terminal" if terminal else "blocked", "runId": run["id"],
            "settledAttempts": len(res["attemptTransitions"]), "stepMutationCount": len(res["stepMutations"]),
            "blockedAttemptIds": res["blockedAttemptIds"], "blockedStepRunIds": res["blockedStepRunIds"],
            "terminalStatus": terminal["status"] if terminal else None, "runVersion": res["run"]["version"],
            "runEventSequence": res["run"]["eventSequence"], "observedAtMs": now}
