"""Boundary traces: each one walks every boundary of conformance/generate/boundaries.py, then goes on at random.

The scenarios run on fresh workflows of their own, in an order the chooser draws, with random steps
of the ordinary generator between them (never inside one: a scenario needs exact clock offsets).
Limits that no v1 command sequence reaches (attemptCount 63 and 64, attempt number 8191, counters at
2^31−2 and 2^31−1)
are set by a drift step that also re-signs the records it touches (stepRunDigest, receiptDigest), so
the stored state stays consistent and the command meets the limit check itself, not a drift check.
"""

from __future__ import annotations

from typing import Any

from qlwf.conformance.generate import plans
from qlwf.conformance.generate.base import Chooser, Generator, GeneratorConfig, RandomChooser
from qlwf.conformance.traces.drift_mirror import apply_patch
from qlwf.conformance.traces.format import Trace, advance, corruption
from qlwf.model import tables as T
from qlwf.model.records import Record, plan_digest, step_run_digest, task_receipt_digest
from qlwf.model.values import INT31_MAX

M = INT31_MAX
# Scenario outcomes the boundaries need; the last step of each checks nothing (the lockstep harness does).
LONG_LEASE = 60_000


class BoundaryGenerator(Generator):
    def __init__(self, chooser: Chooser, config: GeneratorConfig, description: str) -> None:
        super().__init__(chooser, config, description)
        self.fresh_count = 0
        self.tag = ""

    # ---- helpers --------------------------------------------------------------------------------
    def wait(self, delta: int) -> None:
        self.emit(advance(delta))

    def corrupt(self, kind: str, key: str, patch: Record) -> None:
        """A drift step; StepRuns and task receipts are re-signed so only the patched values differ."""
        table = {"stepRuns": self.state.step_runs, "taskReceipts": self.state.receipts}.get(kind)
        if table is not None:
            patched = apply_patch(kind, table[key], patch)
            if kind == "stepRuns":
                patch = patch | {"stepRunDigest": step_run_digest(patched)}
            else:
                patch = patch | {"receiptDigest": task_receipt_digest(patched)}
        self.emit(corruption(kind, [key], patch))

    def fresh(self, needs: dict[str, list[str]] | None = None, generation: int = 1) -> str:
        """Admit a new workflow of its own; its runId."""
        self.fresh_count += 1
        run_id = f"run-b{self.tag}-{self.fresh_count}"
        plan = plans.make_plan(run_id, f"plan-b{self.tag}-{self.fresh_count}", needs or {"a": []},
                               self.state.clock - self.c.integer(0, 1000))
        if generation != 1:
            plan = resigned_plan(plan, target=plan["target"] | {"generation": generation})
        self.admitted.append(plan)
        self.run_command("admit_workflow", {"plan": plan})
        return run_id

    def attempt(self, run_id: str, key: str = "a") -> str:
        binding, evidence = self.admission(run_id, key, self.pick(T.EXECUTOR_TYPES))
        out = self.admit_task(run_id, plans.step_run_id(run_id, key), binding, evidence)
        assert out.result is not None, out.error  # out.ok: an outcome without an error carries its result
        return str(out.result["attempt"]["id"])

    def fence(self, attempt_id: str) -> Record:
        lease = self.state.leases[attempt_id]
        return {"attemptId": attempt_id, "workerId": lease["workerId"], "leaseGeneration": lease["leaseGeneration"]}

    def claim(self, attempt_id: str, worker: str = "w1", duration: int = LONG_LEASE) -> None:
        self.run_command("claim_lease", {"attemptId": attempt_id, "workerId": worker, "durationMs": duration})

    def started(self, run_id: str, key: str = "a", timeout: int | None = None) -> str:
        """An attempt of a fresh epoch, claimed (long lease) and started."""
        aid = self.attempt(run_id, key)
        self.claim(aid)
        self.run_command("start_attempt", self.fence(aid) | {"timeoutMs": timeout})
        return aid

    def worker_command(self, attempt_id: str) -> None:
        """One fenced command whose outcome depends on whether the lease is live."""
        if self.c.integer(0, 1):
            self.run_command("renew_lease", self.fence(attempt_id) | {"durationMs": self.pick((5000, 10000))})
        else:
            self.run_command("start_attempt", self.fence(attempt_id) | {"timeoutMs": None})

    # ---- scenarios ------------------------------------------------------------------------------
    def page_limits(self) -> None:
        queries = [*T.QUERY_PAGES, "converge_cancellation_page"]
        for q in [queries[i] for i in self.order(len(queries))]:
            top = T.MAX_CANCELLATION_PAGE if q == "converge_cancellation_page" else T.QUERY_PAGES[q][0]
            for limit in [(1, top, top + 1)[i] for i in self.order(3)]:
                self.run_command(q, {"limit": limit})

    def lease_expiry(self) -> None:
        run_id = self.fresh()
        duration = self.pick((5000, 10000))
        aid = self.attempt(run_id)
        self.claim(aid, duration=duration)
        self.wait(duration - 1)
        self.run_command("renew_lease", self.fence(aid) | {"durationMs": duration})  # live: expires in 1 ms
        self.wait(duration - 1)
        self.run_command("recover_attempt", {"attemptId": aid, "evidence": "not_running"})  # lease_live
        self.wait(1)  # now = expiresAtMs: expired
        self.worker_command(aid)
        self.run_command("recovery_candidates", {"limit": self.c.integer(1, 3)})
        self.run_command("recover_attempt", {"attemptId": aid, "evidence": self.pick(T.RECOVERY_EVIDENCE)})
        again = self.attempt(run_id)  # the unstarted claim was requeued: a new epoch
        self.claim(again, "w2", duration)
        self.wait(duration + 1)
        self.worker_command(again)
        self.run_command("recover_attempt", {"attemptId": again, "evidence": "not_running"})

    def task_deadline(self) -> None:
        timeout = self.pick((1000, 2000))
        aid = self.started(self.fresh(), timeout=timeout)
        self.wait(timeout - 1)
        self.run_command("renew_lease", self.fence(aid) | {"durationMs": LONG_LEASE})
        self.wait(1)
        self.run_command("renew_lease", self.fence(aid) | {"durationMs": LONG_LEASE})  # stop_requested / timeout
        self.wait(1)
        self.run_command("complete_attempt", self.fence(aid) | {"exitCode": self.pick((0, 1))})

    def attempt_budget(self) -> None:
        last = self.fresh()
        self.corrupt("stepRuns", plans.step_run_id(last, "a"), {"attemptCount": T.MAX_STEP_RUN_ATTEMPTS - 1})
        aid = self.started(last)
        self.run_command("record_running", self.fence(aid))  # attemptCount 63 → 64
        self.run_command("complete_attempt", self.fence(aid) | {"exitCode": 0})
        refused = self.fresh()
        self.corrupt("stepRuns", plans.step_run_id(refused, "a"), {"attemptCount": T.MAX_STEP_RUN_ATTEMPTS})
        self.run_command("task_candidates", {"limit": self.c.integer(1, 3)})
        self.admit_task(refused, plans.step_run_id(refused, "a"), *self.admission(refused, "a"))
        running = self.fresh()
        aid = self.started(running)
        step_id = plans.step_run_id(running, "a")
        self.corrupt("stepRuns", step_id, {"attemptCount": T.MAX_STEP_RUN_ATTEMPTS})
        self.corrupt("taskReceipts", aid, {"stepRunDigest": self.state.step_runs[step_id]["stepRunDigest"]})
        self.run_command("record_running", self.fence(aid))  # attempts_exhausted

    def attempt_numbers(self) -> None:
        """The Run's last attempt number is given, the next is refused (the first attempt's number, and its
        re-signed receipt, drift to 8191 so the Run looks as if it had used them all but one)."""
        run_id = self.fresh({"a": [], "b": [], "c": []})
        first = self.attempt(run_id, "a")
        self.corrupt("attempts", first, {"attempt": T.MAX_RUN_ATTEMPTS - 1})
        self.corrupt("taskReceipts", first, {"attemptNumber": T.MAX_RUN_ATTEMPTS - 1})
        self.attempt(run_id, "b")  # number 8192
        # attempt_numbers_exhausted
        self.admit_task(run_id, plans.step_run_id(run_id, "c"), *self.admission(run_id, "c"))

    def run_counter(self) -> None:
        run_id = self.fresh({"a": [], "b": ["a"]})
        below = M - 1
        self.corrupt("runs", run_id, {"version": below, "eventSequence": below})
        aid = self.attempt(run_id)  # Run + 1: the ceiling
        self.claim(aid)  # counter_overflow

    def lease_counters(self) -> None:
        aid = self.attempt(self.fresh())
        self.claim(aid)
        self.corrupt("leases", aid, {"version": M - 1})
        self.corrupt("attempts", aid, {"leaseVersion": M - 1})
        self.run_command("renew_lease", self.fence(aid) | {"durationMs": LONG_LEASE})  # version M
        self.run_command("renew_lease", self.fence(aid) | {"durationMs": LONG_LEASE})  # counter_overflow
        aid = self.attempt(self.fresh())
        self.claim(aid)
        self.corrupt("leases", aid, {"leaseGeneration": M - 1})
        self.corrupt("attempts", aid, {"leaseGeneration": M - 1})
        self.run_command("release_lease", self.fence(aid) | {"reason": self.pick(T.WORKER_RELEASE_REASONS)})
        self.claim(aid, "w2")  # generation M
        self.run_command("release_lease", self.fence(aid) | {"reason": "declined"})
        self.claim(aid, "w1")  # counter_overflow

    def step_counter(self) -> None:
        run_id = self.fresh({"a": [], "b": ["a"]})
        b = plans.step_run_id(run_id, "b")
        self.corrupt("stepRuns", b, {"version": M - 1})
        aid = self.started(run_id)
        self.run_command("complete_attempt", self.fence(aid) | {"exitCode": 0})
        self.run_command("advance_frontier", {"runId": run_id})  # b: pending → ready at version M
        aid = self.started(run_id, "b")
        self.run_command("record_running", self.fence(aid))  # b cannot move past M

    def callback_counter(self) -> None:
        run_id = self.fresh()
        aid = self.attempt(run_id)
        self.corrupt("attempts", aid, {"callbackSequence": M - 1})
        self.claim(aid)
        self.run_command("start_attempt", self.fence(aid) | {"timeoutMs": None})
        self.run_command("record_running", self.fence(aid))  # callbackSequence M
        self.run_command("complete_attempt", self.fence(aid) | {"exitCode": self.pick((0, 1))})  # from running: + 0
        refused = self.attempt(self.fresh())
        self.corrupt("attempts", refused, {"callbackSequence": M})
        self.claim(refused)
        self.run_command("start_attempt", self.fence(refused) | {"timeoutMs": None})
        # record_running or a completion from starting would write M + 1: counter_overflow
        name = self.pick(("record_running", "complete_attempt", "fail_start"))
        self.run_command(name, self.fence(refused) | ({"exitCode": 0} if name == "complete_attempt" else {}))

    def plan_generation(self) -> None:
        self.fresh(generation=M)
        self.fresh_count += 1
        plan = plans.make_plan(f"run-b{self.tag}-{self.fresh_count}", f"plan-b{self.tag}-{self.fresh_count}",
                               {"a": []}, self.state.clock)
        self.run_command("admit_workflow", {"plan": resigned_plan(plan, target=plan["target"] | {"generation": M + 1})})

    def step_limit(self) -> None:
        keys = [f"s{j:03d}" for j in range(T.MAX_WORKFLOW_STEPS + 1)]
        # chains of 8: 16 steps ready at admission, the rest pending behind their predecessor
        needs = {k: ([] if j % 8 == 0 else [keys[j - 1]]) for j, k in enumerate(keys)}
        over = dict(needs)
        del needs[keys[-1]]
        run_id = self.fresh(needs)
        self.run_command("task_candidates", {"limit": T.QUERY_PAGES["task_candidates"][0]})
        if self.c.integer(0, 1):
            self.run_command("request_cancel", {"runId": run_id, "reason": self.pick(T.CANCEL_REASONS),
                                                "actor": {"type": "system"}})
            self.run_command("converge_cancellation", {"runId": run_id})  # 128 StepRuns in one transaction
        self.fresh_count += 1
        plan = plans.make_plan(f"run-b{self.tag}-{self.fresh_count}", f"plan-b{self.tag}-{self.fresh_count}",
                               {"a": []}, self.state.clock)
        steps = [{**plan["steps"][0], "stepKey": k, "taskId": k, "stepRunId": plans.step_run_id(plan["runId"], k),
                  "needs": over[k], "initialStatus": "pending" if over[k] else "ready"} for k in keys]
        self.run_command("admit_workflow", {"plan": resigned_plan(plan, steps=steps)})  # 129 steps: plan_invalid

    def order(self, n: int) -> list[int]:
        """A permutation of range(n) drawn from the chooser."""
        rest, out = list(range(n)), []
        while rest:
            out.append(rest.pop(self.c.integer(0, len(rest) - 1)))
        return out

    def run(self, seed_tag: str) -> Trace:
        self.tag = seed_tag
        self.build_plans(seed_tag)
        scenarios = [self.page_limits, self.lease_expiry, self.task_deadline, self.attempt_budget, self.attempt_numbers,
                     self.run_counter,
                     self.lease_counters, self.step_counter, self.callback_counter, self.plan_generation]
        for i in self.order(len(scenarios)):
            for _ in range(self.c.integer(0, 3)):
                self.one()
            scenarios[i]()
        for _ in range(self.c.integer(2, 6)):
            self.one()
        while len(self.steps) < self.config.steps[0] - 5:
            self.one()
        self.step_limit()  # last: its 128 StepRuns make every later snapshot and invariant check costlier
        return self.trace()


def resigned_plan(plan: Record, **changes: Any) -> Record:
    """`plan` with `changes`, its planDigest recomputed but NOT normalized (so it may break a limit)."""
    body = {k: v for k, v in plan.items() if k != "planDigest"} | changes
    return body | {"planDigest": plan_digest(body)}


def generate_boundary(seed: int, config: GeneratorConfig | None = None) -> Trace:
    g = BoundaryGenerator(RandomChooser(seed), config or GeneratorConfig(), f"generated-boundary-{seed}")
    return g.run(str(seed))
