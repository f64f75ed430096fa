"""`qlwf check --self-test`: plant one fault per layer and require the owning check to turn red.

A gate that passes is only worth something if it fails on a broken system. Each fault below is a
plausible bug in one layer of the mutant manifest (a model rule, a decision-table row, a proof
encoding, an implementation's command sequence, a SQLite storage statement, a PostgreSQL storage
statement, a schema constraint). It is planted in a fresh forked process, the check that owns the
layer runs there with the quick budgets, and the self-test passes
only if that check reports `failed` — not `unknown` (no evidence is no detection) and not `passed`.
A fault that cannot be planted (its target text or attribute no longer exists) is a self-test
failure too, so the catalogue cannot rot silently. The faults are entries of the mutant manifest
(conformance/mutants, docs/decisions.md Q-28), one per layer, planted here through the owning gate check.

The checks that own no manifest layer get a fault of their own (decisions Q-89): a store that
commits in the middle of a command, for each backend's crash-injection check, a driver whose
change lists leave out updates, for the driver-process check, and a clock read before the locks,
for the concurrency check, which gets several runs since only some interleavings expose a race
(Q-92), an identifier recipe for the spec-vectors check and the snapshot input shape for the
oracle-examples check. So every gate check is shown to fail (tests/app/gate/test_selftest.py).
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from qlwf.gate.checks import CHECKS
from qlwf.gate.verdict import Check, CheckResult, load_floors, run_checks

CHILD_MARGIN_SECONDS = 30.0


class NotPlanted(Exception):
    """The fault's target no longer exists: the catalogue must be updated."""


@dataclass(frozen=True)
class Fault:
    name: str
    layer: str
    check: str  # the gate check that owns the layer and must catch the fault
    breaks: str  # the spec rule the fault violates
    plant: Callable[[], None]  # runs in the child process only
    mutant: str | None = None  # the mutant manifest entry it plants
    tries: int = 1  # runs of the check, for a race that only some interleavings expose


class _Assign:
    """A patcher whose patches are never undone: the fault lives and dies with the forked child."""

    def setattr(self, target: Any, name: str, value: Any) -> None:
        setattr(target, name, value)

    def setitem(self, mapping: Any, name: Any, value: Any) -> None:
        mapping[name] = value


def _manifest_fault(name: str, layer: str, check: str, mutant: str) -> Fault:
    """A fault planted from the mutant manifest (conformance/mutants), which names the rule it breaks."""
    from qlwf.conformance import mutants

    entry = next((m for m in mutants.MANIFEST if m.name == mutant), None)

    def plant() -> None:
        if entry is None or entry.plant is None:
            raise NotPlanted(f"the mutant manifest has no plantable {mutant}")
        try:
            entry.plant(_Assign())
        except mutants.NotPlanted as e:
            raise NotPlanted(str(e)) from e

    return Fault(name, layer, check, entry.breaks if entry else f"(manifest entry {mutant} missing)", plant, mutant)


# The store class of each backend and the statement that opens its next transaction (storage.md §6).
_STORES = {"sqlite": ("qlwf.impl.sqlite.store", "SqliteStore", "BEGIN IMMEDIATE"),
           "postgres": ("qlwf.impl.postgres.store", "PgStore", "BEGIN ISOLATION LEVEL SERIALIZABLE")}


def plant_commits_each_event(patcher: Any, backend: str) -> None:
    """A store that commits after every event it appends: a command is then no longer one
    transaction, and a crash between two of its statements leaves part of it behind."""
    import importlib

    module, class_name, begin = _STORES[backend]
    cls = getattr(importlib.import_module(module), class_name, None)
    real = getattr(cls, "insert_event", None)
    if cls is None or real is None:
        raise NotPlanted(f"{module}.{class_name}.insert_event no longer exists")

    def commits_early(self: Any, event: Any) -> None:
        real(self, event)
        self.conn.execute("COMMIT")
        self.conn.execute(begin)

    patcher.setattr(cls, "insert_event", commits_early)


def serve_sqlite_driver_reporting_inserts_only() -> int:
    """The SQLite reference driver, except that its change lists report new records only: a record
    the command updated is left out, so the harness keeps the old one (the driver-protocol fault)."""
    from qlwf.impl import driver_protocol
    from qlwf.impl.sqlite import driver

    changes = driver_protocol.Server._changes

    def inserts_only(self: Any, port: Any) -> list[Any]:
        known = {kind: set(records) for kind, records in self._sent.items()}
        return [c for c in changes(self, port) if tuple(c["key"]) not in known[c["kind"]]]

    driver_protocol.Server._changes = inserts_only  # type: ignore[method-assign]
    return driver.main()


def _driver_reports_inserts_only() -> None:
    from qlwf.conformance.exec import port as exec_port

    if not hasattr(exec_port, "register_driver"):
        raise NotPlanted("qlwf.conformance.exec.port.register_driver no longer exists")
    exec_port.register_driver("exec-sqlite", [sys.executable, "-c", "import sys, qlwf.gate.selftest as s; "
                                              "sys.exit(s.serve_sqlite_driver_reporting_inserts_only())"])


def plant_clock_read_before_locks(patcher: Any) -> None:
    """`now` read before the lock phase instead of under the locks (storage.md §7, D-8): a command can
    then stamp its events earlier than an event another transaction committed on the same Run while
    it waited for the lock. Only concurrent commands expose it, and only in some interleavings."""
    from qlwf.impl import sql_adapter
    from qlwf.impl.commands.context import StoreTx
    from qlwf.impl.commands.loads import Loads

    if not hasattr(sql_adapter, "run_command"):
        raise NotPlanted("qlwf.impl.sql_adapter.run_command no longer exists")

    def run_command(store: Any, fail: Any, clock: Any, command: Any, prepared: Any,
                    on_now: Callable[[int], None] | None = None) -> Any:
        now = clock.read(store.database_time)
        command.lock(store, fail, prepared)
        if on_now is not None:
            on_now(now)
        return command.run(StoreTx(store, Loads(store, fail), fail, now), prepared)

    patcher.setattr(sql_adapter, "run_command", run_command)


def _attempt_id_omits_version() -> None:
    """The attempt id hashed without the StepRun version: attempts admitted at two ready epochs of one
    StepRun would share an id."""
    from qlwf.model import ids
    from qlwf.model import tables as T
    from qlwf.model.canonical import id_hash

    if not hasattr(ids, "task_attempt_ids"):
        raise NotPlanted("qlwf.model.ids.task_attempt_ids no longer exists")

    def task_attempt_ids(pd: str, step_run_id: str, step_run_version: int) -> tuple[str, str]:
        del step_run_version  # the fault: left out of the hash
        a = id_hash(T.DOMAIN_TASK_ATTEMPT_ID, pd, step_run_id)
        return f"wta:{a[:32]}", f"wte:{a[:32]}"

    ids.task_attempt_ids = task_attempt_ids


def _snapshot_attempt_refuses_executor_handle() -> None:
    """The generic RunAttempt key set without `executorHandle`: a ql3 snapshot attempt that carries one
    is refused, although the model-shaped attempt it stands for resolves."""
    from qlwf.model import record_attempt as home
    from qlwf.model import records

    # Planted where the key set is read (records.py is a facade over one module per record), and
    # checked through the facade's function, so a later move is NotPlanted rather than a no-op.
    if "executorHandle" not in getattr(home, "GENERIC_ATTEMPT_KEYSET", ()):
        raise NotPlanted(f"{home.__name__}.GENERIC_ATTEMPT_KEYSET has no executorHandle to leave out")
    home.GENERIC_ATTEMPT_KEYSET = home.GENERIC_ATTEMPT_KEYSET - {"executorHandle"}
    if records.foreign_attempt_keys({"executorHandle": None}) != ["executorHandle"]:
        raise NotPlanted("foreign_attempt_keys does not read the planted GENERIC_ATTEMPT_KEYSET")



FAULTS: tuple[Fault, ...] = (
    _manifest_fault("ready-while-need-running", "model rule", "explorer", "ready_while_need_running"),
    _manifest_fault("settle-leased-claim", "decision table row", "explorer", "convergence_settles_leased_claim"),
    _manifest_fault("recovery-refuses-intent", "proof encoding", "proofs", "recovery-refuses-intent"),
    _manifest_fault("admission-ignores-intent", "impl command sequence", "conform-sqlite",
                    "task-admission-ignores-intent"),
    _manifest_fault("sqlite-active-without-running", "SQLite storage statement", "conform-sqlite",
                    "sqlite-active-without-running"),
    _manifest_fault("postgres-active-without-running", "PostgreSQL storage statement", "conform-postgres",
                    "pg-active-without-running"),
    _manifest_fault("step-key-unique-across-runs", "schema constraint", "conform-sqlite",
                    "sqlite-step-key-unique-across-runs"),
    Fault("sqlite-commits-each-event", "SQLite transaction boundary", "faults-sqlite",
          "storage.md §4: any failure rolls back the whole transaction",
          lambda: plant_commits_each_event(_Assign(), "sqlite")),
    Fault("postgres-commits-each-event", "PostgreSQL transaction boundary", "faults-postgres",
          "storage.md §4: any failure rolls back the whole transaction",
          lambda: plant_commits_each_event(_Assign(), "postgres")),
    Fault("driver-reports-inserts-only", "driver protocol", "exec-sqlite",
          "docs/protocol.md: the changes are every record added or changed since the state last returned",
          _driver_reports_inserts_only),
    Fault("attempt-id-omits-version", "identifier recipe", "spec-vectors",
          "records.md §7: A = id_hash(task-attempt-id domain, pd, stepRunId, dec(stepRun.version at admission))",
          _attempt_id_omits_version),
    Fault("snapshot-attempt-refuses-executor-handle", "snapshot input shape", "oracle-examples",
          "records.md §6.7: a snapshot attempt may carry the generic RunAttempt keys, executorHandle among them",
          _snapshot_attempt_refuses_executor_handle),
    # one quick run missed it in 12 of 160 under load (about 8 %): six runs, about 3e-7 if independent
    Fault("clock-read-before-locks", "PostgreSQL lock phase", "concurrency-postgres",
          "storage.md §7 (D-8): now is read once after the Run row lock is held",
          lambda: plant_clock_read_before_locks(_Assign()), tries=6),
)


@dataclass
class FaultResult:
    fault: Fault
    verdict: str  # the owning check's verdict with the fault planted
    summary: str

    @property
    def caught(self) -> bool:
        return self.verdict == "failed"


def _child(fault: Fault, check: Check, floors: dict[str, int] | None, limit: float, conn: Connection) -> None:
    try:
        fault.plant()
        # fail_fast: a planted fault the corpus already shows needs no generated traces to fail the check.
        # The check's own time limit comes first, so a hang is reported from here (unknown: not caught).
        opts = {"quick": True, "fail_fast": True, "check_timeout": limit / fault.tries}
        runs = 0
        while True:  # until a run fails, has no evidence, or the tries are used up
            runs += 1
            (result,) = run_checks([check], opts, floors={check.name: floors or {}})
            if result.status != "passed" or runs == fault.tries:
                break
        tried = f" (run {runs} of at most {fault.tries})" if fault.tries > 1 else ""
        conn.send((result.status, result.summary + tried))
    except NotPlanted as e:
        conn.send(("not planted", str(e)))
    except BaseException as e:  # report anything, never hang the parent
        conn.send(("error", f"{type(e).__name__}: {e} {traceback.format_exc(limit=3)}"))
    finally:
        conn.close()


class _Running:
    """One fault's check running in its own forked process."""

    def __init__(self, fault: Fault, timeout: float) -> None:
        check = next(c for c in CHECKS if c.name == fault.check)
        floors = load_floors()["quick"].get(check.name)
        ctx = multiprocessing.get_context("fork")  # the fault lives and dies with the child
        self.fault = fault
        self.start = time.perf_counter()
        self.conn, child = ctx.Pipe(duplex=False)
        # the child stops its check a little before this process stops waiting for it
        limit = max(timeout - CHILD_MARGIN_SECONDS, timeout / 2)
        self.proc = ctx.Process(target=_child, args=(fault, check, floors, limit, child))
        self.proc.start()
        child.close()

    @property
    def ended(self) -> list[Any]:
        """What `multiprocessing.connection.wait` reports once this fault has a verdict or its child died."""
        return [self.conn, self.proc.sentinel]

    def finish(self, timeout: float) -> tuple[FaultResult, float]:
        """The verdict, waiting for it until `timeout` seconds after the fault was planted."""
        try:
            if self.conn.poll(max(0.0, self.start + timeout - time.perf_counter())):
                verdict, summary = self.conn.recv()
            else:
                verdict, summary = "error", f"no verdict within {timeout:.0f} s"
        except EOFError:
            verdict, summary = "error", f"the check process died (exit {self.proc.exitcode})"
        finally:
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
        return FaultResult(self.fault, verdict, summary), round(time.perf_counter() - self.start, 3)


def self_test(skip: frozenset[str] = frozenset(), progress: Any = None, jobs: int = 2,
              timeout: float = 300.0) -> list[CheckResult]:
    """One gate result per fault (in catalogue order): passed when its owning check caught it.

    Up to `jobs` faults run at once, each in its own process."""
    legs = {c.name: c.leg for c in CHECKS}
    done: dict[str, CheckResult] = {}
    queue = [f for f in FAULTS if legs[f.check] not in skip]
    for f in FAULTS:
        if legs[f.check] in skip:
            done[f.name] = CheckResult(f"self-test:{f.name}", "skipped", 0.0,
                                       f"skipped by request (--skip {legs[f.check]})")
    running: list[_Running] = []
    while queue or running:
        while queue and len(running) < max(1, jobs):
            fault = queue.pop(0)
            if progress is not None:
                print(f"qlwf check --self-test: planting {fault.name} ({fault.layer}) → {fault.check}",
                      file=progress, flush=True)
            running.append(_Running(fault, timeout))
        # whichever fault ends first frees its slot (and is timed) at once, not after those planted before it
        first_deadline = min(r.start for r in running) + timeout
        ready = set(wait([obj for r in running for obj in r.ended], max(0.0, first_deadline - time.perf_counter())))
        for current in [r for r in running if ready & set(r.ended) or time.perf_counter() >= r.start + timeout]:
            running.remove(current)
            r, seconds = current.finish(timeout)
            done[r.fault.name] = _result(r, seconds)
            if progress is not None:
                print(f"qlwf check --self-test: {r.fault.name}: {done[r.fault.name].status} in {seconds:.1f} s",
                      file=progress, flush=True)
    return [done[f.name] for f in FAULTS]


def _result(r: FaultResult, seconds: float) -> CheckResult:
    f = r.fault
    if r.caught:
        status, summary = "passed", f"{f.layer} fault caught by {f.check}: {r.summary}"
    elif r.verdict == "unknown":
        status, summary = "unknown", f"{f.check} had no evidence with the fault planted: {r.summary}"
    else:
        status, summary = "failed", f"{f.layer} fault NOT caught by {f.check} ({r.verdict}): {r.summary}"
    return CheckResult(f"self-test:{f.name}", status, seconds, summary, [f"breaks: {f.breaks}"],
                       {"caught": int(r.caught)}, {"caught": 1})
