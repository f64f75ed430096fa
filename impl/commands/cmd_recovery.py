"""recover_attempt (commands.md §4.14, task-attempts.md §8–§9; D-2)."""

from __future__ import annotations

from typing import Any

from qlwf.model import messages as M
from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.records import ATTEMPT_KEYS, LEASE_KEYS, Record, canonical
from qlwf.model.recovery import build_task_recovery
from qlwf.model.steprun import ledger_entry

from . import arguments, locks
from .context import StoreTx
from .store import Store


def prepare(fail: CommandErrors, args: Any) -> dict[str, Any]:
    return arguments.command(fail, args)


def lock(store: Store, fail: CommandErrors, args: dict[str, Any]) -> None:
    locks.attempt_scope(store, args["attemptId"])


def run(tx: StoreTx, args: dict[str, Any]) -> Record:
    fail, now = tx.fail, tx.now
    la = tx.loads.attempt(args["attemptId"])
    tx.loads.clock_floor(la.attempt["runId"], [la.lease], now)
    a, lease, run = la.attempt, la.lease, la.loaded.run
    if a["status"] not in T.ACTIVE_ATTEMPT:
        raise fail.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))
    if lease is None or lease["status"] != "leased":
        raise fail.conflict("not_leased", M.NOT_LEASED)
    if lease["expiresAtMs"] > now:
        raise fail.conflict("lease_live", M.LEASE_LIVE)
    if a["status"] == "claimed":
        reason = "unstarted_claim_expired"  # evidence is not consulted for an unstarted claim
    elif args["evidence"] == "running":
        return {"status": "retry", "attempt": a}
    elif args["evidence"] == "unknown":
        return {"status": "manual", "attempt": a}
    else:
        reason = "execution_not_running"
    try:
        b = build_task_recovery({"admission": la.receipt, "run": run, "attempt": a, "stepRun": la.step,
                                 "reason": reason, "observedAtMs": now})
    except QlwfError as e:
        raise fail.unavailable("resolution_failed", e.message) from e
    new_lease = canonical(lease | {"status": "released", "version": lease["version"] + 1, "releasedAtMs": now,
                                   "releaseReason": "lease_expired", "updatedAtMs": now}, LEASE_KEYS)
    tx.ceiling(new_lease["version"], b["run"]["version"])
    new_attempt = canonical(b["attempt"] | {"leaseVersion": new_lease["version"]}, ATTEMPT_KEYS)
    # storage.md §4: lease CAS; attempt CAS; StepRun CAS(es); Run CAS; attempt event; step events
    # and ledger entries in sequence order.
    tx.store.cas_lease(lease, new_lease)
    tx.store.cas_attempt(a, new_attempt)
    for m in b["stepMutations"]:
        tx.store.cas_step_run(m)
    tx.store.cas_run("counters_any_intent", run, b["run"])
    tx.store.insert_event(b["attemptEvent"])
    for m in b["stepMutations"]:
        tx.store.insert_event(m["event"])
        tx.store.insert_mutation(ledger_entry(m, now))
    return {"status": b["disposition"], "attempt": new_attempt}
