"""Lost commit responses (commands.md §2.7, ADR-0228 §2): a caller that does not learn whether a
command committed repeats it. The retry must answer from durable state, never write twice.

`with_lost_commits(trace)` doubles every writing command step (same clock, no time between), so a
lockstep run compares the backend's answer to each retry with the model's. `replay_violations`
checks the model itself: every command with a replay answer, repeated right after it succeeded,
answers with that replay outcome and leaves the state unchanged.
"""

from __future__ import annotations

from typing import Any

from qlwf.conformance.traces.drift_mirror import corrupt_state
from qlwf.conformance.traces.format import Trace
from qlwf.model import tables as T
from qlwf.model.state import State
from qlwf.model.system import advance_time, apply

# The replay answers of commands.md §3 / §2.7, per command. renew_lease, recover_attempt and the
# convergence page have none: repeating them is a new request (renew extends the lease again;
# recovery after recovery finds no active attempt).
REPLAY_OUTCOMES: dict[str, frozenset[str]] = {
    "admit_workflow": frozenset({"existing"}),
    "advance_frontier": frozenset({"unchanged", "settled"}),
    "admit_task_attempt": frozenset({"existing"}),
    "claim_lease": frozenset({"idempotent"}),
    "release_lease": frozenset({"already_released"}),
    "start_attempt": frozenset({"already_starting", "already_running"}),
    "record_running": frozenset({"already_running"}),
    "fail_start": frozenset({"already_terminal"}),
    "complete_attempt": frozenset({"already_terminal"}),
    "request_cancel": frozenset({"existing"}),
    # a second convergence either finds the Run terminal or has nothing left it may touch
    "converge_cancellation": frozenset({"settled", "blocked"}),
}


def with_lost_commits(trace: Trace) -> Trace:
    """Every writing command step followed by the identical retry."""
    steps: list[dict[str, Any]] = []
    for step in trace.inputs().steps:
        steps.append(step)
        if step["op"] == "command" and step["name"] in T.WRITING_COMMANDS:
            steps.append(dict(step))
    return Trace(f"{trace.description} (every writing command retried after a lost commit response)",
                 trace.initial_clock, steps, f"{trace.name}+lost-commits")


def replay_violations(trace: Trace) -> list[str]:
    """Model-level check of the replay principle along `trace`; [] when it holds."""
    state = State(clock=trace.initial_clock)
    problems = []
    for i, step in enumerate(trace.inputs().steps):
        if step["op"] == "advance_time":
            state = advance_time(state, step["deltaMs"])
            continue
        if step["op"] == "corrupt":
            state = corrupt_state(state, step["kind"], step["key"], step["patch"])
            continue
        before = state
        first = apply(state, {"name": step["name"], "args": step["args"]})
        state = first.state
        replay = REPLAY_OUTCOMES.get(step["name"])
        if first.error is not None or replay is None:
            continue
        assert first.result is not None  # an outcome without an error carries its result
        again = apply(state, {"name": step["name"], "args": step["args"]})
        wrote = first.state.snapshot() != before.snapshot()
        answer = again.error.to_json() if again.error else (again.result or {}).get("status")
        if wrote and answer not in replay:
            problems.append(f"step {i} {step['name']}: first {first.result.get('status')!r}, retry answered "
                            f"{answer!r}, expected one of {sorted(replay)}")
        elif not wrote and (again.error is not None or again.result != first.result):
            problems.append(f"step {i} {step['name']}: a no-op answered {first.result!r}, its retry {answer!r}")
        elif again.state.snapshot() != state.snapshot():
            problems.append(f"step {i} {step['name']}: the retry wrote to the store")
    return problems
