"""The trace generator's machinery: the `Chooser` it draws through, its `GeneratorConfig`, and
`Generator`, which runs the model as it emits steps and knows every action of the random family.

`generators.py` (the families by seed, the Hypothesis strategy) and the targeted families
(`generators_boundary.py`, `generators_pages.py`) import this module; it imports none of them, so the
three never import one another in a circle.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st
from qlwf.conformance.generate import plans
from qlwf.conformance.traces.format import ModelRun, ModelStep, Trace, advance, command, model_step
from qlwf.model import tables as T
from qlwf.model.records import Record, sign_plan
from qlwf.model.state import State
from qlwf.model.system import Outcome, apply

X = TypeVar("X")
STEP_KEYS = ("a", "b", "c", "d", "e")
WORKERS = ("w1", "w2")
DELAYS = (0, 500, 1500, 3000, 8000, 20000, 70000)
DURATIONS = (5000, 10000, 30000)


class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...


class RandomChooser:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class DrawChooser:
    """Hypothesis draws: integers shrink toward `lo`, so shrunk traces use the first options."""

    def __init__(self, draw: Callable[[st.SearchStrategy[int]], int]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))


@dataclass(frozen=True)
class GeneratorConfig:
    steps: tuple[int, int] = (25, 50)
    workflows: tuple[int, int] = (2, 4)
    plan_steps: tuple[int, int] = (1, 5)
    wrong_permille: int = 120  # share of deliberately wrong arguments
    initial_clock: int = 1_000_000


class Generator:
    def __init__(self, chooser: Chooser, config: GeneratorConfig, description: str) -> None:
        self.c = chooser
        self.config = config
        self.description = description
        self.initial = self.state = State(clock=config.initial_clock)
        self.steps: list[Record] = []
        self.done: list[ModelStep] = []  # model_step of every step, for the trace's ModelRun
        self.pending_plans: list[Record] = []
        self.admitted: list[Record] = []
        self.cursors: dict[str, list[Record]] = {}
        self._peeked: State | None = None
        self._peeks: dict[str, list[Record]] = {}

    # ---- choice helpers -------------------------------------------------------------------------
    def pick(self, options: Sequence[X]) -> X:
        return options[self.c.integer(0, len(options) - 1)]

    def wrong(self) -> bool:
        return self.c.integer(0, 999) < self.config.wrong_permille

    def weighted(self, options: list[tuple[int, Callable[[], None]]]) -> Callable[[], None]:
        live = [(w, f) for w, f in options if w > 0]
        roll = self.c.integer(0, sum(w for w, _ in live) - 1)
        for w, f in live:
            if roll < w:
                return f
            roll -= w
        raise AssertionError("unreachable")

    # ---- emitting steps -------------------------------------------------------------------------
    def emit(self, step: Record) -> ModelStep:
        """Append `step` and run the model on it, as the lockstep harness will (trace.model_step)."""
        done = model_step(self.state, step)
        self.state = done.state
        self.steps.append(step)
        self.done.append(done)
        return done

    def run_command(self, name: str, args: Any, *evidence: Record | None) -> Outcome:
        """Emit a command step (`evidence`: an admit_task_attempt step's ql3 evidence, or None) and run it."""
        out = self.emit(command(name, args, *evidence)).raw
        assert out is not None  # a command step's ModelStep carries its Outcome
        if out.ok and isinstance(out.result, dict) and out.result.get("next"):
            query = "cancellation_candidates" if name == "converge_cancellation_page" else name
            self.cursors.setdefault(query, []).append(out.result["next"])
        return out

    def peek(self, query: str) -> list[Record]:
        """The model's current candidates of `query` (memoized per state: states are immutable values)."""
        if self._peeked is not self.state:
            self._peeked, self._peeks = self.state, {}
        if query not in self._peeks:
            out = apply(self.state, {"name": query, "args": {"limit": T.QUERY_PAGES[query][0]}}, self.state.clock)
            assert out.result is not None
            self._peeks[query] = list(out.result["candidates"])
        return self._peeks[query]

    # ---- plans ----------------------------------------------------------------------------------
    def build_plans(self, seed_tag: str) -> None:
        for i in range(self.c.integer(*self.config.workflows)):
            n = self.c.integer(*self.config.plan_steps)
            keys = STEP_KEYS[:n]
            needs: dict[str, list[str]] = {}
            for j, k in enumerate(keys):
                needs[k] = [d for d in keys[:j] if self.c.integer(0, 2) == 0] if j else []
                if j and not needs[k] and self.c.integer(0, 1):
                    needs[k] = [keys[j - 1]]  # favour chains: they exercise readiness and skip propagation
            planned = self.config.initial_clock - self.c.integer(0, 5000)
            self.pending_plans.append(plans.make_plan(f"run-{seed_tag}-{i}", f"plan-{seed_tag}-{i}", needs, planned))

    # ---- actions --------------------------------------------------------------------------------
    def admit(self) -> None:
        if self.pending_plans and not self.wrong():
            plan = self.pending_plans.pop(0)
            self.admitted.append(plan)
            self.run_command("admit_workflow", {"plan": plan})
            return
        base = self.pick(self.admitted or self.pending_plans)
        kind = self.c.integer(0, 4)
        if kind == 0:  # exact replay (existing), or admission of a pending plan out of order
            self.run_command("admit_workflow", {"plan": base})
            if base in self.pending_plans:
                self.pending_plans.remove(base)
                self.admitted.append(base)
        elif kind == 1:  # same planId, other content: plan_id_conflict
            steps = {s["stepKey"]: s["needs"] for s in base["steps"]} | {"z": []}
            self.run_command("admit_workflow", {"plan": plans.make_plan(base["runId"], base["planId"], steps,
                                                                        base["plannedAtMs"])})
        elif kind == 2:  # same runId, other planId: run_id_conflict
            steps = {s["stepKey"]: s["needs"] for s in base["steps"]}
            self.run_command("admit_workflow", {"plan": plans.make_plan(base["runId"], base["planId"] + "-x", steps,
                                                                        base["plannedAtMs"])})
        elif kind == 3:  # tampered digest: plan_invalid
            self.run_command("admit_workflow", {"plan": {**base, "planDigest": "0" * 64}})
        else:  # planned in the future
            future = {k: v for k, v in base.items() if k != "planDigest"} | {"plannedAtMs": self.state.clock + 10_000,
                                                                             "planId": base["planId"] + "-f"}
            self.run_command("admit_workflow", {"plan": sign_plan(future)})

    def time(self) -> None:
        self.emit(advance(self.pick(DELAYS)))

    def run_ids(self) -> list[str]:
        return sorted(self.state.runs)

    def frontier(self) -> None:
        cands = [c["runId"] for c in self.peek("frontier_candidates")]
        if cands and not self.wrong():
            run_id = self.pick(cands)
        else:
            run_id = self.pick([*self.run_ids(), "run-missing", "bad id!"])
        self.run_command("advance_frontier", {"runId": run_id})

    def admission(self, run_id: str, step_key: str, executor_type: str = "remote_worker", revision: int = 1,
                  task_key: str | None = None) -> tuple[Record, Record | None]:
        """(binding, evidence) for admitting the step `step_key` of `run_id`: derived from ql3 evidence built
        for the Run's plan (plans.admission); a placeholder binding without evidence where no plan step
        backs it (an unknown Run or step), which the model refuses before it reads a binding."""
        admitted = self.state.admission_of_run(run_id)
        if len(admitted) != 1 or step_key not in {s["stepKey"] for s in admitted[0]["plan"]["steps"]}:
            return plans.binding(step_key, executor_type, revision), None
        return plans.admission(admitted[0]["plan"], step_key, executor_type, revision, task_key)

    def admit_task(self, run_id: str, step_run_id: str, binding: Record, evidence: Record | None) -> Outcome:
        return self.run_command("admit_task_attempt", {"runId": run_id, "stepRunId": step_run_id, "binding": binding},
                                evidence)

    def task_admission(self) -> None:
        cands = self.peek("task_candidates")
        if cands and not self.wrong():
            c = self.pick(cands)
            key = self.state.step_runs[c["stepRunId"]]["stepKey"]
            self.admit_task(c["runId"], c["stepRunId"], *self.admission(c["runId"], key, self.pick(T.EXECUTOR_TYPES)))
            return
        steps = sorted(self.state.step_runs.values(), key=lambda s: s["id"])
        if not steps:
            self.admit_task("run-missing", "x", plans.binding("a"), None)
            return
        s = self.pick(steps)
        variant = self.c.integer(0, 3)
        b, evidence = self.admission(s["runId"], s["stepKey"])
        admitted = [r for r in self.state.receipts.values()
                    if (r["runId"], r["stepRunId"], r["stepRunVersion"]) == (s["runId"], s["id"], s["version"])]
        if admitted and variant == 0:  # exact replay of an admitted epoch: existing
            b = {k: admitted[0][k] for k in plans.binding(s["stepKey"])}
            revision = int(b["taskRevision"].split(":")[2])
            again, evidence = self.admission(s["runId"], s["stepKey"], b["executorType"], revision)
            evidence = evidence if again == b else None
        if variant == 1:  # another Task's revision: disagrees with the plan step (binding_inconsistent)
            others = sorted(k for k in {x["stepKey"] for x in self.state.steps_of_run(s["runId"])} if k != s["stepKey"])
            b, evidence = (self.admission(s["runId"], s["stepKey"], task_key=others[0]) if others
                           else (plans.binding("zz"), None))
        elif variant == 2:
            b, evidence = {**b, "executorType": "quantum"}, None  # malformed: argument_invalid
        elif variant == 3:  # replay with another binding: binding_mismatch
            b, evidence = self.admission(s["runId"], s["stepKey"], revision=2)
        self.admit_task(s["runId"], s["id"], b, evidence)

    def attempt_ids(self, active_only: bool) -> list[str]:
        return sorted(a["id"] for a in self.state.attempts.values()
                      if not active_only or a["status"] in T.ACTIVE_ATTEMPT)

    def worker(self) -> None:
        active = self.attempt_ids(True)
        settled = [aid for aid in self.attempt_ids(False) if aid not in active]
        if settled and self.c.integer(0, 7) == 0:
            pool = settled  # replays of finished attempts (already_terminal, already_released, conflicts)
        else:
            pool = active if active and not self.wrong() else self.attempt_ids(False) or ["wta:missing"]
        aid = self.pick(pool)
        a = self.state.attempts.get(aid)
        lease = self.state.leases.get(aid)
        holder = (lease["workerId"], lease["leaseGeneration"]) if lease else (self.pick(WORKERS), 1)
        worker, gen = holder
        if self.wrong():  # a stale or foreign fence
            if self.c.integer(0, 1):
                worker, gen = self.pick(WORKERS), gen + self.c.integer(0, 1)
            else:
                gen += 1
        status = a["status"] if a else "claimed"
        live = lease is not None and lease["status"] == "leased" and lease["expiresAtMs"] > self.state.clock
        fence = {"attemptId": aid, "workerId": worker, "leaseGeneration": gen}
        duration = self.pick(DURATIONS)
        if status == "claimed" and lease is not None and lease["status"] == "released" and self.c.integer(0, 3) == 0:
            self.run_command("release_lease", fence | {"reason": lease.get("releaseReason", "declined")})
            return
        if status == "claimed" and not live:
            self.run_command("claim_lease", {"attemptId": aid, "workerId": self.pick(WORKERS), "durationMs": duration})
            return
        options: list[Callable[[], Outcome]] = [
            lambda: self.run_command("renew_lease", fence | {"durationMs": duration}),
        ]
        if status == "claimed":
            options += [
                lambda: self.run_command("start_attempt", fence | {"timeoutMs": self.pick((None, 1000, 2000, 30000))}),
                lambda: self.run_command("start_attempt", fence | {"timeoutMs": None}),
                lambda: self.run_command("release_lease", fence | {"reason": self.pick(T.WORKER_RELEASE_REASONS)}),
                lambda: self.run_command("claim_lease", {"attemptId": aid, "workerId": self.pick(WORKERS),
                                                         "durationMs": duration}),
            ]
        elif status == "starting":
            options += [
                lambda: self.run_command("record_running", fence),
                lambda: self.run_command("record_running", fence),
                lambda: self.run_command("fail_start", fence),
                lambda: self.run_command("complete_attempt", fence | {"exitCode": self.pick((0, 1))}),
                lambda: self.run_command("start_attempt", fence | {"timeoutMs": None}),
            ]
        elif status == "running":
            options += [
                lambda: self.run_command("complete_attempt", fence | {"exitCode": self.pick((0, 0, 1, -3))}),
                lambda: self.run_command("complete_attempt", fence | {"exitCode": 0}),
                lambda: self.run_command("record_running", fence),
                lambda: self.run_command("start_attempt", fence | {"timeoutMs": None}),
            ]
        else:
            options += [
                lambda: self.run_command("complete_attempt", fence | {"exitCode": 0}),
                lambda: self.run_command("fail_start", fence),
                lambda: self.run_command("release_lease", fence | {"reason": "declined"}),
                lambda: self.run_command("claim_lease", {"attemptId": aid, "workerId": worker, "durationMs": duration}),
            ]
        if self.c.integer(0, 19) == 0:  # malformed worker arguments
            options = [lambda: self.run_command("renew_lease", fence | {"durationMs": 10})]
        self.pick(options)()

    def recovery(self) -> None:
        cands = [c["attemptId"] for c in self.peek("recovery_candidates")]
        aid = self.pick(cands) if cands and not self.wrong() else self.pick(self.attempt_ids(False) or ["wta:missing"])
        self.run_command("recover_attempt", {"attemptId": aid, "evidence": self.pick(T.RECOVERY_EVIDENCE)})

    def cancel(self) -> None:
        running = sorted(r["id"] for r in self.state.runs.values() if r["status"] == "running")
        run_id = self.pick(running) if running and not self.wrong() else self.pick([*self.run_ids(), "run-missing"])
        actor = self.pick(({"type": "user", "id": "alice"}, {"type": "system"}, {"type": "operator"}))
        self.run_command("request_cancel", {"runId": run_id, "reason": self.pick(T.CANCEL_REASONS), "actor": actor})

    def converge(self) -> None:
        cancelling = [c["runId"] for c in self.peek("cancellation_candidates")]
        if self.c.integer(0, 2) == 0:
            args: Record = {"limit": self.c.integer(1, 3)}
            if self.cursors.get("cancellation_candidates") and self.c.integer(0, 1):
                args["after"] = self.pick(self.cursors["cancellation_candidates"])
            self.run_command("converge_cancellation_page", args)
            return
        run_id = self.pick(cancelling) if cancelling and not self.wrong() else self.pick([*self.run_ids(),
                                                                                           "run-missing"])
        self.run_command("converge_cancellation", {"runId": run_id})

    def query(self) -> None:
        name = self.pick(tuple(T.QUERY_PAGES))
        args: Record = {"limit": self.c.integer(1, 3)}
        if self.cursors.get(name) and self.c.integer(0, 1):
            args["after"] = self.pick(self.cursors[name])
        if self.wrong():
            args = self.pick(({"limit": 0}, {"limit": 2, "after": {"bogus": 1}}, {"limit": 1, "extra": True}))
        self.run_command(name, args)

    def one(self) -> None:
        s = self.state
        active = any(a["status"] in T.ACTIVE_ATTEMPT for a in s.attempts.values())
        cancelling = any("cancelRequestedAtMs" in r and r["status"] == "running" for r in s.runs.values())
        self.weighted([
            (12 if self.pending_plans else 1, self.admit),
            (4, self.time),
            (6 if self.peek("frontier_candidates") else 1, self.frontier),
            (7 if self.peek("task_candidates") else 1, self.task_admission),
            (14 if active else 1, self.worker),
            (5 if self.peek("recovery_candidates") else 1, self.recovery),
            (4 if active else 2, self.cancel),
            (6 if cancelling else 1, self.converge),
            (2, self.query),
        ])()

    def run(self, seed_tag: str) -> Trace:
        self.build_plans(seed_tag)
        n = self.c.integer(*self.config.steps)
        while len(self.steps) < n:
            self.one()
        return self.trace()

    def trace(self) -> Trace:
        """The trace, with its model run when every step went through `emit` (lengths equal)."""
        run = ModelRun(self.initial, tuple(self.steps), tuple(self.done)) if len(self.done) == len(self.steps) else None
        return Trace(self.description, self.config.initial_clock, self.steps, self.description, model_run=run)
