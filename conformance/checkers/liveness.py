"""LIVE-1 as an executable procedure (state-machines.md §10, harness drain procedure).

`drain(state)` is a pure function: from any state it (1) advances the clock to T* = max(now, the
expiry of every `leased` lease); (2) for each cancelling Run in ascending (cancelRequestedAtMs,
runId) order recovers every attempt holding a `leased` lease (ascending attempt id, evidence
`not_running`), then converges the Run and requires it to be terminal with the reason's status;
(3) for each other running Run calls advance_frontier once when it is a frontier candidate and
requires it to be terminal or no longer a candidate (terminal when every StepRun was already
terminal); (4) requires the number of commands used to be at most Σ(a_R + 1) + (Runs without
intent). The report says what happened to every Run and explains any failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qlwf.model import tables as T
from qlwf.model.invariants import Violation, check_invariants
from qlwf.model.records import Record
from qlwf.model.state import State
from qlwf.model.system import advance_time, apply, frontier_candidate_rows

TraceStep = dict[str, Any]


@dataclass(frozen=True)
class RunOutcome:
    """What the drain did to one Run that was running at the start."""

    run_id: str
    intent: bool
    leased_attempts: int  # a_R for cancelling Runs, 0 otherwise
    commands: int
    status_after: str
    candidate_after: bool
    failure: str | None

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class DrainReport:
    t_star: int
    commands: int
    bound: int
    runs: tuple[RunOutcome, ...]
    failures: tuple[str, ...]
    steps: tuple[TraceStep, ...]  # the drain as trace steps (advance_time + commands)
    violations: tuple[Violation, ...]
    final_state: State = field(repr=False)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.violations

    def explain(self) -> str:
        lines = [f"LIVE-1 drain: T*={self.t_star}, {self.commands} commands (bound {self.bound})"]
        lines += [f"  {o.run_id}: {'intent' if o.intent else 'no intent'}, a_R={o.leased_attempts}, "
                  f"{o.commands} commands -> {o.status_after}" for o in self.runs]
        lines += [f"  FAILED {f}" for f in self.failures]
        lines += [f"  violation: {v}" for v in self.violations]
        return "\n".join(lines)


def lease_horizon(state: State) -> int:
    """T* of LIVE-1: the clock, or the latest expiry of a `leased` lease if later."""
    return int(max([state.clock, *(lease["expiresAtMs"] for lease in state.leases.values()
                                   if lease["status"] == "leased")]))


def cancelling_runs(state: State) -> list[Record]:
    return sorted((r for r in state.runs.values() if r["status"] == "running" and "cancelRequestedAtMs" in r),
                  key=lambda r: (r["cancelRequestedAtMs"], r["id"]))


def is_candidate(state: State, run_id: str) -> bool:
    return any(row["runId"] == run_id for _, row in frontier_candidate_rows(state))


class _Driver:
    """Applies drain commands one by one, recording them as trace steps."""

    def __init__(self, state: State, check: bool) -> None:
        self.state = state
        self.check = check
        self.steps: list[TraceStep] = []
        self.violations: list[Violation] = []

    def advance_to(self, t: int) -> None:
        delta = t - self.state.clock
        self.steps.append({"op": "advance_time", "deltaMs": delta})
        self.state = advance_time(self.state, delta)

    def command(self, name: str, args: Record) -> tuple[Record | None, str | None]:
        self.steps.append({"op": "command", "name": name, "args": args})
        out = apply(self.state, {"name": name, "args": args})
        self.state = out.state
        if self.check:
            self.violations += check_invariants(self.state)
        if out.error is not None:
            return None, f"{name}({args}) refused: {out.error}"
        return out.result, None


def _drain_cancelling(d: _Driver, run: Record) -> RunOutcome:
    leased = sorted(a["id"] for a in d.state.attempts_of_run(run["id"])
                    if d.state.leases.get(a["id"], {}).get("status") == "leased")
    used = 0
    failure = None
    for attempt_id in leased:
        result, failure = d.command("recover_attempt", {"attemptId": attempt_id, "evidence": "not_running"})
        used += 1
        if failure is None and result is not None and result["status"] not in ("requeued", "failed"):
            failure = f"recover_attempt({attempt_id}) answered {result['status']}, not a write"
        if failure:
            break
    if failure is None:
        result, failure = d.command("converge_cancellation", {"runId": run["id"]})
        used += 1
        if failure is None and result is not None and result["status"] != "terminal":
            failure = (f"converge_cancellation answered {result['status']} (blocked attempts "
                       f"{result['blockedAttemptIds']}, blocked steps {result['blockedStepRunIds']})")
    after = d.state.runs[run["id"]]
    want = T.CANCEL_REASON_TARGET[run["cancelReason"]].status
    if failure is None and after["status"] != want:
        failure = f"Run ended {after['status']}, reason {run['cancelReason']} requires {want}"
    return RunOutcome(run["id"], True, len(leased), used, after["status"], False, failure)


def _drain_quiescent(d: _Driver, run: Record) -> RunOutcome:
    used = 0
    failure = None
    all_terminal = all(s["status"] in T.TERMINAL_STEP for s in d.state.steps_of_run(run["id"]))
    if is_candidate(d.state, run["id"]):
        _, failure = d.command("advance_frontier", {"runId": run["id"]})
        used = 1
    after = d.state.runs[run["id"]]
    candidate = is_candidate(d.state, run["id"])
    if failure is None and after["status"] == "running" and candidate:
        failure = "still a frontier candidate after one advance_frontier"
    if failure is None and all_terminal and after["status"] == "running":
        failure = "every StepRun is terminal but the Run did not terminalize"
    return RunOutcome(run["id"], False, 0, used, after["status"], candidate, failure)


def drain(state: State, *, check_each_step: bool = False) -> DrainReport:
    """Run the LIVE-1 harness drain procedure from `state` (no worker acts, no admission)."""
    d = _Driver(state, check_each_step)
    t_star = lease_horizon(state)
    d.advance_to(t_star)
    outcomes = [_drain_cancelling(d, run) for run in cancelling_runs(d.state)]
    intent_ids = {o.run_id for o in outcomes}
    others = sorted(r["id"] for r in d.state.runs.values() if r["status"] == "running" and r["id"] not in intent_ids)
    outcomes += [_drain_quiescent(d, d.state.runs[run_id]) for run_id in others]
    commands = sum(o.commands for o in outcomes)
    bound = sum(o.leased_attempts + 1 for o in outcomes if o.intent) + sum(1 for o in outcomes if not o.intent)
    failures = [f"{o.run_id}: {o.failure}" for o in outcomes if o.failure]
    if commands > bound:
        failures.append(f"{commands} commands exceed the LIVE-1 bound {bound}")
    return DrainReport(t_star, commands, bound, tuple(outcomes), tuple(failures), tuple(d.steps),
                       tuple(d.violations), d.state)


# ------------------------------------------------------------------------------------------------
# LIVE-1 clause 3: page drivers reach everything (cancellation.md §8)
@dataclass(frozen=True)
class SweepReport:
    limit: int
    candidates: tuple[str, ...]  # Runs cancelling when the sweep started, in candidate order
    processed: tuple[str, ...]  # the Runs of the page outcomes, in order
    pages: int
    failures: tuple[str, ...]
    steps: tuple[TraceStep, ...]
    final_state: State = field(repr=False)

    @property
    def ok(self) -> bool:
        return not self.failures


def sweep_problems(candidates: list[str], processed: list[str], pages: int, limit: int) -> list[str]:
    """A sweep with nothing else happening processes every starting candidate exactly once, in
    ⌈C / limit⌉ pages (one page when C = 0), and nothing else."""
    out = [f"{r} processed {processed.count(r)} times in the sweep" for r in candidates if processed.count(r) != 1]
    out += [f"{r} processed although it was no candidate" for r in dict.fromkeys(processed) if r not in candidates]
    want = max(1, -(-len(candidates) // limit))
    if pages != want:
        out.append(f"the sweep over {len(candidates)} candidates took {pages} pages of {limit}, not {want}")
    return out


def page_sweep(state: State, limit: int) -> SweepReport:
    """Drive converge_cancellation_page with the caller-held cursor until `next` is null."""
    candidates = [r["id"] for r in cancelling_runs(state)]
    d = _Driver(state, check=False)
    processed: list[str] = []
    failures: list[str] = []
    cursor: Record | None = None
    pages = 0
    while pages <= len(candidates):
        result, failure = d.command("converge_cancellation_page", {"limit": limit, **({"after": cursor} if cursor
                                                                                        else {})})
        pages += 1
        if failure or result is None:
            failures.append(failure or "no page result")
            break
        processed += [o["runId"] for o in result["outcomes"]]
        if result["hasMore"] != bool(cancelling_runs(d.state)):
            failures.append(f"page {pages}: hasMore={result['hasMore']} disagrees with the remaining candidates")
        cursor = result["next"]
        if cursor is None:
            break
        if result["scanned"] == 0:
            failures.append("a page with a cursor but nothing scanned (cancellation.md §9: malformed)")
            break
    failures += sweep_problems(candidates, processed, pages, limit)
    return SweepReport(limit, tuple(candidates), tuple(processed), pages, tuple(failures), tuple(d.steps), d.state)
