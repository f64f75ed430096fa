"""The command port every storage backend implements (commands.md §1.3, §3; storage.md §7).

A backend executes the commands of commands.md §3 one at a time, each writing command as one
transaction (converge_cancellation_page: one per workflow), raising the model's typed errors
(`qlwf.model.errors`), and offers a read-only `snapshot()` in the model's canonical form.

Time is an input (D-8): a backend reads its observation time through an injectable `Clock`, once
per transaction. Conformance runs use a `FixedClock` whose value the harness sets per step (the
`now` argument of `execute`); production uses `DatabaseClock`, which asks the database.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from qlwf.model import tables as T
from qlwf.model.records import KIND_KEYS

Record = dict[str, Any]
Snapshot = dict[str, list[Record]]

# The record kinds of `snapshot()`, in the model's order: the kinds of the record vocabulary
# (model/records.py KIND_KEYS, from which model/state.py TABLES is read too); each list is sorted
# by the kind's key (commands.md §1.3).
SNAPSHOT_KINDS: tuple[str, ...] = tuple(KIND_KEYS)

# Every command of commands.md §3.
COMMAND_NAMES: tuple[str, ...] = tuple(T.COMMAND_OUTCOMES)


class Clock(Protocol):
    """Source of a command's observation time, read once per transaction."""

    def read(self, database_time: Callable[[], int]) -> int:
        """Return `now`; `database_time` reads the database clock inside the current transaction."""
        ...


class FixedClock:
    """Conformance clock: returns the harness clock value of the current step (storage.md §7)."""

    def __init__(self, value: int = 0) -> None:
        self.value = 0
        self.set(value)

    def set(self, value: int) -> None:
        if type(value) is not int or value < 0:
            raise ValueError(f"clock value must be an int >= 0, got {value!r}")
        self.value = value

    def read(self, database_time: Callable[[], int]) -> int:
        return self.value


class DatabaseClock:
    """Production clock: the database's own time, read under the write lock (storage.md §7)."""

    def read(self, database_time: Callable[[], int]) -> int:
        return database_time()


class CommandPort(ABC):
    """One storage backend holding one durable store."""

    clock: Clock

    @abstractmethod
    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        """Run command `name` with `args`; return its result record or raise a `QlwfError`.

        `now`, when given, is the harness observation time of this step: the port's clock must then
        be a `FixedClock`, which is set to it before the command runs. The clock is still read once
        inside the command's transaction. Unknown command names raise `ValueError`.
        """

    def seed_evidence(self, evidence: Record | None) -> None:
        """The ql3 evidence of the next `admit_task_attempt` (its Task reconciliation receipt and execution
        revision, task-attempts.md §3A; None where the step's binding is not derivable), given just before
        it runs. A store that takes the binding as given, like both built-in ones, ignores it; a store
        that derives the binding from stored records (an exec driver of ql3's adapters) seeds them from it."""
        del evidence  # the binding is taken as given

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """Every durable record in canonical form, per `SNAPSHOT_KINDS`, sorted by key; never reads the clock."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; later operations fail with Unavailable `storage_closed`."""

    # ---- one method per command (commands.md §3); each is `execute` with the command's arguments ----
    def admit_workflow(self, plan: Record, now: int | None = None) -> Record:
        return self.execute("admit_workflow", {"plan": plan}, now)

    def frontier_candidates(self, page: Record, now: int | None = None) -> Record:
        return self.execute("frontier_candidates", page, now)

    def advance_frontier(self, run_id: str, now: int | None = None) -> Record:
        return self.execute("advance_frontier", {"runId": run_id}, now)

    def task_candidates(self, page: Record, now: int | None = None) -> Record:
        return self.execute("task_candidates", page, now)

    def admit_task_attempt(self, run_id: str, step_run_id: str, binding: Record, now: int | None = None) -> Record:
        return self.execute("admit_task_attempt", {"runId": run_id, "stepRunId": step_run_id, "binding": binding}, now)

    def claim_lease(self, attempt_id: str, worker_id: str, duration_ms: int, now: int | None = None) -> Record:
        return self.execute("claim_lease", {"attemptId": attempt_id, "workerId": worker_id, "durationMs": duration_ms},
                            now)

    def renew_lease(self, attempt_id: str, worker_id: str, lease_generation: int, duration_ms: int,
                    now: int | None = None) -> Record:
        return self.execute("renew_lease", {"attemptId": attempt_id, "workerId": worker_id,
                                            "leaseGeneration": lease_generation, "durationMs": duration_ms}, now)

    def release_lease(self, attempt_id: str, worker_id: str, lease_generation: int, reason: str,
                      now: int | None = None) -> Record:
        return self.execute("release_lease", {"attemptId": attempt_id, "workerId": worker_id,
                                              "leaseGeneration": lease_generation, "reason": reason}, now)

    def start_attempt(self, attempt_id: str, worker_id: str, lease_generation: int, timeout_ms: int | None,
                      now: int | None = None) -> Record:
        return self.execute("start_attempt", {"attemptId": attempt_id, "workerId": worker_id,
                                              "leaseGeneration": lease_generation, "timeoutMs": timeout_ms}, now)

    def record_running(self, attempt_id: str, worker_id: str, lease_generation: int, now: int | None = None) -> Record:
        return self.execute("record_running", {"attemptId": attempt_id, "workerId": worker_id,
                                               "leaseGeneration": lease_generation}, now)

    def fail_start(self, attempt_id: str, worker_id: str, lease_generation: int, now: int | None = None) -> Record:
        return self.execute("fail_start", {"attemptId": attempt_id, "workerId": worker_id,
                                           "leaseGeneration": lease_generation}, now)

    def complete_attempt(self, attempt_id: str, worker_id: str, lease_generation: int, exit_code: int,
                         now: int | None = None) -> Record:
        return self.execute("complete_attempt", {"attemptId": attempt_id, "workerId": worker_id,
                                                 "leaseGeneration": lease_generation, "exitCode": exit_code}, now)

    def recovery_candidates(self, page: Record, now: int | None = None) -> Record:
        return self.execute("recovery_candidates", page, now)

    def recover_attempt(self, attempt_id: str, evidence: str, now: int | None = None) -> Record:
        return self.execute("recover_attempt", {"attemptId": attempt_id, "evidence": evidence}, now)

    def request_cancel(self, run_id: str, reason: str, actor: Record, now: int | None = None) -> Record:
        return self.execute("request_cancel", {"runId": run_id, "reason": reason, "actor": actor}, now)

    def cancellation_candidates(self, page: Record, now: int | None = None) -> Record:
        return self.execute("cancellation_candidates", page, now)

    def converge_cancellation(self, run_id: str, now: int | None = None) -> Record:
        return self.execute("converge_cancellation", {"runId": run_id}, now)

    def converge_cancellation_page(self, page: Record, now: int | None = None) -> Record:
        return self.execute("converge_cancellation_page", page, now)

    def set_step_time(self, now: int | None) -> None:
        if now is None:
            return
        if not isinstance(self.clock, FixedClock):
            raise TypeError("a step time can only be injected into a backend whose clock is a FixedClock")
        self.clock.set(now)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@runtime_checkable
class FaultInjection(Protocol):
    """Optional capability used by drift traces: overwrite one stored record behind the commands' back.

    `kind` is a snapshot kind, `key` the record's key (a list), `patch` maps record keys to new
    values (JSON null removes an optional key, or stores null for a StepRun's nullable key). The
    write bypasses digests, mirrors and row checks, exactly as a corrupted store would look.
    """

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None: ...


@runtime_checkable
class ChangeTracking(Protocol):
    """Optional capability for incremental conformance checks: which kinds the port wrote, and a
    read-back of only some kinds.

    `written_kinds()` returns the snapshot kinds written (or attempted, rolled-back tries included)
    since the previous call, and resets; `snapshot_kinds(kinds)` returns `snapshot()` restricted to
    `kinds`. The claim is the port's own: the harness proves it by a periodic full comparison.
    """

    def written_kinds(self) -> frozenset[str]: ...

    def snapshot_kinds(self, kinds: frozenset[str]) -> Snapshot: ...
