"""The concurrent workload: K worker threads driving the same few workflows through one backend.

Each worker draws operations from a weighted menu — frontier advance, task admission, the lease /
start / running / complete / fail_start protocol, releases, cancel requests, recovery, single and
page convergence, and now and then a new (or replayed) workflow admission — choosing arguments from
what any worker has learnt so far (attempt ids, lease holders and generations). Some arguments are
deliberately stale, so refusals are exercised under contention too.

Worker-protocol races: the `race_*` operations all aim at the same attempt, the newest live one every
worker knows (`World.hot_attempt`): claims with the shortest lease (it expires within a fraction of a
real second under the sped-up clock), renewals, completions and releases by its holder, recovery
straight at it, frontier advances and cancellation (then convergence) of its Run. So claim, renew, release and
complete race with recovery and cancellation on one Run's rows at every K, not only by chance.

Outcomes are not judged here: the backend's observer logs every writing transaction and
`concurrency_history` replays them.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qlwf.conformance.faults.outage import OUTAGE_REASONS, StorageUnreachable
from qlwf.conformance.generate import plans
from qlwf.impl.port import CommandPort
from qlwf.model import tables as T
from qlwf.model.errors import QlwfError, Unavailable

Record = dict[str, Any]
# A small DAG per workflow: a → (b, c) → d.
NEEDS: dict[str, list[str]] = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
LEASE_DURATIONS = (5000, 10000, 20000)
TIMEOUTS = (None, None, 30000, 120000)
CANCEL_REASONS = tuple(sorted(T.CANCEL_REASONS))


def workflow_plan(index: int, planned_at_ms: int) -> Record:
    return plans.make_plan(f"run-{index}", f"plan-{index}", NEEDS, planned_at_ms)


@dataclass
class World:
    """What the workers know, shared and guarded by one lock (races here only skew argument choice)."""

    max_workflows: int
    plans: list[Record] = field(default_factory=list)
    attempts: dict[str, str] = field(default_factory=dict)  # attempt id → last seen status
    runs_of: dict[str, str] = field(default_factory=dict)  # attempt id → runId
    holders: dict[str, tuple[str, int]] = field(default_factory=dict)  # attempt id → (worker, generation)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run_ids(self) -> list[str]:
        with self.lock:
            return [p["runId"] for p in self.plans]

    def learn_attempt(self, attempt: Record | None) -> None:
        if attempt is not None:
            with self.lock:
                self.attempts.pop(attempt["id"], None)  # re-insert: dict order is recency of news
                self.attempts[attempt["id"]] = attempt["status"]
                self.runs_of[attempt["id"]] = attempt["runId"]

    def learn_lease(self, lease: Record | None) -> None:
        if lease is not None:
            with self.lock:
                self.holders[lease["attemptId"]] = (lease["workerId"], lease["leaseGeneration"])

    def pick_attempt(self, rng: random.Random) -> str | None:
        with self.lock:
            live = [a for a, s in self.attempts.items() if s in ("claimed", "starting", "running")]
            every = list(self.attempts)
        pool = live if live and rng.random() < 0.9 else every
        return rng.choice(pool) if pool else None

    def hot_attempt(self) -> str | None:
        """The live attempt with the latest news: the one every racing worker aims at."""
        with self.lock:
            live = [a for a, s in self.attempts.items() if s in ("claimed", "starting", "running")]
        return live[-1] if live else None


class Worker:
    """One thread: `ops` operations against `port` with its own random stream and worker id."""

    def __init__(self, index: int, port: CommandPort, world: World, ops: int, seed: int,
                 planned_at: Callable[[], int], on_storage_failure: Callable[[], None] | None = None) -> None:
        self.worker_id = f"w{index}"
        self.port = port
        self.world = world
        self.ops = ops
        self.rng = random.Random(seed * 1000 + index)
        self.planned_at = planned_at
        # Blocks while the server is unreachable; raises StorageUnreachable once the window is spent.
        self.on_storage_failure = on_storage_failure
        self.done = 0  # operations completed
        self.crash: BaseException | None = None
        self.menu: list[tuple[Callable[[], None], int]] = [
            (self.advance, 3), (self.admit_task, 3), (self.claim, 3), (self.renew, 2), (self.start, 3),
            (self.running, 2), (self.complete, 3), (self.fail_start, 1), (self.release, 1), (self.recover, 2),
            (self.request_cancel, 1), (self.converge, 1), (self.converge_page, 1), (self.admit_workflow, 1),
            (self.race_claim, 2), (self.race_renew, 2), (self.race_complete, 2), (self.race_release, 1),
            (self.race_recover, 2), (self.race_cancel, 1), (self.race_frontier, 3),
        ]

    def run(self) -> None:
        try:
            actions, weights = zip(*self.menu, strict=True)
            for _ in range(self.ops):
                self.rng.choices(actions, weights)[0]()
                self.done += 1
        except StorageUnreachable:
            pass  # the harness reports the outage; this worker just stops
        except BaseException as e:  # reported by the harness; a crash must not hang the other threads
            self.crash = e

    def call(self, name: str, args: Record) -> Record | None:
        try:
            return self.port.execute(name, args)
        except QlwfError as e:
            if isinstance(e, Unavailable) and e.reason in OUTAGE_REASONS and self.on_storage_failure is not None:
                self.on_storage_failure()
            return None

    # ---- system commands ------------------------------------------------------------------------
    def advance(self) -> None:
        runs = self.world.run_ids()
        if runs:
            self.call("advance_frontier", {"runId": self.rng.choice(runs)})

    def admit_task(self) -> None:
        page = self.call("task_candidates", {"limit": 8})
        if page and page["candidates"]:
            c = self.rng.choice(page["candidates"])
            step_key = c["stepRunId"].split(":", 1)[1]
            out = self.call("admit_task_attempt", {"runId": c["runId"], "stepRunId": c["stepRunId"],
                                                   "binding": plans.binding(step_key)})
            self.world.learn_attempt(out["attempt"] if out else None)

    def recover(self) -> None:
        page = self.call("recovery_candidates", {"limit": 8})
        if page and page["candidates"]:
            c = self.rng.choice(page["candidates"])
            evidence = self.rng.choice(("not_running", "not_running", "running", "unknown"))
            out = self.call("recover_attempt", {"attemptId": c["attemptId"], "evidence": evidence})
            self.world.learn_attempt(out["attempt"] if out else None)

    def request_cancel(self) -> None:
        runs = self.world.run_ids()
        if runs and self.rng.random() < 0.3:  # rare: a cancelled workflow stops producing work
            self.call("request_cancel", {"runId": self.rng.choice(runs), "reason": self.rng.choice(CANCEL_REASONS),
                                         "actor": {"type": "user", "id": self.worker_id}})

    def converge(self) -> None:
        runs = self.world.run_ids()
        if runs:
            self.call("converge_cancellation", {"runId": self.rng.choice(runs)})

    def converge_page(self) -> None:
        self.call("converge_cancellation_page", {"limit": self.rng.choice((1, 2, 4))})

    def admit_workflow(self) -> None:
        with self.world.lock:
            fresh = len(self.world.plans) < self.world.max_workflows and self.rng.random() < 0.5
            plan: Record | None
            if fresh:
                plan = workflow_plan(len(self.world.plans), self.planned_at())
                self.world.plans.append(plan)
            else:  # replay an admitted plan: `existing`
                plan = self.rng.choice(self.world.plans) if self.world.plans else None
        if plan is not None:
            self.call("admit_workflow", {"plan": plan})

    # ---- worker protocol ------------------------------------------------------------------------
    def fence(self, attempt_id: str) -> Record:
        """The holder's fence most of the time; otherwise this worker with a guessed generation."""
        with self.world.lock:
            holder = self.world.holders.get(attempt_id)
        if holder is not None and self.rng.random() < 0.85:
            worker, generation = holder
        else:
            worker, generation = self.worker_id, self.rng.randint(1, 3)
        return {"attemptId": attempt_id, "workerId": worker, "leaseGeneration": generation}

    def _attempt_command(self, name: str, extra: Callable[[], Record] = dict) -> None:
        attempt_id = self.world.pick_attempt(self.rng)
        if attempt_id is None:
            return
        out = self.call(name, self.fence(attempt_id) | extra())
        if out:
            self.world.learn_attempt(out.get("attempt"))
            self.world.learn_lease(out.get("lease"))

    def claim(self) -> None:
        attempt_id = self.world.pick_attempt(self.rng)
        if attempt_id is not None:
            out = self.call("claim_lease", {"attemptId": attempt_id, "workerId": self.worker_id,
                                            "durationMs": self.rng.choice(LEASE_DURATIONS)})
            self.world.learn_lease(out["lease"] if out else None)

    def renew(self) -> None:
        self._attempt_command("renew_lease", lambda: {"durationMs": self.rng.choice(LEASE_DURATIONS)})

    def release(self) -> None:
        self._attempt_command("release_lease", lambda: {"reason": self.rng.choice(sorted(T.WORKER_RELEASE_REASONS))})

    def start(self) -> None:
        self._attempt_command("start_attempt", lambda: {"timeoutMs": self.rng.choice(TIMEOUTS)})

    def running(self) -> None:
        self._attempt_command("record_running")

    def complete(self) -> None:
        self._attempt_command("complete_attempt", lambda: {"exitCode": self.rng.choice((0, 0, 0, 1))})

    def fail_start(self) -> None:
        self._attempt_command("fail_start")

    # ---- worker-protocol races on the hot attempt -------------------------------------------------
    def _hot_command(self, name: str, extra: Callable[[], Record] = dict) -> None:
        attempt_id = self.world.hot_attempt()
        if attempt_id is None:
            return
        out = self.call(name, self.fence(attempt_id) | extra())
        if out:
            self.world.learn_attempt(out.get("attempt"))
            self.world.learn_lease(out.get("lease"))

    def race_claim(self) -> None:
        attempt_id = self.world.hot_attempt()
        if attempt_id is not None:  # the shortest lease: it expires while the others still use it
            out = self.call("claim_lease", {"attemptId": attempt_id, "workerId": self.worker_id,
                                            "durationMs": LEASE_DURATIONS[0]})
            self.world.learn_lease(out["lease"] if out else None)

    def race_renew(self) -> None:
        self._hot_command("renew_lease", lambda: {"durationMs": LEASE_DURATIONS[0]})

    def race_complete(self) -> None:
        """The holder moves the attempt on: start, running or completion, whichever it draws."""
        name = self.rng.choice(("start_attempt", "record_running", "complete_attempt"))
        extra: dict[str, Callable[[], Record]] = {"start_attempt": lambda: {"timeoutMs": self.rng.choice(TIMEOUTS)},
                                                  "complete_attempt": lambda: {"exitCode": self.rng.choice((0, 1))}}
        self._hot_command(name, extra.get(name, dict))

    def race_release(self) -> None:
        self._hot_command("release_lease", lambda: {"reason": self.rng.choice(sorted(T.WORKER_RELEASE_REASONS))})

    def race_recover(self) -> None:
        attempt_id = self.world.hot_attempt()
        if attempt_id is not None:
            out = self.call("recover_attempt", {"attemptId": attempt_id,
                                                "evidence": self.rng.choice(("not_running", "running", "unknown"))})
            self.world.learn_attempt(out["attempt"] if out else None)

    def hot_run(self) -> str | None:
        attempt_id = self.world.hot_attempt()
        with self.world.lock:
            return self.world.runs_of.get(attempt_id or "")

    def race_frontier(self) -> None:
        """A Run-level writer on the hot attempt's Run: it takes the Run lock without the attempt authority,
        so it can slip in between an attempt command's authority lock and its Run lock."""
        run_id = self.hot_run()
        if run_id is not None:
            self.call("advance_frontier", {"runId": run_id})

    def race_cancel(self) -> None:
        run_id = self.hot_run()
        if run_id is not None and self.rng.random() < 0.3:  # rare, as request_cancel: it ends the workflow
            self.call("request_cancel", {"runId": run_id, "reason": self.rng.choice(CANCEL_REASONS),
                                         "actor": {"type": "user", "id": self.worker_id}})
            self.call("converge_cancellation", {"runId": run_id})
