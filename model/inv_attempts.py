"""Attempts and leases: INV-19…INV-26 (state-machines.md §9)."""

from __future__ import annotations

import functools
from collections import Counter

from . import speedups
from . import tables as T
from .inv_view import RunView, SystemView, invariant, per_run
from .records import ATTEMPT_LEASE_KEYS, Record, lease_problem


# ------------------------------------------------------------------------------------------------
# Attempts
@invariant("INV-19", "At most one active attempt per StepRun", "ADR-0228 §3; ADR-0226 §4")
@per_run
def inv19(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        active = [a["id"] for a in rv.attempts_of_step(s["id"]) if a["status"] in T.ACTIVE_ATTEMPT]
        if len(active) > 1:
            out.append(f"StepRun {s['id']} has active attempts {active}")
        if active and rv.run["status"] != "running":
            out.append(f"active attempt {active} in a {rv.run['status']} Run")
    return out


@invariant("INV-20", "Attempt bookkeeping", "ADR-0226 §4 (ready epoch admission); D-12")
@per_run
def inv20(rv: RunView) -> list[str]:
    out = []
    receipts = [r for r in rv.state.receipts.values() if r["runId"] == rv.run["id"]]
    epochs = Counter((r["stepRunId"], r["stepRunVersion"]) for r in receipts)
    out += [f"epoch {k} admitted {n} times" for k, n in epochs.items() if n > 1]
    for a in rv.attempts:
        r = rv.state.receipts.get(a["id"])
        if r is None or (r["runId"], r["stepRunId"], r["attemptNumber"], r["executorType"], r["admittedAtMs"]) != (
                a["runId"], a["stepRunId"], a["attempt"], a["executorType"], a["createdAtMs"]):
            out.append(f"attempt {a['id']} has no matching receipt")
        admitted = [e for e in rv.events
                    if e["type"] == "workflow.task_attempt_admitted" and e.get("attemptId") == a["id"]]
        if len(admitted) != 1:
            out.append(f"attempt {a['id']} has {len(admitted)} admission events")
    order = sorted(rv.attempts, key=lambda a: next((e["sequence"] for e in rv.events
                                                     if e["type"] == "workflow.task_attempt_admitted"
                                                     and e.get("attemptId") == a["id"]), 0))
    numbers = [a["attempt"] for a in order]
    if numbers != list(range(1, len(numbers) + 1)) or len(numbers) > T.MAX_RUN_ATTEMPTS:
        out.append(f"attempt numbers {numbers} are not 1..n in admission order")
    return out


def _coupling_problem(rv: RunView, a: Record) -> str | None:
    """state-machines.md §7 for one attempt, or the broken row."""
    r = rv.state.receipts.get(a["id"])
    s = rv.state.step_runs.get(a["stepRunId"])
    if r is None or s is None:
        return "no receipt or StepRun"
    lease = rv.state.leases.get(a["id"])
    ls = lease["status"] if lease else None
    worker_released = ls == "released" and lease is not None and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS
    at_epoch = (s["status"] == "ready" and s["version"] == r["stepRunVersion"]
                and s["stepRunDigest"] == r["stepRunDigest"])
    st, cbs = a["status"], a["callbackSequence"]
    if st == "claimed":
        ok = (ls is None or worker_released or ls == "leased") and at_epoch and "startedAtMs" not in a and cbs == 0
    elif st == "starting":
        # §7: the starting row is "same as claimed", which includes "A.startedAtMs absent" (the start
        # barrier sets it only on starting -> running); this conjunct was missing.
        ok = ls == "leased" and at_epoch and "startedAtMs" not in a and cbs == 0
    elif st == "running":
        ok = (ls == "leased" and s["status"] == "running" and s["version"] == r["stepRunVersion"] + 1
              and s["startedAtMs"] == a.get("startedAtMs") and cbs == 1)
    elif st == "lost":
        if ls != "released" or lease is None or lease.get("releaseReason") != "lease_expired":
            return "lost attempt without a lease released as lease_expired"
        if a.get("errorCode") == "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED":
            ok = s["version"] > r["stepRunVersion"] and cbs == 0
        else:
            ok = (s["status"] == "failed" and s["resultCode"] == "cluster_recovery_execution_not_running"
                  and cbs == (1 if "startedAtMs" in a else 0))
    elif ls == "completed":  # worker path: fail_start (never started) or completion
        if "startedAtMs" in a:
            ok = (s["status"] == st and s["version"] == r["stepRunVersion"] + 2
                  and s["startedAtMs"] == a["startedAtMs"] and cbs == 1)
        else:
            ok = st != "succeeded" and s["status"] == st and s["version"] == r["stepRunVersion"] + 1 \
                and s["startedAtMs"] is None and cbs == 1
    else:  # settled by convergence
        ok = (st in ("cancelled", "timed_out") and (ls is None or worker_released) and s["status"] in T.TERMINAL_STEP
              and s["startedAtMs"] is None and cbs == 0)
    return None if ok else f"{st} attempt with lease {ls} and StepRun {s['status']} v{s['version']}"


@invariant("INV-21", "Attempt ↔ StepRun ↔ lease coupling", "ADR-0228 §3 (start barrier); ADR-0226 §4")
@per_run
def inv21(rv: RunView) -> list[str]:
    out = [f"attempt {a['id']}: {p}" for a in rv.attempts if (p := _coupling_problem(rv, a))]
    for s in rv.steps:
        of_step = rv.attempts_of_step(s["id"])
        running = [a for a in of_step if a["status"] == "running"]
        if s["status"] == "running" and len(running) != 1:
            out.append(f"running StepRun {s['id']} has {len(running)} running attempts")
        if s["status"] == "ready":
            active = [a for a in of_step if a["status"] in T.ACTIVE_ATTEMPT]
            if any(a["status"] == "running" for a in active):
                out.append(f"ready StepRun {s['id']} has a running attempt")
    return out


@invariant("INV-22", "No retry after the start barrier", "D-12; ADR-0228 §3")
@per_run
def inv22(rv: RunView) -> list[str]:
    out = []
    for s in rv.steps:
        attempts = rv.attempts_of_step(s["id"])
        for a in attempts[:-1]:
            if a["status"] != "lost" or a.get("errorCode") != "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED" \
                    or "startedAtMs" in a or "deadlineAtMs" in a:
                out.append(f"StepRun {s['id']}: attempt {a['id']} was retried after it crossed or ended")
        if sum(1 for a in attempts if rv.reached_starting(a["id"])) > 1:
            out.append(f"StepRun {s['id']}: more than one attempt reached starting")
    return out


@invariant("INV-23", "Convergence respects execution authority", "ADR-0228 §3; D-7")
@per_run
def inv23(rv: RunView) -> list[str]:
    out = []
    for a in rv.attempts:
        e = rv.terminal_attempt_event(a["id"])
        if e is not None and e["id"].startswith("wca:"):
            lease = rv.state.leases.get(a["id"])
            if "startedAtMs" in a or "deadlineAtMs" in a or (lease is not None and not (
                    lease["status"] == "released" and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS)):
                out.append(f"convergence settled attempt {a['id']} that held execution authority")
    for s in rv.steps:
        if s["lastMutationId"].startswith("wcm:"):
            ledger = rv.ledger_of_step(s["id"])
            prev = ledger[-2]["stepRun"]["status"] if len(ledger) > 1 else None
            if prev == "running" or any(rv.reached_starting(a["id"]) for a in rv.attempts_of_step(s["id"])):
                out.append(f"convergence terminalized StepRun {s['id']} that was executing")
    return out


# ------------------------------------------------------------------------------------------------
# Leases
@invariant("INV-24", "Lease and attempt agree", "ADR-0228 §3; D-7; D-10")
def inv24(view: SystemView) -> list[str]:
    out = []
    s = view.state
    for a in s.attempts.values():
        lease = s.leases.get(a["id"])
        if a["status"] in ("starting", "running") and (lease is None or lease["status"] != "leased"
                                                         or lease["workerId"] != a.get("workerId")):
            out.append(f"{a['status']} attempt {a['id']} without its leased lease")
    for aid, lease in s.leases.items():
        owner = s.attempts.get(aid)
        if owner is None:
            out.append(f"lease {aid} without attempt")
            continue
        st, reason = lease["status"], lease.get("releaseReason")
        if st == "leased" and owner["status"] not in T.ACTIVE_ATTEMPT:
            out.append(f"leased lease of {owner['status']} attempt {aid}")
        if st == "completed":
            rv = RunView(s, s.runs[owner["runId"]])
            e = rv.terminal_attempt_event(aid)
            if owner["status"] not in ("succeeded", "failed", "cancelled", "timed_out") or e is None \
                    or not e["id"].startswith("wxa:"):
                out.append(f"completed lease of attempt {aid} not ended by the worker path")
        if st == "released" and reason == "lease_expired" and owner["status"] != "lost":
            out.append(f"lease of {aid} expired-released but attempt is {owner['status']}")
        if st == "released" and reason in T.WORKER_RELEASE_REASONS and (
                owner["status"] not in ("claimed", "cancelled", "timed_out")
                or any(k in owner for k in ATTEMPT_LEASE_KEYS)):
            out.append(f"worker-released lease of {aid} with attempt {owner['status']} or lease keys")
    return out


@invariant("INV-25", "Lease mirrors on the attempt", "D-10; D-13")
def inv25(view: SystemView) -> list[str]:
    out = []
    for a in view.state.attempts.values():
        lease = view.state.leases.get(a["id"])
        if "workerId" in a:
            if lease is None or (a["workerId"], a["leaseGeneration"], a["leaseVersion"], a["leaseExpiresAtMs"]) != (
                    lease["workerId"], lease["leaseGeneration"], lease["version"], lease["expiresAtMs"]):
                out.append(f"attempt {a['id']} lease mirror disagrees with its lease")
        elif lease is not None and not (lease["status"] == "released"
                                        and lease.get("releaseReason") in T.WORKER_RELEASE_REASONS):
            out.append(f"attempt {a['id']} has no lease keys but lease is {lease['status']}")
    return out


@invariant("INV-26", "Lease shape", "D-13; records.md §6.8")
def inv26(view: SystemView) -> list[str]:
    out = []
    for aid, lease in view.state.leases.items():
        problem = speedups.reused("lease", (lease,), functools.partial(lease_problem, lease))
        if problem:
            out.append(f"lease {aid}: {problem}")
        elif not T.LEASE_DURATION_MIN_MS <= lease["expiresAtMs"] - lease["renewedAtMs"] <= T.LEASE_DURATION_MAX_MS:
            out.append(f"lease {aid}: duration outside 5000..600000")
    return out
