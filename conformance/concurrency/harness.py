"""Concurrency check of a backend (storage.md §5–§7): K workers, one store, then judgement.

Any backend that declares the `concurrency` capability (conformance/backends/) provides a
`ConcurrencyHost`: a fresh store per run and a port over it shared by K threads (PostgreSQL: a pool
of K connections, so each transaction runs on its own connection; SQLite: the one connection behind
its FIFO authority). The threads drive the same few workflows for a bounded number of operations under a
production-like clock: the database clock sped up `factor` times (5 s leases expire within a
fraction of a real second) and kept strictly increasing. The adapter's observer logs every writing
transaction with its arguments, outcome and observation time. Afterwards the stored state must hold
every invariant, have unique event ids and dedupe keys and contiguous sequences, and equal the model
replay of the logged history in observation-time order, with every logged outcome equal to the
model's at that point (concurrency_history.py).

Outages (outage.py): a worker whose command fails for lack of a connection waits while the server
is away; an outage shorter than the reconnection window is recorded (count and duration) and the
run is judged as usual — commits whose response was lost are resolved from durable state
(concurrency_history.py); a longer one stops the run with `unreachable` set and the progress made.

Entry points: `concurrency_check(k=..., ops=...)` returns a `ConcurrencyReport` (`passed`, `line()`);
`qlwf conform --backend NAME --concurrency K` prints it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from qlwf.conformance.backends import registry
from qlwf.conformance.concurrency import history
from qlwf.conformance.concurrency.workload import Worker, World, workflow_plan
from qlwf.conformance.faults.outage import OUTAGE_REASONS, Outage, Reachability, StorageUnreachable
from qlwf.impl.port import Clock, Record, Snapshot
from qlwf.impl.sql_adapter import Observer, SqlAdapter, TransactionLog
from qlwf.model.errors import Unavailable

ORIGIN_MS = 1_000_000_000
DEFAULT_RECONNECT_WINDOW_S = 30.0
T = TypeVar("T")


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


class StoreSetupFailed(Exception):
    """The run's store could not be set up (the server went away first): the run is unreachable."""


class ConcurrencyStore(Protocol):
    """One fresh store of a backend for one run."""

    # driver errors a snapshot read may hit while the storage is away (retried after the outage)
    transient: tuple[type[BaseException], ...]

    def port(self, k: int, clock: Clock, variant: str, observer: Observer) -> SqlAdapter:
        """The one port the K workers share, logging every writing transaction to `observer`."""
        ...

    def probe(self) -> bool:
        """Does the storage answer a fresh connection?"""
        ...

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        """Around the run: silence the driver's own reports of connections the harness breaks."""
        ...

    def close(self) -> None: ...


class ConcurrencyHost(Protocol):
    """A backend's `concurrency` capability (BackendSpec.concurrency builds one)."""

    name: str

    @property
    def variants(self) -> dict[str, str]:
        """Variant name → description; "correct" is the backend as specified."""
        ...

    def open_store(self) -> ConcurrencyStore:
        """A fresh, empty store; raises StoreSetupFailed when the storage cannot be reached."""
        ...

    def capacity_problem(self, k: int) -> str | None:
        """Why K workers cannot be served (checked before any work), or None."""
        ...


@dataclass(frozen=True)
class ConcurrencyConfig:
    k: int = 4  # worker threads, each with its own pooled connection
    ops: int = 60  # operations per worker
    workflows: int = 3  # admitted before the workers start
    max_workflows: int = 6  # workers may admit new ones up to this many
    factor: int = 20  # clock speed-up
    seed: int = 0
    variant: str = "correct"
    backend: str = "postgres"
    reconnect_window_s: float = DEFAULT_RECONNECT_WINDOW_S  # how long an outage may last before the run stops


@dataclass
class ConcurrencyReport:
    config: ConcurrencyConfig
    seconds: float = 0.0  # the workers' phase
    transactions: int = 0  # writing transactions logged (setup included)
    commits: int = 0  # setup included
    setup_commits: int = 0  # the admissions before the workers started
    replayed: int = 0
    placed_earlier: int = 0  # reads the judge placed before a concurrent same-Run commit (history.Replay)
    assumed_committed: int = 0  # silent lost commit responses the judge counted as committed
    retries: Counter[str] = field(default_factory=Counter)  # re-runs by SQLSTATE
    exhausted: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # ok / Class:reason
    problems: list[str] = field(default_factory=list)
    ops_done: int = 0  # worker operations completed
    workflows_admitted: int = 0  # Runs created (acknowledged admissions)
    outages: list[Outage] = field(default_factory=list)  # the server went away and came back
    ambiguous: int = 0  # commits whose response was lost, resolved from durable state
    unreachable: str | None = None  # set when the run stopped because the server stayed away

    @property
    def unchecked(self) -> bool:
        """No worker operation was planned (--ops 0) and nothing went wrong: the setup's admissions are
        no concurrent history, so the run is no evidence either way (no verdict, never a pass)."""
        return not self.problems and self.unreachable is None and self.config.ops == 0

    @property
    def passed(self) -> bool:
        return not self.problems and self.unreachable is None and not self.unchecked

    @property
    def conflicts(self) -> int:
        return sum(n for k, n in self.outcomes.items() if k.startswith("Conflict:"))

    @property
    def throughput(self) -> float:
        """Commits per second of the workers' phase (the setup admissions are neither timed nor counted)."""
        return (self.commits - self.setup_commits) / self.seconds if self.seconds > 0 else 0.0

    def progress(self) -> str:
        c = self.config
        return (f"{self.ops_done} of {c.k * c.ops} ops, {self.transactions} transactions, {self.commits} commits, "
                f"{self.workflows_admitted} workflows admitted")

    def outage_text(self) -> str:
        if not self.outages:
            return ""
        total = sum(o.seconds for o in self.outages)
        return f", {len(self.outages)} outage(s) lasting {total:.1f} s, {self.ambiguous} lost commit response(s)"

    def granted_text(self) -> str:
        """What the judge accepted beyond `now` order (concurrency_history), when it accepted anything."""
        granted = [f"{n} {what}" for n, what in ((self.placed_earlier, "read(s) placed earlier"),
                                                 (self.assumed_committed, "silent lost commit(s) assumed committed"))
                   if n]
        return f" ({', '.join(granted)})" if granted else ""

    def line(self) -> str:
        c = self.config
        head = f"concurrency {c.backend}[{c.variant}] K={c.k}"
        if self.unreachable is not None:
            return f"{head}: STORAGE UNREACHABLE — {self.unreachable}; got through {self.progress()}, " \
                   f"{self.seconds:.2f} s{self.outage_text()}"
        if self.unchecked:
            return f"{head}: NO VERDICT — no worker operation ran ({c.k}×{c.ops} ops): nothing concurrent was checked"
        verdict = "PASS" if self.passed else f"FAIL ({len(self.problems)} problem(s))"
        return (f"{head}: {verdict} — {c.k}×{c.ops} ops, {self.workflows_admitted} workflows, {self.commits} commits, "
                f"{sum(self.retries.values())} retries, {self.exhausted} retry_exhausted, {self.conflicts} conflicts, "
                f"{self.replayed} replayed{self.granted_text()}, {self.seconds:.2f} s, "
                f"{self.throughput:.0f} commits/s{self.outage_text()}")

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.config.variant, "k": self.config.k, "ops": self.config.ops, "passed": self.passed,
                "unchecked": self.unchecked,
                "seconds": round(self.seconds, 3), "transactions": self.transactions, "commits": self.commits,
                "setupCommits": self.setup_commits, "replayed": self.replayed,
                "placedEarlier": self.placed_earlier, "assumedCommitted": self.assumed_committed,
                "retries": dict(self.retries), "retryExhausted": self.exhausted,
                "conflicts": self.conflicts, "outcomes": dict(self.outcomes),
                "commitsPerSecond": round(self.throughput, 1), "problems": self.problems,
                "storageUnreachable": self.unreachable,
                "progress": {"opsCompleted": self.ops_done, "opsPlanned": self.config.k * self.config.ops,
                             "transactions": self.transactions, "commits": self.commits,
                             "workflowsAdmitted": self.workflows_admitted},
                "outages": [{"startedSeconds": round(o.started_s, 3), "seconds": round(o.seconds, 3)}
                            for o in self.outages],
                "lostCommitResponses": self.ambiguous}


def _through_outages(reach: Reachability, action: Callable[[], T],
                     transient: tuple[type[BaseException], ...] = ()) -> T:
    """`action()`, waiting out an outage and trying again (idempotent actions only). A snapshot is
    read on a pooled connection as is: one the restarted server no longer knows fails with a
    `transient` driver error (PostgreSQL: OperationalError, and the pool discards it)."""
    while True:
        try:
            return action()
        except Unavailable as e:
            if e.reason not in OUTAGE_REASONS:
                raise
            reach.wait()
        except transient:
            reach.wait()


def run_concurrency(store: ConcurrencyStore, config: ConcurrencyConfig, *,
                    after_transaction: Callable[[int], None] | None = None,
                    on_event: Callable[[str], None] | None = None) -> ConcurrencyReport:
    """One run against `store`, fresh and empty.

    `after_transaction(n)` is called (from the worker's thread) after the n-th logged transaction:
    fault injection hooks in there. `on_event` receives outage messages as they happen.
    """
    log: list[TransactionLog] = []
    clock = ScaledClock(config.factor)
    reach = Reachability("", config.reconnect_window_s, on_event=on_event, probe_fn=lambda _: store.probe())
    lock = threading.Lock()

    def observe(entry: TransactionLog) -> None:
        with lock:
            log.append(entry)
            n = len(log)
        if after_transaction is not None:
            after_transaction(n)

    report = ConcurrencyReport(config)
    workers: list[Worker] = []
    snapshot: Snapshot | None = None
    start = time.perf_counter()
    with store.quiet():
        port = store.port(config.k, clock, config.variant, observe)
        try:
            world = World(max_workflows=max(config.max_workflows, config.workflows))
            for i in range(config.workflows):
                world.plans.append(workflow_plan(i, clock.peek()))
                plan = world.plans[-1]

                def admit(p: Record = plan) -> Record:  # bound now: this iteration's plan
                    return port.execute("admit_workflow", {"plan": p})

                _through_outages(reach, admit, store.transient)
            report.setup_commits = port.stats.commits
            workers = [Worker(i, port, world, config.ops, config.seed, clock.peek, reach.wait)
                       for i in range(config.k)]
            threads = [threading.Thread(target=w.run, name=w.worker_id) for w in workers]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if reach.gave_up is None:
                snapshot = _through_outages(reach, port.snapshot, store.transient)
        except StorageUnreachable:  # recorded in `reach.gave_up`, which becomes report.unreachable below
            pass
        finally:
            report.seconds = time.perf_counter() - start
            port.close()
    report.unreachable = reach.gave_up
    report.outages = list(reach.outages)
    report.ops_done = sum(w.done for w in workers)
    report.transactions, report.commits = len(log), port.stats.commits
    report.retries, report.exhausted = port.stats.retries, port.stats.exhausted
    report.outcomes = Counter("ok" if "ok" in e.outcome else f"{e.outcome['error']['class']}:"
                              f"{e.outcome['error']['reason']}" for e in log)
    report.workflows_admitted = sum(1 for e in log if e.name == "admit_workflow"
                                    and e.outcome.get("ok", {}).get("status") == "created")
    report.problems += [f"worker {w.worker_id} crashed: {type(w.crash).__name__}: {w.crash}"
                        for w in workers if w.crash is not None]
    if snapshot is None:
        return report
    report.ambiguous = sum(e.ambiguous for e in log)
    report.problems += history.event_problems(snapshot)
    report.problems += history.invariant_problems(snapshot, clock.peek())
    replay = history.replay_history(log, snapshot)
    report.replayed, report.placed_earlier, report.assumed_committed = (replay.replayed, replay.placed_earlier,
                                                                        replay.assumed_committed)
    report.problems += replay.problems
    return report


def concurrency_check(k: int = 4, ops: int = 60, *, seed: int = 0, variant: str = "correct", factor: int = 20,
                      workflows: int = 3, max_workflows: int | None = None, backend: str = "postgres",
                      server: Any = None, host: ConcurrencyHost | None = None,
                      reconnect_window_s: float = DEFAULT_RECONNECT_WINDOW_S,
                      after_transaction: Callable[[int], None] | None = None,
                      on_event: Callable[[str], None] | None = None) -> ConcurrencyReport:
    """Run the check in a fresh store of `backend` (its registered ConcurrencyHost, built with
    `server=` when given: PostgreSQL's default is the process's shared server).

    A store that cannot be set up (the server is unreachable) gives a report with `unreachable`
    set, like an outage during the run.
    """
    name = backend if host is None else host.name
    if host is None:
        host = registry.get(backend).concurrency_host(**({"server": server} if server is not None else {}))
    if variant not in host.variants:
        raise ValueError(f"backend {host.name} has no concurrency variant {variant!r} (known: {sorted(host.variants)})")
    config = ConcurrencyConfig(k=k, ops=ops, workflows=workflows,
                               max_workflows=max_workflows if max_workflows is not None else 2 * workflows,
                               factor=factor, seed=seed, variant=variant, backend=name,
                               reconnect_window_s=reconnect_window_s)
    try:
        store = host.open_store()
    except StoreSetupFailed as e:
        return ConcurrencyReport(config, unreachable=str(e))
    try:
        return run_concurrency(store, config, after_transaction=after_transaction, on_event=on_event)
    finally:
        store.close()
