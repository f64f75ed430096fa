"""Incremental conformance checks (conformance/lockstep/compare.py): only the kinds a step wrote are read back
and compared, a periodic full comparison proves the ports' write accounts complete, and invariants
are not re-evaluated on the very same snapshot at the same clock. The verdicts and the first
divergence must be exactly those of the full comparison after every step (full_every=1)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.lockstep import compare as lockstep
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import (
    FULL_EVERY,
    LockstepResult,
    load_invariant_check,
    run_lockstep,
    written_by_model,
)
from qlwf.conformance.traces.format import Trace, model_step
from qlwf.impl.commands.store import Store
from qlwf.impl.port import SNAPSHOT_KINDS, ChangeTracking
from qlwf.impl.sql_adapter import WRITES
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.codec import ADMISSION_STEPS_TABLE
from qlwf.impl.sqlite.store import SqliteStore
from qlwf.model.state import State

INVARIANTS = load_invariant_check()
SEED = 20261129


def outcome(result: LockstepResult) -> dict[str, Any]:
    """Everything a run reports except its timings."""
    return {"trace": result.trace, "steps": result.steps, "checks": result.invariant_checks,
            "divergence": None if result.divergence is None else result.divergence.to_json()}


def both(trace: Trace, port_factory: Any, full_every: int = FULL_EVERY) -> tuple[LockstepResult, LockstepResult]:
    results = []
    for every in (1, full_every):
        with port_factory() as port:
            results.append(run_lockstep(trace, port, invariants=INVARIANTS, full_every=every))
    return results[0], results[1]


def test_every_writing_method_of_the_store_protocol_names_the_kind_it_writes() -> None:
    writing = {name for name, _ in inspect.getmembers(Store, inspect.isfunction)
               if name.startswith(("insert_", "cas_"))}
    assert writing == set(WRITES)
    assert set(WRITES.values()) <= set(SNAPSHOT_KINDS)


def test_written_kinds_and_partial_snapshots_agree_with_the_whole_store() -> None:
    trace = generate(SEED)
    with SqliteAdapter() as port:
        assert isinstance(port, ChangeTracking)
        state = State(clock=trace.initial_clock)
        for step in trace.steps:
            done = model_step(state, step)
            if step["op"] == "command":
                lockstep.backend_outcome(port, step["name"], step["args"], done.state.clock)
            written = port.written_kinds()
            # a correct backend writes what the model writes (a failed try may add kinds, never drop one)
            assert written_by_model(state, done.state) <= written, step
            whole = port.snapshot()
            for kinds in (written, frozenset(SNAPSHOT_KINDS), frozenset()):
                assert port.snapshot_kinds(kinds) == {k: v for k, v in whole.items() if k in kinds}
            assert port.written_kinds() == frozenset()  # reading writes nothing and the account was reset
            state = done.state


@pytest.mark.parametrize("trace", [*runner.corpus_traces(), *runner.generated_traces(3, SEED)],
                         ids=lambda t: t.name or t.description[:40])
def test_incremental_verdicts_equal_the_full_comparison(trace: Trace) -> None:
    full, incremental = both(trace, SqliteAdapter)
    assert outcome(incremental) == outcome(full)
    assert incremental.passed


class LedgerSkippingStore(SqliteStore):
    """Broken: forgets the ledger entries of frontier mutations."""

    def insert_mutation(self, entry: dict[str, Any]) -> None:
        if not entry["mutationId"].startswith("workflow-frontier:"):
            super().insert_mutation(entry)


class CounterForgettingStore(SqliteStore):
    """Broken: the Run compare-and-set of a lease claim does not advance eventSequence."""

    def cas_run(self, guard: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        if guard == "counters" and new["version"] == old["version"] + 1:
            new = new | {"eventSequence": old["eventSequence"]}
        super().cas_run(guard, old, new)


@pytest.mark.parametrize("store", [LedgerSkippingStore, CounterForgettingStore])
def test_a_broken_backend_gets_the_same_first_divergence_report(store: type[SqliteStore]) -> None:
    found = 0
    for trace in [*runner.corpus_traces(), *runner.generated_traces(6, SEED)]:
        full, incremental = both(trace, lambda: SqliteAdapter(store_factory=store))
        assert outcome(incremental) == outcome(full)
        assert incremental.divergence is None or (full.divergence is not None
                                                  and incremental.divergence.render() == full.divergence.render())
        found += not full.passed
        if found == 3:
            break
    assert found  # the broken stores are caught at all


class HiddenWriter(SqliteAdapter):
    """Deletes one admission step behind its own write account after its `at`-th command: a write
    outside every kind it reports, which only a whole-store comparison can see."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.commands = at, 0

    def execute(self, name: str, args: Any, now: int | None = None) -> dict[str, Any]:
        try:
            return super().execute(name, args, now)
        finally:
            self.commands += 1
            if self.commands == self.at:
                self.connection.execute(f'DELETE FROM "{ADMISSION_STEPS_TABLE}" WHERE rowid = '
                                        f'(SELECT min(rowid) FROM "{ADMISSION_STEPS_TABLE}")')


def quiet_stretches(every: int) -> Iterator[tuple[Trace, int, int]]:
    """(trace, command number, step index) where admission steps exist after that command and the
    model writes no admission step in that step nor during the next `every` steps."""
    for trace in runner.generated_traces(20, SEED):
        states, commands = [State(clock=trace.initial_clock)], []
        for i, step in enumerate(trace.steps):
            states.append(model_step(states[-1], step).state)
            if step["op"] == "command":
                commands.append(i)
        for n, i in enumerate(commands, start=1):
            window = range(i, min(i + 1 + every, len(trace.steps) - 1))  # the command's own step included
            if (len(window) == every + 1 and states[i + 1].admission_steps
                    and all("admissionSteps" not in written_by_model(states[j], states[j + 1]) for j in window)):
                yield trace, n, i
                break


def test_a_write_outside_the_reported_kinds_is_caught_by_the_periodic_full_comparison() -> None:
    every = 4
    cases = list(quiet_stretches(every))[:6]
    later = 0
    for trace, command, index in cases:
        full, incremental = both(trace, lambda c=command: HiddenWriter(c), full_every=every)
        assert full.divergence is not None and full.divergence.step_index == index
        assert full.divergence.kind == "state"
        assert [d.to_json()["kind"] for d in full.divergence.record_diffs] == ["admissionSteps"]
        found = incremental.divergence
        assert found is not None  # still caught ...
        assert index <= found.step_index <= index + every  # ... by the next full comparison at the latest
        later += found.step_index > index  # the step itself compared incrementally: it missed the write
        if found.kind == "state":
            assert [d.to_json() for d in found.record_diffs] == [d.to_json() for d in full.divergence.record_diffs]
    assert later >= 2  # the periodic comparison, not the step's own, caught it


class CountingCheck:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, state: State) -> list[Any]:
        self.calls += 1
        assert INVARIANTS is not None
        return INVARIANTS(state)


class AccountKeeper(SqliteAdapter):
    """Remembers every write account it gave."""

    def __init__(self) -> None:
        super().__init__()
        self.accounts: list[frozenset[str]] = []

    def written_kinds(self) -> frozenset[str]:
        self.accounts.append(super().written_kinds())
        return self.accounts[-1]


def test_invariants_are_reused_only_on_the_same_snapshot_at_the_same_clock() -> None:
    trace = generate(SEED)
    check = CountingCheck()
    with AccountKeeper() as port:  # cross_check: steps the exact read-back decides are evaluated too
        result = run_lockstep(trace, port, invariants=check, full_every=len(trace.steps) + 1, cross_check=True)
    assert result.passed and result.invariant_checks == len(trace.steps)
    same = 0  # steps after the first and before the last (read whole) where nothing changed, clock included
    state = State(clock=trace.initial_clock)
    for i, step in enumerate(trace.steps):
        after = model_step(state, step).state
        same += (0 < i < len(trace.steps) - 1 and not written_by_model(state, after) and not port.accounts[i]
                 and after.clock == state.clock)
        state = after
    assert same > 0
    assert check.calls == len(trace.steps) - same == result.invariant_evaluations


@pytest.mark.postgres
def test_postgres_partial_snapshots_and_verdicts_equal_the_full_comparison(pg_server: Any) -> None:
    from qlwf.conformance.backends.postgres import PostgresBackend

    factory = PostgresBackend()
    try:
        for trace in [*runner.corpus_traces()[:6], generate(SEED)]:  # invariants: the same code as on SQLite
            results = []
            for every in (1, FULL_EVERY):
                port = factory.open()
                try:
                    results.append(outcome(run_lockstep(trace, port, full_every=every)))
                    assert isinstance(port, ChangeTracking)
                    whole = port.snapshot()
                    for kinds in (frozenset({"runs", "events"}), frozenset(SNAPSHOT_KINDS)):
                        assert port.snapshot_kinds(kinds) == {k: v for k, v in whole.items() if k in kinds}
                finally:
                    port.close()
            assert results[0] == results[1]
    finally:
        factory.shutdown()
