"""The bounded choices offered in a state (the command alphabet) and the time discipline.

Time discipline. Leases last L = 600000 ms, task timeouts are S = 10000 ms, and time moves only by
two harness steps: `deadlines` (to the last pending task deadline, offered while one is pending) and
`expire` (to the last pending instant of any timer: every lease and deadline passes). A lease is
always set after the last `expire` and at most one `deadlines` step follows each start, so with
L > (starts + 1) x S no lease passes during a `deadlines` step (asserted). Under this discipline the
bits of the state identity (abstraction.py) determine every enabled command and its outcome, so the
abstraction is exact, and every time-driven situation that changes behaviour (a lease live or
expired, a deadline passed or not, a deadline passed while the lease is still live) is reachable.

Choices (see `Alphabet`): the admission replay (on the fresh Run), advance_frontier, request_cancel (`user`, `timeout`),
converge_cancellation and a convergence page on the Run; admit_task_attempt on every ready StepRun; for every attempt:
claim_lease by each of two workers, and for the live holder renew, release (`declined`), start
(without timeout or with S), record_running, fail_start, complete (exit 0 or 1); recover_attempt with
each evidence once the lease expired; and the replays of durable commands by the holder of every
lease (release; completion and start failure; start and record_running), which must write nothing.
Refused commands are counted, and must leave the state unchanged.

Finiteness and scope: one Run per shape (`Config.workflows` admits up to three); two workers; per
shape size, at most `max_attempts` attempts per StepRun and `max_generations` lease generations per
attempt, with or without task deadlines and renewals. The richness shrinks as shapes grow so that
the product of independent steps stays explorable: one step gets every choice (FULL: two attempts,
two generations, deadlines, renew); two steps keep requeues and deadlines (PAIR); three or more
steps explore the coupling of the frontier, cancellation and recovery across steps (COUPLING: one
attempt and one generation per step, no deadlines, no renew).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from qlwf.model import tables as T
from qlwf.model.invariants import consistent_binding
from qlwf.model.records import Record
from qlwf.model.state import State
from qlwf.model.system import advance_time, apply

from .abstraction import _attempts_by_step
from .shapes import SCOPE_ALPHABETS

TraceStep = dict[str, Any]

LEASE_MS = 600_000
TIMEOUT_MS = 10_000
WORKERS = ("w1", "w2")
CANCEL_ACTOR: Record = {"type": "user", "id": "operator"}


@dataclass(frozen=True)
class Alphabet:
    """The bounded choices offered to the workers and the operator for one shape."""

    max_attempts: int  # attempts per StepRun (requeues + 1)
    max_generations: int  # lease generations per attempt (claims)
    deadlines: bool  # start_attempt also with timeoutMs = S, and the `deadlines` time step
    renew: bool  # renew_lease by the holder
    evidence: tuple[str, ...] = ("not_running", "running", "unknown")
    exit_codes: tuple[int, ...] = (0, 1)
    cancel_reasons: tuple[str, ...] = ("user", "timeout")
    workers: tuple[str, ...] = WORKERS


FULL = Alphabet(max_attempts=2, max_generations=2, deadlines=True, renew=True)
PAIR = Alphabet(max_attempts=2, max_generations=1, deadlines=True, renew=False)
COUPLING = Alphabet(max_attempts=1, max_generations=1, deadlines=False, renew=False)


def default_alphabet(n_steps: int) -> Alphabet:
    """Richness shrinks as shapes grow so that the product of independent steps stays explorable."""
    return FULL if n_steps == 1 else PAIR if n_steps == 2 else COUPLING


def full_alphabet(_n_steps: int) -> Alphabet:
    return FULL


def pair_alphabet(_n_steps: int) -> Alphabet:
    return PAIR


def coupling_alphabet(_n_steps: int) -> Alphabet:
    return COUPLING


# The alphabets a scope may name ("2x1:-@coupling"), whatever its size; module-level functions, so that a
# Config holding one crosses to the explorer's worker processes.
ALPHABETS: dict[str, Callable[[int], Alphabet]] = dict(zip(
    SCOPE_ALPHABETS, (full_alphabet, pair_alphabet, coupling_alphabet), strict=True))


def alphabet_name(alphabet: Callable[[int], Alphabet]) -> str | None:
    """The name a scope gives `alphabet`, or None for the default one (and any other)."""
    return next((name for name, a in ALPHABETS.items() if a is alphabet), None)


def _timers(state: State) -> tuple[list[int], list[int]]:
    """Instants of the pending lease expiries and of the pending task deadlines of active attempts."""
    leases = [lease["expiresAtMs"] for lease in state.leases.values()
              if lease["status"] == "leased" and lease["expiresAtMs"] > state.clock]
    deadlines = [a["deadlineAtMs"] for a in state.attempts.values()
                 if a["status"] in T.ACTIVE_ATTEMPT and a.get("deadlineAtMs", 0) > state.clock]
    return leases, deadlines



@dataclass(frozen=True)
class Action:
    step: TraceStep  # the trace step ({"op": "command", ...} or {"op": "advance_time", ...})


def _command(name: str, **args: Any) -> Action:
    return Action({"op": "command", "name": name, "args": args})


def time_actions(state: State) -> Iterator[Action]:
    leases, deadlines = _timers(state)
    if deadlines:
        last = max(deadlines)
        if leases and min(leases) <= last:
            raise RuntimeError("explorer time discipline broken: a lease would pass during a deadlines step")
        yield Action({"op": "advance_time", "deltaMs": last - state.clock})
    if leases and (not deadlines or max(leases) > max(deadlines)):
        yield Action({"op": "advance_time", "deltaMs": max(leases) - state.clock})


def run_actions(state: State, run: Record, cfg: Alphabet, page: bool = True) -> Iterator[Action]:
    rid = run["id"]
    plan = state.admission_of_run(rid)[0]["plan"]
    if run["version"] == len(plan["steps"]) + 1:  # fresh from admission: its replay answers `existing`
        yield _command("admit_workflow", plan=plan)
    yield _command("advance_frontier", runId=rid)
    for reason in cfg.cancel_reasons:
        yield _command("request_cancel", runId=rid, reason=reason, actor=CANCEL_ACTOR)
    yield _command("converge_cancellation", runId=rid)
    if page:
        yield _command("converge_cancellation_page", limit=8)


def attempt_actions(state: State, a: Record, cfg: Alphabet, lease_ms: int, timeout_ms: int) -> Iterator[Action]:
    aid, st = a["id"], a["status"]
    lease = state.leases.get(aid)
    generation = 0 if lease is None else lease["leaseGeneration"]
    if st == "claimed" and generation < cfg.max_generations:
        for w in cfg.workers:
            yield _command("claim_lease", attemptId=aid, workerId=w, durationMs=lease_ms)
    if lease is None or lease["status"] != "leased":
        return
    if lease["expiresAtMs"] <= state.clock:
        for ev in cfg.evidence if st != "claimed" else cfg.evidence[:1]:
            yield _command("recover_attempt", attemptId=aid, evidence=ev)
        return
    fence = {"attemptId": aid, "workerId": lease["workerId"], "leaseGeneration": generation}
    if cfg.renew:
        yield _command("renew_lease", **fence, durationMs=lease_ms)
    if st == "claimed":
        yield _command("release_lease", **fence, reason="declined")
        yield _command("start_attempt", **fence, timeoutMs=None)
        if cfg.deadlines:
            yield _command("start_attempt", **fence, timeoutMs=timeout_ms)
    if st == "starting":
        yield _command("record_running", **fence)
        yield _command("fail_start", **fence)
    if st in ("starting", "running"):
        for code in cfg.exit_codes:
            yield _command("complete_attempt", **fence, exitCode=code)


def replay_actions(state: State, a: Record) -> Iterator[Action]:
    """The holder repeating a command whose effect is durable: replay answers, which must write nothing."""
    lease = state.leases.get(a["id"])
    if lease is None or lease.get("releaseReason") == "lease_expired":
        return
    fence = {"attemptId": a["id"], "workerId": lease["workerId"], "leaseGeneration": lease["leaseGeneration"]}
    if lease["status"] == "released":
        yield _command("release_lease", **fence, reason=lease["releaseReason"])
    elif lease["status"] == "completed":
        yield _command("complete_attempt", **fence, exitCode=0)
        yield _command("fail_start", **fence)
    elif a["status"] in ("starting", "running"):
        yield _command("start_attempt", **fence, timeoutMs=None)
        if a["status"] == "running":
            yield _command("record_running", **fence)


def actions(state: State, cfg: Alphabet, lease_ms: int = LEASE_MS, timeout_ms: int = TIMEOUT_MS) -> list[Action]:
    """Every choice offered in `state` (commands first, then the time steps)."""
    out: list[Action] = []
    by_step = _attempts_by_step(state)
    for i, run in enumerate(sorted(state.runs.values(), key=lambda r: r["id"])):
        out += run_actions(state, run, cfg, page=i == 0)  # the page reads every Run: offered once
        plan = state.admission_of_run(run["id"])[0]["plan"]
        for p in plan["steps"]:
            s = state.step_runs[p["stepRunId"]]
            if s["status"] == "ready" and len(by_step.get(s["id"], [])) < cfg.max_attempts:
                out.append(_command("admit_task_attempt", runId=run["id"], stepRunId=s["id"],
                                    binding=consistent_binding(plan, p)))
    for attempts in by_step.values():
        for a in attempts:
            if a["status"] in T.ACTIVE_ATTEMPT:
                out += attempt_actions(state, a, cfg, lease_ms, timeout_ms)
            out += replay_actions(state, a)
    out += time_actions(state)
    return out


def take(state: State, action: Action) -> tuple[State, Any]:
    """Apply one action; returns (new state, Outcome or None for a time step)."""
    if action.step["op"] == "advance_time":
        return advance_time(state, action.step["deltaMs"]), None
    out = apply(state, {"name": action.step["name"], "args": action.step["args"]})
    return out.state, out



# ------------------------------------------------------------------------------------------------
# Independence (partial-order reduction, docs/explorer-reduction.md)
def action_run(state: State, action: Action) -> str | None:
    """The one Run an action reads and writes, or None when it reads or moves more than one: a time
    step (every lease and deadline of every Run) and the convergence page (it lists Runs)."""
    step = action.step
    if step["op"] != "command":
        return None
    args = step["args"]
    if "runId" in args:
        return str(args["runId"])
    if "plan" in args:
        return str(args["plan"]["runId"])
    if "attemptId" in args:
        return str(state.attempts[args["attemptId"]]["runId"])
    if "stepRunId" in args:
        return str(state.step_runs[args["stepRunId"]]["runId"])
    return None  # converge_cancellation_page and anything else that names no Run: dependent with all


def independent(run_a: str | None, run_b: str | None) -> bool:
    """Two commands commute and neither enables or disables the other iff they touch disjoint Runs:
    within one Run everything shares the version / eventSequence counters and the frontier."""
    return run_a is not None and run_b is not None and run_a != run_b


def action_label(state: State, action: Action, names: dict[str, str],
                 ordinals: dict[str, tuple[str, int]]) -> tuple[Any, ...]:
    """An action as the explored identity sees it: Runs and StepRuns by their canonical name (`names`), attempts
    by (canonical StepRun, ordinal), workers as the lease holder or the other one. Equal labels in two
    states with one explored identity are the same choice, which lets sleep sets be stored per identity."""
    step = action.step
    if step["op"] != "command":
        return ("advance_time",)
    args = step["args"]
    lease = state.leases.get(args.get("attemptId", ""))
    parts: list[Any] = [step["name"]]
    for k in sorted(args):
        v = args[k]
        if k == "binding":
            continue  # a function of the plan and the StepRun
        if k == "plan":
            v = names.get(v["runId"], v["runId"])
        elif k == "runId":
            v = names.get(v, v)  # Runs are renamed too when the search swaps them ("runs")
        elif k == "stepRunId":
            v = names.get(v, v)
        elif k == "attemptId":
            sid, n = ordinals[v]
            v = (names.get(sid, sid), n)
        elif k == "workerId" and lease is not None:
            v = "holder" if v == lease["workerId"] else "other"
        elif not isinstance(v, str | int | None):
            v = repr(v)
        parts.append((k, v))
    return tuple(parts)


def attempt_ordinals(state: State) -> dict[str, tuple[str, int]]:
    """attemptId -> (its StepRun, its ordinal within the StepRun), as the abstraction numbers attempts."""
    return {a["id"]: (sid, i) for sid, rows in _attempts_by_step(state).items() for i, a in enumerate(rows)}
