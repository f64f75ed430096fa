"""The durable state of many workflows (commands.md §1.1) and its canonical snapshot.

States are immutable values: a command builds a new State through a `StateWriter` that copies only the
tables it writes, so the previous State stays valid and cheap to keep (Hypothesis, the explorer and
the conformance harness all hold on to old states).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .records import KIND_KEYS, Record

# The record kinds of a snapshot, in snapshot order: the kinds of the record vocabulary
# (records.KIND_KEYS), which impl's port reads too (impl/port.py SNAPSHOT_KINDS).
TABLES: tuple[str, ...] = tuple(KIND_KEYS)


@dataclass(frozen=True)
class State:
    clock: int = 0
    admissions: dict[str, Record] = field(default_factory=dict)  # planDigest → {planDigest, plan, receipt}
    admission_steps: dict[tuple[str, str], Record] = field(default_factory=dict)  # (planDigest, stepKey)
    runs: dict[str, Record] = field(default_factory=dict)
    step_runs: dict[str, Record] = field(default_factory=dict)
    mutations: dict[str, Record] = field(default_factory=dict)  # mutationId → ledger entry
    events: dict[str, tuple[Record, ...]] = field(default_factory=dict)  # runId → events by sequence
    attempts: dict[str, Record] = field(default_factory=dict)
    receipts: dict[str, Record] = field(default_factory=dict)  # attemptId → task attempt receipt
    leases: dict[str, Record] = field(default_factory=dict)  # attemptId → lease

    # ---- derived lookups (scans keep the state free of redundant indexes) -----------------------
    def admission_of_run(self, run_id: str) -> list[Record]:
        return [a for a in self.admissions.values() if a["plan"]["runId"] == run_id]

    def steps_of_run(self, run_id: str) -> list[Record]:
        return [s for s in self.step_runs.values() if s["runId"] == run_id]

    def attempts_of_run(self, run_id: str) -> list[Record]:
        return [a for a in self.attempts.values() if a["runId"] == run_id]

    def events_of(self, run_id: str) -> tuple[Record, ...]:
        return self.events.get(run_id, ())

    def ledger_of_step(self, step_run_id: str) -> list[Record]:
        return sorted((m for m in self.mutations.values() if m["stepRunId"] == step_run_id),
                      key=lambda m: m["stepRun"]["version"])

    def with_clock(self, clock: int) -> State:
        return replace(self, clock=clock)

    # ---- canonical snapshot (commands.md §1.3) ------------------------------------------------
    def snapshot(self) -> dict[str, list[Record]]:
        """Every record in canonical form, each kind sorted by its key (strings by code point)."""
        return {
            "admissions": [self.admissions[k] for k in sorted(self.admissions)],
            "admissionSteps": [self.admission_steps[k] for k in sorted(self.admission_steps)],
            "runs": [self.runs[k] for k in sorted(self.runs)],
            "stepRuns": [self.step_runs[k] for k in sorted(self.step_runs)],
            "mutations": [self.mutations[k] for k in sorted(self.mutations)],
            "events": [e for k in sorted(self.events) for e in self.events[k]],
            "attempts": [self.attempts[k] for k in sorted(self.attempts)],
            "taskReceipts": [self.receipts[k] for k in sorted(self.receipts)],
            "leases": [self.leases[k] for k in sorted(self.leases)],
        }

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any], clock: int = 0) -> State:
        """Rebuild a state from `snapshot()` output (records are taken as given)."""
        events: dict[str, list[Record]] = {}
        for e in snap.get("events", []):
            events.setdefault(e["runId"], []).append(e)
        return cls(
            clock=clock,
            admissions={a["planDigest"]: a for a in snap.get("admissions", [])},
            admission_steps={(e["planDigest"], e["stepKey"]): e for e in snap.get("admissionSteps", [])},
            runs={r["id"]: r for r in snap.get("runs", [])},
            step_runs={s["id"]: s for s in snap.get("stepRuns", [])},
            mutations={m["mutationId"]: m for m in snap.get("mutations", [])},
            events={k: tuple(sorted(v, key=lambda e: e["sequence"])) for k, v in events.items()},
            attempts={a["id"]: a for a in snap.get("attempts", [])},
            receipts={r["attemptId"]: r for r in snap.get("taskReceipts", [])},
            leases={lease["attemptId"]: lease for lease in snap.get("leases", [])},
        )


_FIELDS = ("admissions", "admission_steps", "runs", "step_runs", "mutations", "events", "attempts", "receipts",
           "leases")


class StateWriter:
    """Copy-on-write writer over a State; `commit()` returns the new State."""

    def __init__(self, base: State, now: int) -> None:
        self.base = base
        self.now = now
        self._copies: dict[str, dict[Any, Any]] = {}

    def table(self, name: str) -> dict[Any, Any]:
        if name not in self._copies:
            self._copies[name] = dict(getattr(self.base, name))
        return self._copies[name]

    def view(self, name: str) -> dict[Any, Any]:
        table: dict[Any, Any] = self._copies.get(name, getattr(self.base, name))
        return table

    def append_event(self, event: Record) -> None:
        events = self.table("events")
        # Sequences come from the Run counters; on a drifted state they may leave a gap, which
        # INV-1/INV-2 then report (the model never asserts on stored data).
        log = events.get(event["runId"], ())
        events[event["runId"]] = (*log, event)

    def commit(self) -> State:
        return replace(self.base, clock=self.now, **self._copies)
