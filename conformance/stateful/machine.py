"""Stateful Hypothesis verification of the whole-system model (README §7).

`WorkflowMachine` drives several workflows at once through every command of commands.md §3, with
arguments drawn mostly from the current state (existing ids, live fences, candidates), plus time
steps and workers that stop acting. Calls that must be refused (wrong status, stale generation or
worker, cancel intent, malformed input) are made on purpose and must return the typed error and
leave the State equal to what it was. INV-1..31 are checked after every step, every command is
checked against the table-shaped postconditions of postconditions.py, and at teardown the
LIVE-1 drain (conformance/checkers/liveness.py) must terminalize every cancelling Run within the bound and quiesce
every other one. A failing (shrunk) behaviour is written as a self-contained qlwf-trace@1 file
(docs/traces.md: every step's outcome and state recorded through the model; the inputs alone if
the model crashes on a step) to $QLWF_TRACE_DIR (default reports/counterexamples/); it replays
with `qlwf replay`, `qlwf traces check` and `qlwf.conformance.checkers.replay.replay_trace`.

The machine lives here rather than under tests/ so that `qlwf campaign` runs it too (seeded shards,
qlwf/campaign/); tests/conformance/stateful/test_stateful.py runs it under the suite's Hypothesis profiles.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from qlwf.conformance.checkers.explore import build_plan
from qlwf.conformance.checkers.liveness import cancelling_runs, drain, sweep_problems
from qlwf.conformance.report.render import show_command, trace_dir
from qlwf.conformance.traces.export import record_for_saving
from qlwf.conformance.traces.format import Trace, advance, command, save
from qlwf.model import tables as T
from qlwf.model.invariants import check_invariants, reusing_record_checks
from qlwf.model.memo import trusting_record_identity
from qlwf.model.records import Record
from qlwf.model.state import State
from qlwf.model.system import Outcome, advance_time, apply

from . import world as W
from .coverage import witnesses
from .postconditions import check_outcome
from .strategies import Needs, dag_needs

INITIAL_CLOCK = 1_700_000_000_000
MAX_RUNS = 3
COVERAGE: set[str] = set()  # row witnesses reached by every machine run of this process
Expect = Callable[[Outcome], str | None]


def _conflict(*reasons: str) -> Expect:
    def check(out: Outcome) -> str | None:
        e = out.error
        if e is None or e.error_class != "Conflict" or e.reason not in reasons:
            got = e.to_json() if e else (out.result or {}).get("status")
            return f"expected Conflict {sorted(reasons)}, got {got}"
        return None
    return check


def _invalid(out: Outcome) -> str | None:
    e = out.error
    if e is None or e.error_class != "Invalid" or e.reason not in ("argument_invalid", "page_invalid", "plan_invalid"):
        return f"expected Invalid argument/page/plan, got {e.to_json() if e else (out.result or {}).get('status')}"
    return None


def _status(*statuses: str) -> Expect:
    def check(out: Outcome) -> str | None:
        got = (out.result or {}).get("status") if out.error is None else out.error.to_json()
        return None if got in statuses else f"expected {statuses}, got {got}"
    return check


class WorkflowMachine(RuleBasedStateMachine):
    """Several workflows, three workers (some of which stop), the operator and the system."""

    coverage: ClassVar[set[str] | None] = COVERAGE  # where row witnesses go (None: not recorded)
    trace_name: ClassVar[str] = "stateful"  # the counterexample's file stem under trace_path()'s directory

    def __init__(self) -> None:
        super().__init__()
        self.state = State(clock=INITIAL_CLOCK)
        self.steps: list[Record] = []
        self.plans: list[tuple[Record, Needs]] = []
        self.dead: set[str] = set()
        self.failed = False
        self.invariant_memo: dict[Any, Any] = {}

    # ---- plumbing ------------------------------------------------------------------------------
    @property
    def alive(self) -> set[str]:
        return set(W.WORKERS) - self.dead

    def trace_path(self) -> Path:
        """Where a counterexample is written; the last write is the shrunk one (Hypothesis replays it last)."""
        return trace_dir() / f"{self.trace_name}.json"

    def fail(self, message: str, extra_steps: tuple[Record, ...] = ()) -> None:
        self.failed = True
        path = self.trace_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
        description = f"stateful counterexample (profile {profile}): {message.splitlines()[0][:400]}"
        save(record_for_saving(Trace(description, INITIAL_CLOCK, [*self.steps, *extra_steps], "stateful")), path)
        raise AssertionError(f"{message}\ncounterexample trace: {path}\nrender it: {show_command(path)}")

    def do(self, name: str, args: Any, expect: Expect | None = None) -> Outcome:
        before = self.state
        self.steps.append(command(name, args))
        try:
            with trusting_record_identity():  # the machine's States share records and never mutate one
                out = apply(before, {"name": name, "args": args})
        except Exception as e:  # a crash of the model is a finding, with its trace
            self.fail(f"{name} crashed the model: {type(e).__name__}: {e}")
            raise
        problems = check_outcome(name, args, before, out)
        if expect is not None and (problem := expect(out)):
            problems.append(problem)
        if out.error is None and self.coverage is not None:
            self.coverage.update(witnesses(before, self.steps[-1], out.rules, out.result))
        self.state = out.state
        if problems:
            self.fail(f"{name}({args!r:.300}): " + "; ".join(problems))
        return out

    def tick(self, delta: int) -> None:
        self.steps.append(advance(delta))
        self.state = advance_time(self.state, delta)

    # ---- admission -----------------------------------------------------------------------------
    def _admit(self, needs: Needs, back: int) -> None:
        n = len(self.plans) + 1
        run_id = f"run-{n:04d}"
        plan = build_plan(run_id, f"plan-{n:04d}", needs, max(0, self.state.clock - back))
        self.plans.append((plan, needs))
        self.do("admit_workflow", {"plan": plan}, _status("created"))

    @initialize(needs=dag_needs(), back=st.integers(0, 5000))
    def first_workflow(self, needs: Needs, back: int) -> None:
        self._admit(needs, back)

    @precondition(lambda self: len(self.plans) < MAX_RUNS)
    @rule(needs=dag_needs(), back=st.integers(0, 5000))
    def admit_workflow(self, needs: Needs, back: int) -> None:
        self._admit(needs, back)

    def admit_again(self, data: st.DataObject) -> None:
        plan, needs = data.draw(st.sampled_from(self.plans))
        kind = data.draw(st.sampled_from(["replay", "same_plan_id", "same_run_id"]))
        if kind == "replay":
            self.do("admit_workflow", {"plan": plan}, _status("existing"))
        elif kind == "same_plan_id":
            other = build_plan(plan["runId"], plan["planId"], needs, plan["plannedAtMs"] - 1)
            self.do("admit_workflow", {"plan": other}, _conflict("plan_id_conflict"))
        else:
            other = build_plan(plan["runId"], f"{plan['planId']}-b", needs, plan["plannedAtMs"])
            self.do("admit_workflow", {"plan": other}, _conflict("run_id_conflict"))

    # ---- frontier, queries, task admission ------------------------------------------------------
    @precondition(lambda self: bool(W.frontier_candidates(self.state)))
    @rule(data=st.data())
    def advance_frontier(self, data: st.DataObject) -> None:
        self.do("advance_frontier", {"runId": data.draw(st.sampled_from(W.frontier_candidates(self.state)))})

    @rule(name=st.sampled_from(T.QUERY_COMMANDS), limit=st.integers(1, 4))
    def query_pages(self, name: str, limit: int) -> None:
        """Keyset paging (commands.md §2.6): following `next` lists exactly the one-page answer."""
        full = self.do(name, {"limit": T.QUERY_PAGES[name][0]})
        assert full.result is not None
        rows: list[Record] = []
        args: dict[str, Any] = {"limit": limit}
        for _ in range(200):
            page = self.do(name, args).result
            assert page is not None
            rows += page["candidates"]
            if not page["truncated"]:
                break
            args = {"limit": limit, "after": page["next"]}
        if not full.result["truncated"] and rows != full.result["candidates"]:
            self.fail(f"{name}: paging by {limit} listed {rows} instead of {full.result['candidates']}")

    @precondition(lambda self: bool(W.task_candidates(self.state)))
    @rule(data=st.data(), executor=st.sampled_from(T.EXECUTOR_TYPES))
    def admit_task_attempt(self, data: st.DataObject, executor: str) -> None:
        run_id, step_id = data.draw(st.sampled_from(W.task_candidates(self.state)))
        binding = W.binding(self.state, step_id) | {"executorType": executor}
        self.do("admit_task_attempt", {"runId": run_id, "stepRunId": step_id, "binding": binding}, _status("created"))

    def admit_task_anywhere(self, data: st.DataObject) -> None:
        """Any step, possibly not ready, already admitted at this epoch, or with an inconsistent binding."""
        step_id = data.draw(st.sampled_from(W.step_ids(self.state)))
        binding = W.binding(self.state, step_id)
        if data.draw(st.booleans()):
            binding["resourceTaskId"] = "another-task"
        self.do("admit_task_attempt", {"runId": self.state.step_runs[step_id]["runId"], "stepRunId": step_id,
                                       "binding": binding})

    # ---- workers -----------------------------------------------------------------------------------
    @precondition(lambda self: bool(W.attempts(self.state, ("claimed",))))
    @rule(data=st.data(), duration=st.sampled_from(W.DURATIONS))
    def claim_lease(self, data: st.DataObject, duration: int) -> None:
        a = data.draw(st.sampled_from(W.attempts(self.state, ("claimed",))))
        worker = data.draw(st.sampled_from(sorted(self.alive)))
        self.do("claim_lease", {"attemptId": a["id"], "workerId": worker, "durationMs": duration})

    def claim_anything(self, data: st.DataObject) -> None:
        a = data.draw(st.sampled_from(W.attempts(self.state, tuple(T.ATTEMPT_STATUSES))))
        self.do("claim_lease", {"attemptId": a["id"], "workerId": min(self.alive), "durationMs": 5000})

    @precondition(lambda self: bool(W.holders(self.state, self.alive)))
    @rule(data=st.data(), name=st.sampled_from(W.FENCED), duration=st.sampled_from(W.DURATIONS),
          timeout=st.sampled_from(W.TIMEOUTS), exit_code=st.sampled_from(W.EXIT_CODES))
    def worker_command(self, data: st.DataObject, name: str, duration: int, timeout: int | None,
                       exit_code: int) -> None:
        a, lease = data.draw(st.sampled_from(W.holders(self.state, self.alive)))
        self.do(name, W.fenced_args(name, W.fence(a, lease), duration, timeout, exit_code))

    @precondition(lambda self: bool(W.with_lease(self.state)))
    @rule(data=st.data())
    def stale_fence(self, data: st.DataObject) -> None:
        """A stale generation or another worker never passes FENCE (commands.md §2.4)."""
        name = data.draw(st.sampled_from(W.FENCED))
        wrong = data.draw(st.sampled_from(["generation", "worker"]))
        a, lease = data.draw(st.sampled_from(W.with_lease(self.state)))
        f = W.fence(a, lease)
        if wrong == "generation":
            f["leaseGeneration"] += 1
            reasons = ("not_leased", "lease_generation_mismatch")
        else:
            f["workerId"] = next(w for w in W.WORKERS if w != lease["workerId"])
            reasons = ("not_leased", "worker_mismatch")
        self.do(name, W.fenced_args(name, f, 5000, None, 0), _conflict(*reasons))

    @precondition(lambda self: bool(W.holders(self.state, self.alive, live=True)))
    @rule(data=st.data())
    def wrong_status(self, data: st.DataObject) -> None:
        """A live fence on an attempt in the wrong status is a Conflict (commands.md §4.8–§4.12)."""
        a, lease = data.draw(st.sampled_from(W.holders(self.state, self.alive, live=True)))
        wrong = {"claimed": ["record_running", "fail_start", "complete_attempt"], "starting": ["release_lease"],
                 "running": ["release_lease", "fail_start"]}[a["status"]]
        name = data.draw(st.sampled_from(wrong))
        self.do(name, W.fenced_args(name, W.fence(a, lease), 5000, None, 0), _conflict("attempt_state_mismatch"))

    @precondition(lambda self: len(self.dead) < len(W.WORKERS) - 1)
    @rule(worker=st.sampled_from(W.WORKERS), graceful=st.booleans())
    def worker_stops(self, worker: str, graceful: bool) -> None:
        """The worker stops for good. Gracefully, it first releases its unstarted claims (reason `shutdown`);
        otherwise it just dies: its leases expire and only recovery ends them."""
        if graceful and worker not in self.dead:
            for a, lease in W.holders(self.state, {worker}, live=True):
                if a["status"] == "claimed":
                    self.do("release_lease", {**W.fence(a, lease), "reason": "shutdown"}, _status("released"))
        self.dead.add(worker)

    # ---- recovery, cancellation ------------------------------------------------------------------
    @precondition(lambda self: bool(W.expired(self.state)))
    @rule(data=st.data(), evidence=st.sampled_from(T.RECOVERY_EVIDENCE))
    def recover_attempt(self, data: st.DataObject, evidence: str) -> None:
        self.do("recover_attempt", {"attemptId": data.draw(st.sampled_from(W.expired(self.state))),
                                    "evidence": evidence})

    def recover_anything(self, data: st.DataObject) -> None:
        """Recovery of an attempt that is not a candidate (live, released, never leased or ended)."""
        aid = data.draw(st.sampled_from(sorted(self.state.attempts)))
        self.do("recover_attempt", {"attemptId": aid, "evidence": "not_running"})

    @precondition(lambda self: bool(W.cancellable_with_work(self.state)))
    @rule(data=st.data(), reason=st.sampled_from(W.REASONS), actor=st.sampled_from(W.ACTORS))
    def request_cancel(self, data: st.DataObject, reason: str, actor: Record) -> None:
        """Cancel a Run that has work in flight (fresh Runs are cancelled through `refused`/cancel_again)."""
        run_id = data.draw(st.sampled_from(W.cancellable_with_work(self.state)))
        self.do("request_cancel", {"runId": run_id, "reason": reason, "actor": actor}, _status("requested"))

    def cancel_again(self, data: st.DataObject) -> None:
        """A second request answers `existing`; a terminal Run without intent refuses (D-4)."""
        run = self.state.runs[data.draw(st.sampled_from(W.run_ids(self.state)))]
        expect = _status("existing") if "cancelRequestedAtMs" in run else (
            _conflict("run_terminal") if run["status"] != "running" else _status("requested"))
        self.do("request_cancel", {"runId": run["id"], "reason": "policy", "actor": {"type": "system"}}, expect)

    @precondition(lambda self: bool(W.in_flight_under_intent(self.state, self.alive)))
    @rule(data=st.data(), exit_code=st.sampled_from(W.EXIT_CODES))
    def finish_under_intent(self, data: st.DataObject, exit_code: int) -> None:
        """A worker still holding an attempt of a cancelling Run ends it; the outcome maps to cancelled or
        timed_out whatever the exit code (D-3, task-attempts.md §7)."""
        a, lease = data.draw(st.sampled_from(W.in_flight_under_intent(self.state, self.alive)))
        name = data.draw(st.sampled_from(["complete_attempt", "fail_start"] if a["status"] == "starting"
                                         else ["complete_attempt"]))
        self.do(name, W.fenced_args(name, W.fence(a, lease), 5000, None, exit_code), _status(
            "completed", "start_failed"))

    @precondition(lambda self: bool(W.cancelling(self.state)))
    @rule(data=st.data())
    def converge_cancellation(self, data: st.DataObject) -> None:
        self.do("converge_cancellation", {"runId": data.draw(st.sampled_from(W.cancelling(self.state)))},
                _status("terminal", "blocked"))

    def converge_anything(self, data: st.DataObject) -> None:
        run = self.state.runs[data.draw(st.sampled_from(W.run_ids(self.state)))]
        expect = _conflict("not_cancelling") if "cancelRequestedAtMs" not in run else (
            _status("settled") if run["status"] != "running" else None)
        self.do("converge_cancellation", {"runId": run["id"]}, expect)

    def advance_anything(self, data: st.DataObject) -> None:
        run = self.state.runs[data.draw(st.sampled_from(W.run_ids(self.state)))]
        expect = _conflict("cancellation_requested") if "cancelRequestedAtMs" in run else None
        self.do("advance_frontier", {"runId": run["id"]}, expect)

    @precondition(lambda self: bool(W.cancelling(self.state)))
    @rule(limit=st.integers(1, 3))
    def page_sweep(self, limit: int) -> None:
        """LIVE-1.3: a sweep of convergence pages with the caller-held cursor processes every Run that is
        cancelling when it starts exactly once, in ⌈C / limit⌉ pages (cancellation.md §8)."""
        candidates = [r["id"] for r in cancelling_runs(self.state)]
        processed: list[str] = []
        cursor: Record | None = None
        pages = 0
        while pages <= len(candidates):
            page = self.do("converge_cancellation_page", {"limit": limit, **({"after": cursor} if cursor else {})})
            pages += 1
            assert page.result is not None
            processed += [o["runId"] for o in page.result["outcomes"]]
            if page.result["hasMore"] != bool(cancelling_runs(self.state)):
                self.fail(f"page hasMore={page.result['hasMore']} but cancelling Runs remain: "
                          f"{[r['id'] for r in cancelling_runs(self.state)]} (commands.md §4.18 step 4)")
            cursor = page.result["next"]
            if cursor is None:
                break
        problems = sweep_problems(candidates, processed, pages, limit)
        if problems:
            self.fail("LIVE-1.3 page sweep: " + "; ".join(problems))

    @precondition(lambda self: bool(W.cancelling(self.state)))
    @rule(data=st.data())
    def refused_under_intent(self, data: st.DataObject) -> None:
        """No new work after intent (D-3, D-5): each of these must be refused."""
        run_id = data.draw(st.sampled_from(W.cancelling(self.state)))
        options: list[tuple[str, dict[str, Any], Expect]] = [
            ("advance_frontier", {"runId": run_id}, _conflict("cancellation_requested"))]
        epochs = {(r["stepRunId"], r["stepRunVersion"]) for r in self.state.receipts.values()}
        options += [("admit_task_attempt",
                     {"runId": run_id, "stepRunId": s["id"], "binding": W.binding(self.state, s["id"])},
                     _conflict("cancellation_requested")) for s in self.state.steps_of_run(run_id)
                    if s["status"] == "ready" and (s["id"], s["version"]) not in epochs]
        for a in W.attempts(self.state, ("claimed",)):
            if a["runId"] == run_id:
                options.append(("claim_lease", {"attemptId": a["id"], "workerId": min(self.alive),
                                                "durationMs": 5000}, _status("not_eligible")))
        for a, lease in W.holders(self.state, self.alive, live=True):
            if a["runId"] == run_id and a["status"] in ("claimed", "starting"):
                name = "start_attempt" if a["status"] == "claimed" else "record_running"
                options.append((name, W.fenced_args(name, W.fence(a, lease), 5000, None, 0),
                                _conflict("cancellation_requested")))
        name, args, expect = data.draw(st.sampled_from(options))
        self.do(name, args, expect)

    # ---- replays, malformed and off-target calls -------------------------------------------------
    @precondition(lambda self: W.replayable(self.state))
    @rule(data=st.data())
    def replays(self, data: st.DataObject) -> None:
        """A worker repeating a command whose effect is durable gets the replay answer (S-7, commands.md §2.7)."""
        options: list[tuple[str, dict[str, Any], Expect]] = []
        for a, lease in W.with_lease(self.state):
            f = W.fence(a, lease)
            if lease["status"] == "released" and lease["releaseReason"] != "lease_expired":
                same = {**f, "reason": lease["releaseReason"]}
                other = {**f, "reason": next(r for r in T.WORKER_RELEASE_REASONS if r != lease["releaseReason"])}
                options += [("release_lease", same, _status("already_released")),
                            ("release_lease", other, _conflict("replay_mismatch"))]
            elif lease["status"] == "completed":
                options += [("fail_start", f, _status("already_terminal")),
                            ("complete_attempt", {**f, "exitCode": 0}, _status("already_terminal"))]
            elif a["status"] in ("starting", "running"):
                options.append(("start_attempt", {**f, "timeoutMs": None}, _status(f"already_{a['status']}")))
                if a["status"] == "running":
                    options.append(("record_running", f, _status("already_running")))
        name, args, expect = data.draw(st.sampled_from(options))
        self.do(name, args, expect)

    def malformed(self, data: st.DataObject) -> None:
        """Arguments of the wrong shape are Invalid before anything is read (commands.md §2.2)."""
        aid = min(self.state.attempts, default="wta:none")
        run_id = W.run_ids(self.state)[0]
        f = {"attemptId": aid, "workerId": "w1", "leaseGeneration": 1}
        cases: list[tuple[str, Any]] = [
            ("admit_workflow", {"plan": {}}), ("admit_workflow", {"plan": self.plans[0][0], "x": 1}),
            ("advance_frontier", {"runId": 7}), ("advance_frontier", {"runId": "not a portable id"}),
            ("advance_frontier", {}), ("claim_lease", {"attemptId": aid, "workerId": "w1", "durationMs": 4999}),
            ("claim_lease", {"attemptId": aid, "workerId": "w1", "durationMs": True}),
            ("renew_lease", {**f, "leaseGeneration": 0, "durationMs": 5000}),
            ("release_lease", {**f, "reason": "lease_expired"}), ("start_attempt", {**f, "timeoutMs": 0}),
            ("start_attempt", f), ("record_running", {**f, "extra": 1}), ("fail_start", {**f, "workerId": ""}),
            ("complete_attempt", {**f, "exitCode": 2**31}), ("complete_attempt", {**f, "exitCode": 1.0}),
            ("recover_attempt", {"attemptId": aid, "evidence": "maybe"}),
            ("request_cancel", {"runId": run_id, "reason": "whim", "actor": {"type": "user"}}),
            ("request_cancel", {"runId": run_id, "reason": "user", "actor": {"type": "alien"}}),
            ("converge_cancellation", {"runId": None}), ("frontier_candidates", {"limit": 0}),
            ("task_candidates", {"limit": 65}), ("cancellation_candidates", {"limit": 1, "after": {"runId": run_id}}),
            ("recovery_candidates", {"limit": "1"}), ("converge_cancellation_page", {"limit": 129}),
            ("admit_task_attempt", {"runId": run_id, "stepRunId": W.step_ids(self.state)[0], "binding": {}}),
        ]
        name, args = data.draw(st.sampled_from(cases))
        self.do(name, args, _invalid)

    @rule(data=st.data())
    def refused(self, data: st.DataObject) -> None:
        """A call aimed off the candidates or malformed: refused, replayed, or harmless (never wrong)."""
        kinds: list[Callable[[st.DataObject], None]] = [
            self.malformed, self.admit_again, self.admit_task_anywhere, self.cancel_again, self.converge_anything,
            self.advance_anything]
        if self.state.attempts:
            kinds += [self.claim_anything, self.recover_anything]
        data.draw(st.sampled_from(kinds))(data)

    # ---- progress and time --------------------------------------------------------------------------
    def _drive(self, data: st.DataObject, duration: int, timeout: int | None, exit_code: int) -> None:
        """Take the next natural step of some piece of work (keeps examples moving forward)."""
        options = W.natural_actions(self.state, self.alive)
        if not options:
            return
        name, args = data.draw(st.sampled_from(options))
        if name == "claim_lease":
            args = {**args, "workerId": data.draw(st.sampled_from(sorted(self.alive))), "durationMs": duration}
        elif name == "recover_attempt":
            args = {**args, "evidence": data.draw(st.sampled_from(["not_running", "not_running", "running"]))}
        elif name in W.FENCED:
            args = W.fenced_args(name, args, duration, timeout, exit_code)
        self.do(name, args)

    _progress: ClassVar[dict[str, Any]] = {
        "data": st.data(), "duration": st.sampled_from(W.DURATIONS), "timeout": st.sampled_from(W.TIMEOUTS),
        "exit_code": st.sampled_from(W.EXIT_CODES)}

    # Three identical rules: Hypothesis picks rules uniformly, and progress needs most of the steps.
    @rule(**_progress)
    def drive(self, data: st.DataObject, duration: int, timeout: int | None, exit_code: int) -> None:
        self._drive(data, duration, timeout, exit_code)

    @rule(**_progress)
    def drive_more(self, data: st.DataObject, duration: int, timeout: int | None, exit_code: int) -> None:
        self._drive(data, duration, timeout, exit_code)

    @rule(**_progress)
    def drive_on(self, data: st.DataObject, duration: int, timeout: int | None, exit_code: int) -> None:
        self._drive(data, duration, timeout, exit_code)

    @rule()
    def system_round(self) -> None:
        """The system's cadence: advance every frontier candidate, then admit every task candidate."""
        for run_id in W.frontier_candidates(self.state):
            self.do("advance_frontier", {"runId": run_id})
        for run_id, step_id in W.task_candidates(self.state):
            self.do("admit_task_attempt", {"runId": run_id, "stepRunId": step_id,
                                           "binding": W.binding(self.state, step_id)}, _status("created"))

    @precondition(lambda self: bool(W.attempts(self.state)))
    @rule(data=st.data(), steps=st.integers(1, 5), duration=st.sampled_from(W.DURATIONS),
          timeout=st.sampled_from(W.TIMEOUTS), exit_code=st.sampled_from(W.EXIT_CODES))
    def worker_session(self, data: st.DataObject, steps: int, duration: int, timeout: int | None,
                       exit_code: int) -> None:
        """One worker takes an attempt through up to `steps` steps of its lifecycle (claim, start or release,
        run, end)."""
        aid = data.draw(st.sampled_from([a["id"] for a in W.attempts(self.state)]))
        worker = data.draw(st.sampled_from(sorted(self.alive)))
        for _ in range(steps):
            a, lease = self.state.attempts[aid], self.state.leases.get(aid)
            live = lease is not None and lease["status"] == "leased" and lease["expiresAtMs"] > self.state.clock
            if a["status"] not in T.ACTIVE_ATTEMPT or (live and lease is not None and lease["workerId"] != worker):
                return
            if not live:
                if a["status"] != "claimed":
                    return
                self.do("claim_lease", {"attemptId": aid, "workerId": worker, "durationMs": duration})
                continue
            assert lease is not None
            name = data.draw(st.sampled_from({
                "claimed": ["start_attempt", "start_attempt", "start_attempt", "release_lease"],
                "starting": ["record_running", "record_running", "complete_attempt", "fail_start"],
                "running": ["complete_attempt"]}[a["status"]]))
            out = self.do(name, W.fenced_args(name, W.fence(a, lease), duration, timeout, exit_code))
            if out.error is not None:
                return

    @precondition(lambda self: bool(W.holders(self.state, self.alive, live=True)))
    @rule(duration=st.sampled_from(W.DURATIONS))
    def heartbeat(self, duration: int) -> None:
        """Every worker still acting renews each of its live leases (the worker protocol's heartbeat)."""
        for a, lease in W.holders(self.state, self.alive, live=True):
            self.do("renew_lease", {**W.fence(a, lease), "durationMs": duration})

    @rule(delta=st.sampled_from([0, 1, 999, 1000, 5000, 30000, 600000]))
    def advance_time(self, delta: int) -> None:
        self.tick(delta)

    @precondition(lambda self: W.next_timer(self.state) is not None)
    @rule()
    def advance_to_next_timer(self) -> None:
        """Land exactly on the next lease expiry or deadline (expiresAtMs ≤ now is already expired)."""
        t = W.next_timer(self.state)
        assert t is not None
        self.tick(t - self.state.clock)

    # ---- properties ------------------------------------------------------------------------------
    @invariant()
    def invariants_hold(self) -> None:
        if self.failed:
            return
        # Per-record parts are reused for the records a step left alone (states share them; the
        # explorer's cross-check shows incremental and full evaluation agree).
        with reusing_record_checks(memo=self.invariant_memo):
            violations = check_invariants(self.state)
        if violations:
            self.fail("invariant violated: " + " | ".join(str(v) for v in violations[:5]))

    def teardown(self) -> None:
        """LIVE-1: the drain terminalizes every cancelling Run within the bound, quiesces the rest."""
        if self.failed or not self.plans:
            return
        report = drain(self.state, check_each_step=True)
        if not report.ok:
            self.fail(report.explain(), report.steps)


def run_machine(machine: type[RuleBasedStateMachine] = WorkflowMachine, **overrides: Any) -> None:
    """Run the machine under the current profile (HYPOTHESIS_PROFILE), optionally overriding settings.

    For the same draws in every process, load every module of the distribution first
    (`qlwf.support.preload.load_every_module`, decisions Q-113): the campaign's shard and the test session do."""
    run_state_machine_as_test(machine, settings=settings(settings.default, **overrides))
