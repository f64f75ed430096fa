"""Model mutants: deliberately wrong model rules and decision-table rows, applied by monkeypatching.

Each mutant breaks one rule of the spec the way a plausible implementation bug would.
tests/conformance/mutants/test_mutants.py
plants each one and requires its named check to report it: the explorer (an invariant, LIVE-1, a write
on a no-write outcome, a postcondition of conformance/stateful/postconditions.py) or the stateful machine (an
invariant, a postcondition, or the LIVE-1 drain at teardown).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from qlwf.model import (
    cmd_admission,
    cmd_cancel,
    cmd_frontier,
    cmd_queries,
    cmd_recovery,
    cmd_tasks,
    cmd_worker,
    frontier,
    recovery,
    system,
)
from qlwf.model import tables as T
from qlwf.model.records import ATTEMPT_KEYS, RUN_KEYS, Record, canonical
from qlwf.model.state import State, StateWriter

from .base import Mutant, Patcher

TERMINAL_EVENTS = frozenset(f"workflow.{s}" for s in T.TERMINAL_RUN)


def _attempt_of(state: State, args: Any) -> Record | None:
    """The stored attempt `args` names, if any (the command validates its arguments after the mutant looks)."""
    attempt_id = args.get("attemptId") if isinstance(args, dict) else None
    return state.attempts.get(attempt_id) if isinstance(attempt_id, str) else None


def _ready_while_need_running(mp: Patcher) -> None:
    original = frontier.step_decision

    def decide(step: Record, status_of: dict[str, str], doomed: dict[str, bool]) -> str:
        relaxed = {k: "succeeded" if v == "running" else v for k, v in status_of.items()}
        return original(step, relaxed, doomed)

    mp.setattr(frontier, "step_decision", decide)


def _settle_leased_claim(mp: Patcher) -> None:
    mp.setitem(T.CANCEL_ATTEMPT_TABLE, ("claimed", "leased"), "settle")


def _block_released_claim(mp: Patcher) -> None:
    mp.setitem(T.CANCEL_ATTEMPT_TABLE, ("claimed", "released"), "blocked")


def _recovery_refuses_intent(mp: Patcher) -> None:
    original = system.COMMANDS["recover_attempt"]

    def recover(state: State, ctx: system.CommandContext, args: Any) -> tuple[Record, State]:
        a = _attempt_of(state, args)
        if a is not None and "cancelRequestedAtMs" in state.runs[a["runId"]]:
            raise ctx.conflict("cancellation_requested", "mutant: recovery refuses cancelling Runs")
        return original(state, ctx, args)

    mp.setitem(system.COMMANDS, "recover_attempt", recover)


class _TerminalFirstWriter(StateWriter):
    """Writes the parent terminal event before the last StepRun event of the same transaction."""

    def commit(self) -> State:
        events = self._copies.get("events", {})
        for run_id, log in events.items():
            start = len(self.base.events.get(run_id, ()))
            new = list(log[start:])
            if len(new) >= 2 and new[-1]["type"] in TERMINAL_EVENTS and new[-2]["type"].startswith("step."):
                step_event, terminal = new[-2], new[-1]
                new[-2] = {**terminal, "sequence": step_event["sequence"]}
                new[-1] = {**step_event, "sequence": terminal["sequence"]}
                events[run_id] = (*log[:start], *new)
        return super().commit()


def _terminal_event_first(mp: Patcher) -> None:
    for module in (cmd_admission, cmd_frontier, cmd_tasks, cmd_worker, cmd_recovery, cmd_cancel):  # every writer
        mp.setattr(module, "StateWriter", _TerminalFirstWriter)


def _skip_one_level(mp: Patcher) -> None:
    def direct_only(plan: Record, status_of: dict[str, str]) -> dict[str, bool]:
        needs = {s["stepKey"]: s["needs"] for s in plan["steps"]}
        return {k: st in T.BLOCKING_STEP or (st == "pending" and any(status_of[d] in T.BLOCKING_STEP for d in needs[k]))
                for k, st in status_of.items()}

    mp.setattr(frontier, "cannot_succeed", direct_only)


def _claim_ignores_intent(mp: Patcher) -> None:
    original = system.COMMANDS["claim_lease"]

    def claim(state: State, ctx: system.CommandContext, args: Any) -> tuple[Record, State]:
        a = _attempt_of(state, args)
        run = state.runs.get(a["runId"]) if a else None
        if run is None or "cancelRequestedAtMs" not in run:
            return original(state, ctx, args)
        intent = {k: run[k] for k in ("cancelRequestedAtMs", "cancelReason")}
        masked = replace(state, runs={**state.runs, run["id"]: {k: v for k, v in run.items() if k not in intent}})
        result, new = original(masked, ctx, args)
        if new is masked:
            return result, state
        restored = canonical({**new.runs[run["id"]], **intent}, RUN_KEYS)
        return result, replace(new, runs={**new.runs, run["id"]: restored})

    mp.setitem(system.COMMANDS, "claim_lease", claim)


def _completion_ignores_intent(mp: Patcher) -> None:
    mp.setattr(T, "COMPLETION_RULES", tuple(r for r in T.COMPLETION_RULES if r.intent is not True))


def _requeue_keeps_epoch(mp: Patcher) -> None:
    original = recovery.build_task_recovery  # the function cmd_recovery imported and calls by that name

    def recover(inp: Any) -> Record:
        b = original(inp)
        if b["disposition"] != "requeued":
            return b
        run = {**b["run"], "version": b["run"]["version"] - 1, "eventSequence": b["run"]["eventSequence"] - 1}
        return {**b, "run": run, "stepMutations": []}

    mp.setattr(cmd_recovery, "build_task_recovery", recover)


def _timeout_request_repeated(mp: Patcher) -> None:
    mp.setattr(cmd_worker, "_timeout_requested", lambda state, attempt: False)


def _start_sets_started_at(mp: Patcher) -> None:
    original = system.COMMANDS["start_attempt"]

    def start(state: State, ctx: system.CommandContext, args: Any) -> tuple[Record, State]:
        result, new = original(state, ctx, args)
        if result.get("status") != "starting":
            return result, new
        attempt = canonical({**new.attempts[args["attemptId"]], "startedAtMs": ctx.now}, ATTEMPT_KEYS)
        return {**result, "attempt": attempt}, replace(new, attempts={**new.attempts, attempt["id"]: attempt})

    mp.setitem(system.COMMANDS, "start_attempt", start)


def _frontier_lists_cancelling_runs(mp: Patcher) -> None:
    original = frontier.is_frontier_candidate  # the function cmd_queries imported and calls by that name

    def candidate(run: Record, plan: Record, status_by_key: dict[str, str]) -> bool:
        unmasked = {k: v for k, v in run.items() if k not in ("cancelRequestedAtMs", "cancelReason")}
        return original(unmasked, plan, status_by_key)

    mp.setattr(cmd_queries, "is_frontier_candidate", candidate)


class _FrontierTables:
    """The frontier's view of model/tables.py with AGG counting `ready` as succeeded."""

    def __getattr__(self, name: str) -> Any:
        if name == "aggregate":
            return lambda statuses: T.aggregate(["succeeded" if s == "ready" else s for s in statuses])
        return getattr(T, name)


def _frontier_terminal_with_ready_step(mp: Patcher) -> None:
    mp.setattr(frontier, "T", _FrontierTables())


MUTANTS: tuple[Mutant, ...] = (
    Mutant("ready_while_need_running", "frontier.md §4 / INV-16: pending → ready only when every need succeeded",
           "model rule", "explorer", "invariant", _ready_while_need_running),
    Mutant("convergence_settles_leased_claim", "D-7 / INV-23: a claim with a `leased` lease blocks convergence",
           "decision table", "explorer", "contract", _settle_leased_claim),
    Mutant("convergence_blocks_released_claim", "cancellation.md §5: a claim whose lease was released is settled",
           "decision table", "explorer", "invariant", _block_released_claim),
    Mutant("recovery_refuses_intent", "D-2: recovery applies whether or not the Run has cancel intent",
           "model rule", "explorer", "invariant", _recovery_refuses_intent),
    Mutant("terminal_event_before_step_event", "INV-12: the parent terminal event is the last event",
           "model rule", "explorer", "invariant", _terminal_event_first),
    Mutant("skip_one_level_per_pass", "frontier.md §4.3 / LIVE-1.2: one pass skips every pending step of a "
           "blocking chain",
           "model rule", "explorer", "invariant", _skip_one_level),
    Mutant("claim_ignores_intent", "D-3 / INV-15: no lease claim after cancel intent",
           "model rule", "explorer", "contract", _claim_ignores_intent),
    Mutant("completion_ignores_intent", "D-3 / task-attempts.md §7: a completion under intent maps to cancelled or "
           "timed_out whatever the exit code",
           "decision table", "explorer", "contract", _completion_ignores_intent),
    Mutant("requeue_keeps_epoch", "task-attempts.md §8 / INV-21: an unstarted requeue moves the StepRun to a new "
           "ready epoch",
           "model rule", "explorer", "contract", _requeue_keeps_epoch),
    Mutant("timeout_request_repeated", "S-5 / INV-31: at most one task timeout request per attempt",
           "model rule", "explorer", "contract", _timeout_request_repeated),
    Mutant("start_sets_started_at", "state-machines.md §7 / INV-21: a starting attempt has not crossed the start "
           "barrier (no startedAtMs)",
           "model rule", "explorer", "invariant", _start_sets_started_at),
    Mutant("frontier_lists_cancelling_runs", "frontier.md §5 / INV-28: a Run with cancel intent is no frontier "
           "candidate",
           "model rule", "explorer", "invariant", _frontier_lists_cancelling_runs),
    Mutant("frontier_terminal_with_ready_step", "state-machines.md §1 AGG: a Run is terminal only when every StepRun "
           "is terminal",
           "model rule", "explorer", "invariant", _frontier_terminal_with_ready_step),
)
