"""What every invariant reads: the views of a State (`SystemView`, one `RunView` per Run, gathered once so
every predicate reads the same view), the registry the `@invariant` decorator fills, and `Violation`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from . import tables as T
from .records import Record
from .state import State

TERMINAL_EVENT_TYPES = frozenset(f"workflow.{s}" for s in T.TERMINAL_RUN)


class Violation(NamedTuple):
    invariant: str
    name: str
    clause: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant} {self.name} [{self.clause}]: {self.message}"


@dataclass
class RunView:
    """Everything one Run owns, gathered once so every invariant reads the same view."""

    state: State
    run: Record

    @cached_property
    def admission(self) -> Record | None:
        found = self.state.admission_of_run(self.run["id"])
        return found[0] if len(found) == 1 else None

    @cached_property
    def plan(self) -> Record | None:
        return self.admission["plan"] if self.admission else None

    @cached_property
    def events(self) -> tuple[Record, ...]:
        return self.state.events_of(self.run["id"])

    @cached_property
    def event_by_id(self) -> dict[str, Record]:
        return {e["id"]: e for e in self.events}

    @cached_property
    def steps(self) -> list[Record]:
        return sorted(self.state.steps_of_run(self.run["id"]), key=lambda s: (s["stepKey"], s["id"]))

    @cached_property
    def step_by_key(self) -> dict[str, Record]:
        return {s["stepKey"]: s for s in self.steps}

    @cached_property
    def attempts(self) -> list[Record]:
        return sorted(self.state.attempts_of_run(self.run["id"]), key=lambda a: a["attempt"])

    @cached_property
    def _ledgers(self) -> dict[str, list[Record]]:
        by: dict[str, list[Record]] = {}
        for m in self.state.mutations.values():  # one pass; each list as State.ledger_of_step orders it
            by.setdefault(m["stepRunId"], []).append(m)
        return {k: sorted(v, key=lambda m: m["stepRun"]["version"]) for k, v in by.items()}

    def ledger_of_step(self, step_run_id: str) -> list[Record]:
        return self._ledgers.get(step_run_id, [])

    def attempts_of_step(self, step_id: str) -> list[Record]:
        return [a for a in self.attempts if a["stepRunId"] == step_id]

    @cached_property
    def cancel_event(self) -> Record | None:
        found = [e for e in self.events if e["type"] == "workflow.cancel_requested"]
        return found[0] if found else None

    @cached_property
    def _events_by_attempt(self) -> dict[str | None, list[Record]]:
        by: dict[str | None, list[Record]] = {}
        for e in self.events:  # one pass; each list in log order
            by.setdefault(e.get("attemptId"), []).append(e)
        return by

    def attempt_events(self, attempt_id: str) -> list[Record]:
        return self._events_by_attempt.get(attempt_id, [])

    @cached_property
    def _step_events(self) -> dict[str | None, list[Record]]:
        by: dict[str | None, list[Record]] = {}
        for e in self.events:
            if e["type"].startswith("step."):
                by.setdefault(e.get("stepRunId"), []).append(e)
        return by

    def step_events(self, step_run_id: str) -> list[Record]:
        """The `step.*` events of one StepRun, in log order."""
        return self._step_events.get(step_run_id, [])

    def reached_starting(self, attempt_id: str) -> bool:
        return any(e["type"] == "workflow.task_attempt.starting" for e in self.attempt_events(attempt_id))

    def terminal_attempt_event(self, attempt_id: str) -> Record | None:
        for e in self.attempt_events(attempt_id):
            if e["type"].startswith("workflow.task_attempt.") and e["type"].rsplit(".", 1)[1] in T.TERMINAL_ATTEMPT:
                return e
        return None

    @property
    def intent(self) -> bool:
        return "cancelRequestedAtMs" in self.run


@dataclass
class SystemView:
    state: State

    @cached_property
    def runs(self) -> list[RunView]:
        return [RunView(self.state, self.state.runs[k]) for k in sorted(self.state.runs)]


Check = Callable[[SystemView], list[str]]
REGISTRY: list[tuple[str, str, str, Check]] = []


def invariant(inv: str, name: str, clause: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        REGISTRY.append((inv, name, clause, fn))
        return fn
    return register


def per_run(fn: Callable[[RunView], list[str]]) -> Check:
    @functools.wraps(fn)
    def check(view: SystemView) -> list[str]:
        return [f"Run {rv.run['id']}: {m}" for rv in view.runs for m in fn(rv)]
    return check
