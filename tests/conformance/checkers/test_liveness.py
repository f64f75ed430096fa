"""The LIVE-1 drain procedure (conformance/checkers/liveness.py, state-machines.md §10)."""

from __future__ import annotations

from typing import Any

import pytest
from qlwf.conformance.checkers.explore import build_plan
from qlwf.conformance.checkers.liveness import drain, lease_horizon, page_sweep, sweep_problems
from qlwf.model import tables as T
from qlwf.model.invariants import check_invariants, consistent_binding
from qlwf.model.records import Record
from qlwf.model.system import WorkflowSystem

NEEDS = {"a": (), "b": (), "c": (), "d": ("a", "b", "c")}


class Flow:
    def __init__(self, run_id: str = "run-1", needs: dict[str, tuple[str, ...]] | None = None) -> None:
        self.w = WorkflowSystem(clock=10_000)
        self.plan = build_plan(run_id, f"plan-{run_id}", needs or NEEDS, 10_000)
        self.run_id = run_id
        assert self.w.apply("admit_workflow", plan=self.plan).ok

    def attempt(self, key: str) -> str:
        step = next(p for p in self.plan["steps"] if p["stepKey"] == key)
        out = self.w.apply("admit_task_attempt", runId=self.run_id, stepRunId=step["stepRunId"],
                           binding=consistent_binding(self.plan, step))
        assert out.result is not None
        return str(out.result["attempt"]["id"])

    def ok(self, name: str, **args: Any) -> Record:
        out = self.w.apply(name, **args)
        assert out.error is None, out.error
        assert out.result is not None
        return out.result


def test_cancelling_run_terminates_within_a_r_plus_one() -> None:
    f = Flow()
    claimed, starting, running = f.attempt("a"), f.attempt("b"), f.attempt("c")
    for aid in (claimed, starting, running):
        f.ok("claim_lease", attemptId=aid, workerId="w1", durationMs=30_000)
    f.ok("start_attempt", attemptId=starting, workerId="w1", leaseGeneration=1, timeoutMs=None)
    f.ok("start_attempt", attemptId=running, workerId="w1", leaseGeneration=1, timeoutMs=None)
    f.ok("record_running", attemptId=running, workerId="w1", leaseGeneration=1)
    f.ok("request_cancel", runId="run-1", reason="timeout", actor={"type": "user", "id": "alice"})
    blocked = f.ok("converge_cancellation", runId="run-1")
    assert blocked["status"] == "blocked" and len(blocked["blockedAttemptIds"]) == 3

    report = drain(f.w.state, check_each_step=True)
    assert report.ok, report.explain()
    assert report.t_star == lease_horizon(f.w.state) == f.w.state.clock + 30_000
    (outcome,) = report.runs
    assert (outcome.intent, outcome.leased_attempts, outcome.commands) == (True, 3, 4)
    assert report.commands == report.bound == 4
    assert report.final_state.runs["run-1"]["status"] == "timed_out"
    names = [s["name"] for s in report.steps if s["op"] == "command"]
    assert names == ["recover_attempt"] * 3 + ["converge_cancellation"]
    assert [s["args"]["attemptId"] for s in report.steps if s.get("name") == "recover_attempt"] == sorted(
        [claimed, starting, running])


def test_runs_without_intent_quiesce_after_one_advance() -> None:
    f = Flow(needs={"a": (), "b": ("a",), "c": ("b",)})
    aid = f.attempt("a")
    f.ok("claim_lease", attemptId=aid, workerId="w1", durationMs=5000)
    f.ok("start_attempt", attemptId=aid, workerId="w1", leaseGeneration=1, timeoutMs=None)
    f.ok("fail_start", attemptId=aid, workerId="w1", leaseGeneration=1)
    report = drain(f.w.state)
    assert report.ok, report.explain()
    (outcome,) = report.runs
    assert (outcome.intent, outcome.commands, outcome.status_after) == (False, 1, "failed")
    assert not check_invariants(report.final_state)


def test_a_run_waiting_for_a_worker_is_left_alone() -> None:
    f = Flow()
    f.attempt("a")  # claimed, never leased: not a recovery candidate, not a frontier candidate
    report = drain(f.w.state)
    assert report.ok and report.commands == 0 and report.runs[0].status_after == "running"


def test_several_runs_are_drained_in_cancel_order() -> None:
    a, b = Flow("run-a"), Flow("run-b")
    w = a.w
    assert w.apply("admit_workflow", plan=b.plan).ok
    b.w = w
    for flow, at in ((b, 0), (a, 1000)):
        w.advance(at)
        flow.ok("request_cancel", runId=flow.run_id, reason="user", actor={"type": "system"})
    report = drain(w.state)
    assert report.ok, report.explain()
    assert [o.run_id for o in report.runs] == ["run-b", "run-a"]
    assert {w2 for w2 in (report.final_state.runs["run-a"]["status"], report.final_state.runs["run-b"]["status"])} == {
        "cancelled"}


def test_a_convergence_that_stays_blocked_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    f = Flow()
    aid = f.attempt("a")
    f.ok("claim_lease", attemptId=aid, workerId="w1", durationMs=5000)
    f.ok("release_lease", attemptId=aid, workerId="w1", leaseGeneration=1, reason="declined")
    f.ok("request_cancel", runId="run-1", reason="user", actor={"type": "system"})
    monkeypatch.setitem(T.CANCEL_ATTEMPT_TABLE, ("claimed", "released"), "blocked")
    report = drain(f.w.state)
    assert not report.ok
    assert "converge_cancellation answered blocked" in report.failures[0]
    assert "FAILED run-1" in report.explain()


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
def test_a_page_sweep_processes_every_cancelling_run_once(limit: int) -> None:
    """LIVE-1 clause 3 (cancellation.md §8): ⌈C / limit⌉ pages, each starting candidate exactly once."""
    w = WorkflowSystem(clock=10_000)
    for i in range(4):
        plan = build_plan(f"run-{i}", f"plan-{i}", {"a": ()}, 10_000)
        assert w.apply("admit_workflow", plan=plan).ok
        step = plan["steps"][0]
        aid = w.apply("admit_task_attempt", runId=f"run-{i}", stepRunId=step["stepRunId"],
                      binding=consistent_binding(plan, step)).result
        assert aid is not None
        if i % 2:  # a leased claim: blocked on every page until recovery
            assert w.apply("claim_lease", attemptId=aid["attempt"]["id"], workerId="w1", durationMs=5000).ok
        w.advance(1)
        assert w.apply("request_cancel", runId=f"run-{i}", reason="user", actor={"type": "system"}).ok
    report = page_sweep(w.state, limit)
    assert report.ok, report.failures
    assert report.processed == report.candidates == ("run-0", "run-1", "run-2", "run-3")
    assert report.pages == -(-4 // limit)
    assert {r: report.final_state.runs[r]["status"] for r in report.candidates} == {
        "run-0": "cancelled", "run-1": "running", "run-2": "cancelled", "run-3": "running"}


def test_sweep_problems_name_what_went_wrong() -> None:
    assert sweep_problems(["a", "b"], ["a", "b"], 1, 2) == []
    assert sweep_problems([], [], 1, 4) == []
    problems = sweep_problems(["a", "b"], ["a", "a", "c"], 3, 1)
    assert "a processed 2 times in the sweep" in problems and "b processed 0 times in the sweep" in problems
    assert "c processed although it was no candidate" in problems and any("not 2" in p for p in problems)
