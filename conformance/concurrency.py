"""Concurrency check of the PostgreSQL backend (storage.md §5–§7): K workers, one database, then judgement.

K threads share one `PostgresAdapter` (a pool of K connections, so each transaction runs on its own
connection) and drive the same few workflows for a bounded number of operations under a
production-like clock: the database clock sped up `factor` times (5 s leases expire within a
fraction of a real second) and kept strictly increasing. The adapter's observer logs every writing
transaction with its arguments, outcome and observation time. Afterwards the stored state must hold
every invariant, have unique event ids and dedupe keys and contiguous sequences, and equal the model
replay of the logged history in observation-time order, with every logged outcome equal to the
model's at that point (concurrency_history.py).

Entry points: `concurrency_check(k=..., ops=...)` returns a `ConcurrencyReport` (`passed`, `line()`);
`qlwf conform --backend postgres --concurrency K` prints it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qlwf.impl.postgres.adapter import PostgresAdapter, TransactionLog
from qlwf.impl.postgres.conformance import shared_server
from qlwf.impl.postgres.database import PgDatabase
from qlwf.impl.postgres.server import PgServer, unique_database_name

from . import concurrency_history as history
from .concurrency_variants import VARIANTS
from .concurrency_workload import Worker, World, workflow_plan

ORIGIN_MS = 1_000_000_000


class ScaledClock:
    """The database clock sped up `factor` times, strictly increasing across every thread.

    Strictness is what orders a Run's transactions: each reads the clock after taking the Run's row
    lock, i.e. after the previous holder read it, so a later holder always reads a larger value.
    """

    def __init__(self, factor: int = 20, origin_ms: int = ORIGIN_MS) -> None:
        self.factor = factor
        self.origin_ms = origin_ms
        self._database_origin: int | None = None
        self._last = origin_ms - 1
        self._lock = threading.Lock()

    def read(self, database_time: Callable[[], int]) -> int:
        db = database_time()
        with self._lock:
            if self._database_origin is None:
                self._database_origin = db
            self._last = max(self._last + 1, self.origin_ms + (db - self._database_origin) * self.factor)
            return self._last

    def peek(self) -> int:
        """The last value handed out (plans are dated with it, so they are never in the future)."""
        with self._lock:
            return self._last


@dataclass(frozen=True)
class ConcurrencyConfig:
    k: int = 4  # worker threads, each with its own pooled connection
    ops: int = 60  # operations per worker
    workflows: int = 3  # admitted before the workers start
    max_workflows: int = 6  # workers may admit new ones up to this many
    factor: int = 20  # clock speed-up
    seed: int = 0
    variant: str = "correct"


@dataclass
class ConcurrencyReport:
    config: ConcurrencyConfig
    seconds: float = 0.0
    transactions: int = 0  # writing transactions logged (setup included)
    commits: int = 0
    replayed: int = 0
    retries: Counter[str] = field(default_factory=Counter)  # re-runs by SQLSTATE
    exhausted: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # ok / Class:reason
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def conflicts(self) -> int:
        return sum(n for k, n in self.outcomes.items() if k.startswith("Conflict:"))

    @property
    def throughput(self) -> float:
        return self.commits / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        c = self.config
        verdict = "PASS" if self.passed else f"FAIL ({len(self.problems)} problem(s))"
        return (f"concurrency postgres[{c.variant}] K={c.k}: {verdict} — {c.k}×{c.ops} ops, {self.commits} commits, "
                f"{sum(self.retries.values())} retries, {self.exhausted} retry_exhausted, {self.conflicts} conflicts, "
                f"{self.replayed} replayed, {self.seconds:.2f} s, {self.throughput:.0f} commits/s")

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.config.variant, "k": self.config.k, "ops": self.config.ops, "passed": self.passed,
                "seconds": round(self.seconds, 3), "transactions": self.transactions, "commits": self.commits,
                "replayed": self.replayed, "retries": dict(self.retries), "retryExhausted": self.exhausted,
                "conflicts": self.conflicts, "outcomes": dict(self.outcomes),
                "commitsPerSecond": round(self.throughput, 1), "problems": self.problems}


def run_concurrency(conninfo: str, config: ConcurrencyConfig) -> ConcurrencyReport:
    """One run against an empty database holding the ql3 schema at `conninfo`."""
    variant = VARIANTS[config.variant]
    log: list[TransactionLog] = []
    clock = ScaledClock(config.factor)
    database = PgDatabase(conninfo, size=config.k)
    port = PostgresAdapter(database, clock, store_factory=variant.store_factory, isolation=variant.isolation,
                           observer=log.append)  # list.append is atomic under the GIL
    report = ConcurrencyReport(config)
    try:
        world = World(max_workflows=max(config.max_workflows, config.workflows))
        for i in range(config.workflows):
            world.plans.append(workflow_plan(i, clock.peek()))
            port.execute("admit_workflow", {"plan": world.plans[-1]})
        workers = [Worker(i, port, world, config.ops, config.seed, clock.peek) for i in range(config.k)]
        threads = [threading.Thread(target=w.run, name=w.worker_id) for w in workers]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report.seconds = time.perf_counter() - start
        report.problems += [f"worker {w.worker_id} crashed: {type(w.crash).__name__}: {w.crash}"
                            for w in workers if w.crash is not None]
        snapshot = port.snapshot()
    finally:
        port.close()
        database.close()
    report.transactions, report.commits = len(log), port.stats.commits
    report.retries, report.exhausted = port.stats.retries, port.stats.exhausted
    report.outcomes = Counter("ok" if "ok" in e.outcome else f"{e.outcome['error']['class']}:"
                              f"{e.outcome['error']['reason']}" for e in log)
    report.problems += history.event_problems(snapshot)
    report.problems += history.invariant_problems(snapshot, clock.peek())
    replay, report.replayed = history.replay_problems(log, snapshot)
    report.problems += replay
    return report


def concurrency_check(k: int = 4, ops: int = 60, *, seed: int = 0, variant: str = "correct", factor: int = 20,
                      workflows: int = 3, server: PgServer | None = None) -> ConcurrencyReport:
    """Run the check in a fresh database of `server` (default: the process's shared server)."""
    server = server if server is not None else shared_server()[0]
    name = unique_database_name("qlwf_concurrency")
    conninfo = server.create_database(name)
    try:
        schema = PgDatabase(conninfo, size=1)
        try:
            schema.apply_schema()
        finally:
            schema.close()
        config = ConcurrencyConfig(k=k, ops=ops, workflows=workflows, max_workflows=2 * workflows, factor=factor,
                                   seed=seed, variant=variant)
        return run_concurrency(conninfo, config)
    finally:
        server.drop_database(name)
