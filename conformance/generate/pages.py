"""Page traces: convergence sweeps over several cancelling workflows, some blocked, one perhaps drifted.

What the ordinary generator reaches only by luck (cancellation.md §8, D-6): a page whose
workflows include a drifted one next to healthy ones (a whole-page transaction would then fail the
page for ever), pages resumed from a cursor while a blocked cancelling Run sorts before it (a scan
that ignores the cursor would starve the Runs after it), and pages of size 1. Each trace admits
its workflows, leases some attempts so their Runs stay blocked, records intent on most of them
(blocked ones first, some at the same millisecond so the runId breaks the tie), may drift one, and
then runs whole sweeps — following `next` until it is null — with other commands (new
cancellations, completions that unblock, recoveries, time) between the pages; random steps follow.
"""

from __future__ import annotations

from qlwf.conformance.generate.base import Generator, GeneratorConfig, RandomChooser
from qlwf.conformance.traces.format import Trace, advance, corruption
from qlwf.model import tables as T
from qlwf.model.records import Record

MAX_PAGES_PER_SWEEP = 16
# A StepRun whose readyAtMs precedes its createdAtMs breaks a record invariant: the Run's convergence
# fails with a drift error, as in the golden trace adr0228-page-isolates-drifted-workflow.
DRIFT_PATCH: Record = {"readyAtMs": 5}


class PageGenerator(Generator):
    def cancelling(self) -> list[str]:
        return sorted(r["id"] for r in self.state.runs.values()
                      if r["status"] == "running" and "cancelRequestedAtMs" in r)

    def lease_some(self) -> None:
        """Admit and claim attempts on ready steps of about half the workflows (their Runs will block)."""
        for c in list(self.peek("task_candidates")):
            if self.c.integer(0, 1) == 0:
                continue
            key = self.state.step_runs[c["stepRunId"]]["stepKey"]
            out = self.admit_task(c["runId"], c["stepRunId"], *self.admission(c["runId"], key))
            if out.ok and self.c.integer(0, 3):
                assert out.result is not None  # an outcome without an error carries its result
                aid = out.result["attempt"]["id"]
                self.run_command("claim_lease", {"attemptId": aid, "workerId": self.pick(("w1", "w2")),
                                                 "durationMs": self.pick((30000, 60000))})
                if self.c.integer(0, 2) == 0:
                    lease = self.state.leases[aid]
                    self.run_command("start_attempt", {"attemptId": aid, "workerId": lease["workerId"],
                                                       "leaseGeneration": lease["leaseGeneration"], "timeoutMs": None})

    def blocked_first(self, run_ids: list[str]) -> list[str]:
        """Runs with an active attempt first (usually), so a blocked Run sorts before the cursor."""
        active = {a["runId"] for a in self.state.attempts.values() if a["status"] in T.ACTIVE_ATTEMPT}
        order = [run_ids[i] for i in self.order(len(run_ids))]
        if self.c.integer(0, 3):
            order.sort(key=lambda r: r not in active)
        return order

    def cancel_many(self) -> None:
        running = sorted(r["id"] for r in self.state.runs.values() if r["status"] == "running"
                         and "cancelRequestedAtMs" not in r)
        keep = self.c.integer(0, 1) if len(running) > 2 else 0  # one may stay running for a later cancellation
        for run_id in self.blocked_first(running)[: len(running) - keep]:
            if self.c.integer(0, 2) == 0:
                self.time_step(self.pick((1, 500, 1000)))
            self.run_command("request_cancel", {"runId": run_id, "reason": self.pick(T.CANCEL_REASONS),
                                                "actor": {"type": "system"}})

    def time_step(self, delta: int) -> None:
        self.emit(advance(delta))

    def drift_one(self) -> bool:
        """Drift a StepRun of one cancelling workflow that shares the candidate set with healthy ones."""
        cancelling = self.cancelling()
        if len(cancelling) < 2:
            return False
        run_id = self.pick(cancelling)
        step = self.pick(sorted(s["id"] for s in self.state.steps_of_run(run_id)))
        self.emit(corruption("stepRuns", [step], DRIFT_PATCH))
        return True

    def between_pages(self) -> None:
        roll = self.c.integer(0, 9)
        if roll == 0:
            running = sorted(r["id"] for r in self.state.runs.values() if r["status"] == "running"
                             and "cancelRequestedAtMs" not in r)
            if running:  # a newer cancellation, recorded mid-sweep
                self.run_command("request_cancel", {"runId": self.pick(running), "reason": "user",
                                                    "actor": {"type": "user", "id": "alice"}})
        elif roll == 1:
            self.worker()  # may complete or release a blocking attempt
        elif roll == 2:
            self.time_step(self.pick((0, 1000, 70000)))  # 70 s: leases expire, recovery may act
        elif roll == 3:
            self.recovery()

    def sweep(self, limit: int) -> None:
        cursor: Record | None = None
        for _ in range(MAX_PAGES_PER_SWEEP):
            args: Record = {"limit": limit} | ({"after": cursor} if cursor is not None else {})
            out = self.run_command("converge_cancellation_page", args)
            if not out.ok:
                return
            assert out.result is not None  # an outcome without an error carries its result
            if out.result["next"] is None:
                return
            cursor = out.result["next"]
            self.between_pages()

    def order(self, n: int) -> list[int]:
        rest, out = list(range(n)), []
        while rest:
            out.append(rest.pop(self.c.integer(0, len(rest) - 1)))
        return out

    def run(self, seed_tag: str) -> Trace:
        self.build_plans(seed_tag)
        while self.pending_plans:
            self.admitted.append(plan := self.pending_plans.pop(0))
            self.run_command("admit_workflow", {"plan": plan})
        self.lease_some()
        self.cancel_many()
        drifted = self.c.integer(0, 2) > 0 and self.drift_one()
        for i in range(self.c.integer(1, 3)):
            # a drifted workflow needs a page of 2 or more to share it with a healthy one; otherwise the
            # first sweep runs pages of 1, resumed from the cursor of the one before
            first = self.pick((2, 3)) if drifted else 1
            self.sweep(first if i == 0 else self.pick((1, 2, 3)))
            if self.c.integer(0, 1):
                self.one()
        for _ in range(self.c.integer(3, 10)):
            self.one()
        while len(self.steps) < self.config.steps[0]:  # at least as long as the configuration asks
            self.one()
        return self.trace()


PAGE_CONFIG = GeneratorConfig(workflows=(3, 5), plan_steps=(1, 3))


def generate_pages(seed: int, config: GeneratorConfig | None = None) -> Trace:
    base = config or GeneratorConfig()
    config = GeneratorConfig(steps=base.steps, workflows=PAGE_CONFIG.workflows, plan_steps=PAGE_CONFIG.plan_steps,
                             wrong_permille=base.wrong_permille, initial_clock=base.initial_clock)
    g = PageGenerator(RandomChooser(seed), config, f"generated-pages-{seed}")
    return g.run(str(seed))
