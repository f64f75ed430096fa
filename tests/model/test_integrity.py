"""The integrity checks shared by the model and impl (model/integrity.py, storage.md D-10).

impl's loads must call the model's checks, not a copy of them; and on the same corrupted records
the model, the SQLite store and the pure check itself must reach the same verdict (error class,
code and reason). The expected reasons are the spec's (commands.md §2.4), written here by hand.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.generate import plans
from qlwf.conformance.traces.drift_mirror import corrupt_state
from qlwf.impl.commands import context, loads
from qlwf.impl.port import FixedClock
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.model import integrity
from qlwf.model.errors import QlwfError
from qlwf.model.state import State
from qlwf.model.system import apply

ROOT = Path(__file__).resolve().parents[2]
RUN = "run-integrity"
T0 = 1_000
ATTEMPT_ARGS = {"runId": RUN, "stepRunId": f"{RUN}:a", "binding": plans.binding("a")}
SHARED = ("run_problem", "plan_step_problem", "receipt_problem", "lease_mirror_problem", "clock_problem",
          "counters_overflow")


def test_impl_calls_the_models_checks_and_defines_none_of_its_own() -> None:
    for name in SHARED:
        owner = context if name == "counters_overflow" else loads
        assert getattr(owner, name) is getattr(integrity, name), name
    for path in (ROOT / "impl").rglob("*.py"):
        defined = {n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(n, ast.FunctionDef)}
        assert not defined & set(SHARED), f"{path} redefines {defined & set(SHARED)}"


@pytest.fixture()
def claimed() -> Iterator[tuple[State, SqliteAdapter, str]]:
    """One claimed, leased attempt in the model and in a SQLite store, by the same commands."""
    port = SqliteAdapter(":memory:", FixedClock())
    try:
        yield _claim(port)
    finally:
        port.close()


def _claim(port: SqliteAdapter) -> tuple[State, SqliteAdapter, str]:
    plan = plans.make_plan(RUN, "plan-integrity", {"a": [], "b": ["a"]}, T0)
    steps: list[tuple[str, dict[str, Any], int]] = [("admit_workflow", {"plan": plan}, T0),
                                                     ("advance_frontier", {"runId": RUN}, T0)]
    state = State(clock=T0)
    attempt_id = ""
    for name, args, at in [*steps, ("admit_task_attempt", ATTEMPT_ARGS, T0 + 1)]:
        out = apply(state, {"name": name, "args": args}, at)
        assert out.ok, out.error
        state = out.state
        assert port.execute(name, args, now=at) == out.result
        if name == "admit_task_attempt":
            attempt_id = out.result["attempt"]["id"]
    claim = {"attemptId": attempt_id, "workerId": "w1", "durationMs": 30_000}
    out = apply(state, {"name": "claim_lease", "args": claim}, T0 + 2)
    assert out.ok and port.execute("claim_lease", claim, now=T0 + 2) == out.result
    return out.state, port, attempt_id


# (kind, patch, the reason the spec prescribes); every record is patched under its own key
CORRUPTIONS = [
    ("leases", {"workerId": "w2"}, "lease_drift"),  # the attempt's mirror disagrees
    ("leases", {"status": "completed"}, "lease_drift"),  # malformed: completed without completedAtMs
    ("attempts", {"leaseVersion": 7}, "lease_drift"),
    ("attempts", {"leaseExpiresAtMs": T0 + 99}, "lease_drift"),
    ("taskReceipts", {"attemptNumber": 2}, "receipt_drift"),
    ("taskReceipts", {"admittedAtMs": T0}, "receipt_drift"),
    ("runs", {"startedAtMs": T0 + 5}, "run_drift"),
    ("runs", {"cancelReason": "user"}, "run_drift"),  # a reason without its request time
]


def _key(kind: str, state: State, attempt_id: str) -> str:
    return RUN if kind == "runs" else attempt_id


@pytest.mark.parametrize(("kind", "patch", "reason"), CORRUPTIONS, ids=lambda v: str(v))
def test_a_corrupted_record_gets_the_same_verdict_through_both_paths(
        kind: str, patch: dict[str, Any], reason: str, claimed: tuple[State, SqliteAdapter, str]) -> None:
    state, port, attempt_id = claimed
    key = [_key(kind, state, attempt_id)]
    state = corrupt_state(state, kind, key, patch)
    port.corrupt(kind, key, patch)
    renew = {"attemptId": attempt_id, "workerId": "w1", "leaseGeneration": 1, "durationMs": 30_000}
    model = apply(state, {"name": "renew_lease", "args": renew}, T0 + 3)
    assert model.error is not None
    assert model.error.to_json() == {"class": "Unavailable",
                                     "code": "PLUGIN_PACKAGE_WORKFLOW_TASK_EXECUTION_UNAVAILABLE", "reason": reason}
    with pytest.raises(QlwfError) as stored:
        port.execute("renew_lease", renew, now=T0 + 3)
    assert stored.value.to_json() == model.error.to_json()
    # the pure check on the corrupted records says the same
    attempt, lease = state.attempts[attempt_id], state.leases[attempt_id]
    plan = state.admission_of_run(RUN)[0]["plan"]
    verdicts = [integrity.receipt_problem(attempt, state.receipts[attempt_id]),
                integrity.run_problem(state.runs[RUN], plan), integrity.lease_mirror_problem(attempt, lease)]
    assert next(v for v in verdicts if v is not None).reason == reason


def test_a_clock_before_the_lease_update_is_the_same_regression_through_both_paths(
        claimed: tuple[State, SqliteAdapter, str]) -> None:
    state, port, attempt_id = claimed
    renew = {"attemptId": attempt_id, "workerId": "w1", "leaseGeneration": 1, "durationMs": 30_000}
    state = state.with_clock(T0 + 1)  # before the claim's lease update at T0 + 2
    model = apply(state, {"name": "renew_lease", "args": renew}, T0 + 1)
    assert model.error is not None and model.error.to_json()["reason"] == "clock_regression"
    assert model.error.error_class == "Invalid"
    with pytest.raises(QlwfError) as stored:
        port.execute("renew_lease", renew, now=T0 + 1)
    assert stored.value.to_json() == model.error.to_json()
    lease = state.leases[attempt_id]
    assert integrity.clock_problem(T0 + 1, T0 + 2, [lease]) == ("clock_regression",
                                                                f"observation time {T0 + 1} precedes {T0 + 2}")
    assert integrity.clock_problem(T0 + 2, T0 + 2, [lease]) is None
    assert integrity.clock_problem(T0 + 2, None, [None, lease]) is None
