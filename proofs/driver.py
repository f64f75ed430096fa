"""A small seeded random driver of the executable model (one workflow per trace).

Arguments are drawn mostly from the current state (existing attempts, the current lease holder and
generation, ready steps) so that traces reach completions, recoveries and cancellations; a fraction
of the draws is deliberately wrong (other worker, stale generation, live lease for recovery, ...)
so that refusals are exercised too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from qlwf.model import tables as T
from qlwf.model.records import sign_plan
from qlwf.model.state import State
from qlwf.model.system import Outcome, advance_time, apply

PLAN_SCHEMA = T.SCHEMA_PLAN
WORKERS = ("w1", "w2")


def _digest(c: str) -> str:
    return c * 64


def make_plan(run_id: str, needs: list[list[int]], planned_at: int) -> dict[str, Any]:
    """A signed plan whose step i is `s<i>` and needs the steps listed in needs[i] (all < i)."""
    steps = []
    for i, ns in enumerate(needs):
        key = f"s{i}"
        steps.append({"stepRunId": f"sr-{run_id}-{key}", "stepKey": key, "taskId": key,
                      "taskDefinitionRef": f"plugin-package:{_digest('3')}:task:{key}",
                      "taskDefinitionDigest": _digest("6"), "needs": [f"s{j}" for j in ns],
                      "initialStatus": "pending" if ns else "ready", "required": True})
    return sign_plan({
        "schema": PLAN_SCHEMA, "planId": f"plan-{run_id}", "runId": run_id,
        "target": {"projectId": "proj-1", "packageName": "demo-pkg", "installationId": "inst-1",
                   "lockDigest": _digest("1"), "generation": 1, "generationDigest": _digest("2"),
                   "materializedRevisionDigest": _digest("3"), "publicationDigest": _digest("4"),
                   "workflowId": "nightly", "workflowDefinitionDigest": _digest("5")},
        "steps": steps, "plannedAtMs": planned_at})


def binding(key: str) -> dict[str, Any]:
    return {"resourceTaskId": key, "taskReconciliationReceiptDigest": _digest("8"),
            "taskId": f"pkg:demo-pkg:{key}", "taskRevision": "qltd:v1:1:" + _digest("9"),
            "taskDefinitionDigest": _digest("9"), "executorType": "remote_worker", "executionDigest": _digest("e")}


@dataclass
class TraceStep:
    """One step: a command (with its outcome) or a time advance."""

    name: str
    args: dict[str, Any]
    pre: State
    post: State
    outcome: Outcome | None


@dataclass
class Trace:
    run_id: str
    needs: list[list[int]]
    steps: list[TraceStep]


def random_dag(rng: random.Random, n: int) -> list[list[int]]:
    return [sorted(j for j in range(i) if rng.random() < 0.45) for i in range(n)]


class Driver:
    def __init__(self, seed: int, max_steps_per_trace: int = 40, max_steps: int = 5) -> None:
        self.rng = random.Random(seed)
        self.max_len = max_steps_per_trace
        self.max_n = max_steps

    # ---- argument choices ----------------------------------------------------------------------
    def _attempts(self, state: State, run_id: str, latest_bias: float = 0.9) -> list[dict[str, Any]]:
        atts = sorted(state.attempts_of_run(run_id), key=lambda a: a["attempt"])
        latest: dict[str, dict[str, Any]] = {}
        for a in atts:
            latest[a["stepRunId"]] = a
        pool = list(latest.values())
        if atts and (self.rng.random() > latest_bias or not pool):
            pool = atts
        return pool

    def _holder(self, state: State, attempt: dict[str, Any]) -> tuple[str, int]:
        lease = state.leases.get(attempt["id"])
        r = self.rng.random()
        if lease is None:
            return self.rng.choice(WORKERS), 1
        worker, gen = lease["workerId"], lease["leaseGeneration"]
        if r < 0.1:
            worker = next(w for w in WORKERS if w != worker)
        elif r < 0.17:
            gen = max(1, gen - 1) if gen > 1 else gen + 1
        return worker, gen

    def _smart(self, state: State, run_id: str, step_ids: list[str]) -> tuple[str, dict[str, Any]] | None:
        """An action that is likely to be accepted and to make progress."""
        rng = self.rng
        run = state.runs[run_id]
        intent = "cancelRequestedAtMs" in run
        options: list[tuple[str, dict[str, Any]]] = []
        if rng.random() < 0.4:
            options.append(("advance_time", {"deltaMs": rng.choice((1000, 4000, 11000))}))
        if run["status"] == "running":
            if intent:
                options += [("converge_cancellation", {"runId": run_id})] * 2
            else:
                options += [("advance_frontier", {"runId": run_id})] * 2
                if rng.random() < 0.25:
                    options.append(("request_cancel", {"runId": run_id, "reason": rng.choice(T.CANCEL_REASONS),
                                                       "actor": {"type": "system"}}))
        for sid in step_ids:
            s = state.step_runs[sid]
            if s["status"] == "ready" and not intent:
                options.append(("admit_task_attempt", {"runId": run_id, "stepRunId": sid,
                                                       "binding": binding(s["stepKey"])}))
        for a in self._attempts(state, run_id, latest_bias=1.0):
            lease = state.leases.get(a["id"])
            live = lease is not None and lease["status"] == "leased" and lease["expiresAtMs"] > state.clock
            expired = lease is not None and lease["status"] == "leased" and not live
            fence = {"attemptId": a["id"], "workerId": lease["workerId"] if lease else "w1",
                     "leaseGeneration": lease["leaseGeneration"] if lease else 1}
            if a["status"] == "claimed" and not live:
                options.append(("claim_lease", {"attemptId": a["id"], "workerId": rng.choice(WORKERS),
                                                "durationMs": 10000}))
            if a["status"] == "claimed" and live:
                options.append(("start_attempt", fence | {"timeoutMs": rng.choice((None, 500, 2000, 100000))}))
                if rng.random() < 0.2:
                    options.append(("release_lease", fence | {"reason": "declined"}))
            if a["status"] == "starting" and live:
                options += [("record_running", fence), ("complete_attempt", fence | {"exitCode": rng.choice((0, 1))})]
                if rng.random() < 0.5:
                    options.append(("fail_start", fence))
            if a["status"] == "running" and live:
                options += [("complete_attempt", fence | {"exitCode": rng.choice((0, 0, 1))}),
                            ("renew_lease", fence | {"durationMs": 10000})]
            if a["status"] in T.ACTIVE_ATTEMPT and expired:
                options.append(("recover_attempt", {"attemptId": a["id"],
                                                    "evidence": rng.choices(T.RECOVERY_EVIDENCE, (5, 1, 1))[0]}))
        return rng.choice(options) if options else ("advance_time", {"deltaMs": 4000})

    def _command(self, state: State, run_id: str, step_ids: list[str]) -> tuple[str, dict[str, Any]] | None:
        rng = self.rng
        if rng.random() < 0.7:
            return self._smart(state, run_id, step_ids)
        run = state.runs[run_id]
        names = ["advance_frontier", "admit_task_attempt", "claim_lease", "renew_lease", "release_lease",
                 "start_attempt", "record_running", "fail_start", "complete_attempt", "recover_attempt",
                 "request_cancel", "converge_cancellation", "converge_cancellation_page", "advance_time",
                 "frontier_candidates", "task_candidates", "recovery_candidates", "cancellation_candidates"]
        weights = [8, 10, 10, 4, 3, 8, 7, 3, 7, 6, 2, 5, 1, 9, 1, 1, 1, 1]
        if "cancelRequestedAtMs" in run:
            weights[names.index("converge_cancellation")] = 8
        name = rng.choices(names, weights)[0]
        if name == "advance_time":
            return name, {"deltaMs": rng.choice((0, 1000, 3000, 6000, 12000, 30000))}
        if name in ("advance_frontier", "converge_cancellation"):
            return name, {"runId": run_id}
        if name == "converge_cancellation_page":
            return name, {"limit": rng.choice((1, 5))}
        if name.endswith("_candidates"):
            return name, {"limit": 64}
        if name == "request_cancel":
            return name, {"runId": run_id, "reason": rng.choice(T.CANCEL_REASONS),
                          "actor": {"type": "user", "id": "u1"}}
        if name == "admit_task_attempt":
            ready = [s for s in step_ids if state.step_runs[s]["status"] == "ready"]
            sid = rng.choice(ready if ready and rng.random() < 0.9 else step_ids)
            return name, {"runId": run_id, "stepRunId": sid, "binding": binding(state.step_runs[sid]["stepKey"])}
        pool = self._attempts(state, run_id)
        if not pool:
            return None
        a = rng.choice(pool)
        if name == "claim_lease":
            return name, {"attemptId": a["id"], "workerId": rng.choice(WORKERS),
                          "durationMs": rng.choice((5000, 10000))}
        if name == "recover_attempt":
            return name, {"attemptId": a["id"], "evidence": rng.choices(T.RECOVERY_EVIDENCE, (6, 1, 1))[0]}
        worker, gen = self._holder(state, a)
        args: dict[str, Any] = {"attemptId": a["id"], "workerId": worker, "leaseGeneration": gen}
        if name == "renew_lease":
            args["durationMs"] = rng.choice((5000, 10000))
        elif name == "release_lease":
            args["reason"] = rng.choice(T.WORKER_RELEASE_REASONS[:2])
        elif name == "start_attempt":
            args["timeoutMs"] = rng.choice((None, None, 2000, 100000))
        elif name == "complete_attempt":
            args["exitCode"] = rng.choice((0, 0, 1))
        return name, args

    # ---- traces --------------------------------------------------------------------------------
    def trace(self, index: int) -> Trace:
        rng = self.rng
        n = rng.randint(1, self.max_n)
        needs = random_dag(rng, n)
        run_id = f"run-{index:04d}"
        plan = make_plan(run_id, needs, 1000)
        state = State(clock=1000)
        out = apply(state, {"name": "admit_workflow", "args": {"plan": plan}})
        if not out.ok:
            raise ValueError(f"the driver's own admission failed: {out.error}")
        steps = [TraceStep("admit_workflow", {"plan": plan}, state, out.state, out)]
        state = out.state
        step_ids = [p["stepRunId"] for p in plan["steps"]]
        for _ in range(self.max_len):
            choice = self._command(state, run_id, step_ids)
            if choice is None:
                continue
            name, args = choice
            if name == "advance_time":
                post = advance_time(state, args["deltaMs"])
                steps.append(TraceStep(name, args, state, post, None))
                state = post
                continue
            out = apply(state, {"name": name, "args": args})
            steps.append(TraceStep(name, args, state, out.state, out))
            state = out.state
        return Trace(run_id, needs, steps)

    def traces(self, count: int) -> Iterator[Trace]:
        for i in range(count):
            yield self.trace(i)
