"""Build the golden trace corpus (conformance/traces/corpus/*.json) by recording scenarios through the model.

Every scenario is a sequence of inputs; expected outcomes and states are never written by hand:
`trace.record` runs the inputs through the model and stores what it did, in the self-contained form
of docs/traces.md. While a scenario is built, the builder asserts that each step does what the
scenario claims (so a model change that silently turns a scenario into something else fails the
build instead of producing a weaker trace).

    python -m qlwf.conformance.traces.corpus_build           # rewrite the corpus
    python -m qlwf.conformance.traces.corpus_build --check   # exit 1 if a file is missing or stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qlwf.conformance.generate import plans
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.drift_mirror import apply_patch, corrupt_state
from qlwf.conformance.traces.format import Trace, advance, command, corruption, dumps, record
from qlwf.model.records import sign_plan, step_run_digest, task_receipt_digest
from qlwf.model.state import State
from qlwf.model.system import Outcome, advance_time, apply

T0 = 1_000_000
Record = dict[str, Any]


class Scenario:
    """Builds a trace step by step against the model, checking each step's intent as it goes."""

    def __init__(self, name: str, description: str) -> None:
        self.name = name
        self.description = description
        self.state = State(clock=T0)
        self.steps: list[Record] = []

    def cmd(self, name: str, expect: str | None = None, *evidence: Record | None, **args: Any) -> Outcome:
        """Run a command; `expect` is the result status, "page" for queries, or an error reason; `evidence`:
        an admit_task_attempt step's ql3 evidence (see `task`)."""
        out = apply(self.state, {"name": name, "args": args}, self.state.clock)
        self.state = out.state
        self.steps.append(command(name, args, *evidence))
        if expect is not None:
            got = out.error.reason if out.error else (out.result or {}).get("status", "page")
            if got != expect:
                raise AssertionError(f"{self.name} step {len(self.steps) - 1} {name}: expected {expect}, got {got}"
                                     f" ({out.error.to_json() if out.error else ''})")
        return out

    def time(self, delta: int) -> None:
        self.state = advance_time(self.state, delta)
        self.steps.append(advance(delta))

    def corrupt(self, kind: str, key: str, patch: Record) -> None:
        self.state = corrupt_state(self.state, kind, [key], patch)
        self.steps.append(corruption(kind, [key], patch))

    def resign_step(self, step_run_id: str, patch: Record) -> None:
        """A StepRun drift that keeps the record well-formed: its stepRunDigest is recomputed."""
        patched = apply_patch("stepRuns", self.state.step_runs[step_run_id], patch)
        self.corrupt("stepRuns", step_run_id, patch | {"stepRunDigest": step_run_digest(patched)})

    def resign_receipt(self, attempt_id: str, patch: Record) -> None:
        """A receipt drift that keeps the receipt well-formed: its receiptDigest is recomputed."""
        patched = apply_patch("taskReceipts", self.state.receipts[attempt_id], patch)
        self.corrupt("taskReceipts", attempt_id, patch | {"receiptDigest": task_receipt_digest(patched)})

    # ---- common moves ---------------------------------------------------------------------------
    def admit(self, run_id: str, needs: dict[str, list[str]], planned: int = T0) -> Record:
        plan = plans.make_plan(run_id, run_id.replace("run", "plan"), needs, planned)
        self.cmd("admit_workflow", "created", plan=plan)
        return plan

    def task(self, expect: str, run_id: str, key: str, executor: str = "remote_worker", revision: int = 1,
             task_key: str | None = None, step_run_id: str | None = None) -> Outcome:
        """admit_task_attempt of the plan step `key` with a binding derived from ql3 evidence built for the
        Run's plan (plans.admission), the evidence carried by the step."""
        (admitted,) = self.state.admission_of_run(run_id)
        binding, evidence = plans.admission(admitted["plan"], key, executor, revision, task_key)
        return self.cmd("admit_task_attempt", expect, evidence, runId=run_id,
                        stepRunId=step_run_id or plans.step_run_id(run_id, key), binding=binding)

    def attempt(self, run_id: str, key: str, executor: str = "remote_worker") -> str:
        out = self.task("created", run_id, key, executor)
        assert out.result is not None
        return str(out.result["attempt"]["id"])

    def claim(self, aid: str, worker: str = "w1", duration: int = 10_000) -> None:
        self.cmd("claim_lease", "claimed", attemptId=aid, workerId=worker, durationMs=duration)

    def fence(self, aid: str) -> Record:
        lease = self.state.leases[aid]
        return {"attemptId": aid, "workerId": lease["workerId"], "leaseGeneration": lease["leaseGeneration"]}

    def start(self, aid: str, worker: str = "w1", timeout: int | None = None, duration: int = 10_000) -> None:
        self.claim(aid, worker, duration)
        self.cmd("start_attempt", "starting", **self.fence(aid), timeoutMs=timeout)

    def running(self, aid: str, worker: str = "w1", duration: int = 10_000) -> None:
        self.start(aid, worker, duration=duration)
        self.cmd("record_running", "running", **self.fence(aid))

    def succeed(self, run_id: str, key: str) -> None:
        aid = self.attempt(run_id, key)
        self.running(aid)
        self.cmd("complete_attempt", "completed", **self.fence(aid), exitCode=0)

    def trace(self) -> Trace:
        return record(Trace(self.description, T0, self.steps, self.name))


# ------------------------------------------------------------------------------------------------
# ADR-0226: admission and the frontier
def step_ids_sort_against_keys() -> Scenario:
    s = Scenario("adr0226-step-ids-sort-against-keys",
                 "records.md §3: plan steps sort by stepKey whatever their stepRunIds; StepRun ids that sort the "
                 "other way round still bind each attempt to its own plan step and ready the right dependent")
    ids = {"a": "run-1:z", "b": "run-1:y", "c": "run-1:x"}
    plan = plans.make_plan("run-1", "plan-1", {"a": [], "b": [], "c": ["a", "b"]}, T0, step_ids=ids)
    s.cmd("admit_workflow", "created", plan=plan)
    for key in ("b", "a"):
        out = s.task("created", "run-1", key, step_run_id=ids[key])
        assert out.result is not None
        aid = str(out.result["attempt"]["id"])
        s.running(aid)
        s.cmd("complete_attempt", "completed", **s.fence(aid), exitCode=0)
    s.time(1000)
    s.cmd("advance_frontier", "advanced", runId="run-1")  # c ready
    s.task("binding_inconsistent", "run-1", "c", task_key="a", step_run_id=ids["c"])
    s.task("created", "run-1", "c", step_run_id=ids["c"])
    return s


def dependency_readied() -> Scenario:
    s = Scenario("adr0226-dependency-readied",
                 "ADR-0226: a pending step becomes ready exactly when every need succeeded; waiting needs keep it "
                 "pending; frontier candidates appear only when the frontier has work")
    s.admit("run-1", {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    s.cmd("frontier_candidates", "page", limit=10)
    s.cmd("advance_frontier", "unchanged", runId="run-1")
    s.time(1000)
    s.succeed("run-1", "a")
    s.cmd("frontier_candidates", "page", limit=10)
    s.time(1000)
    s.cmd("advance_frontier", "advanced", runId="run-1")  # b and c ready, d still waits
    s.succeed("run-1", "b")
    s.cmd("advance_frontier", "unchanged", runId="run-1")  # c not yet succeeded: d waits
    s.succeed("run-1", "c")
    s.time(500)
    s.cmd("advance_frontier", "advanced", runId="run-1")  # d ready
    s.cmd("task_candidates", "page", limit=10)
    return s


def failure_skips_chain() -> Scenario:
    s = Scenario("adr0226-failure-skips-chain",
                 "ADR-0226: a failed step skips its whole pending chain in one frontier pass, and the Run fails in "
                 "the same pass (skip beats waiting)")
    s.admit("run-1", {"a": [], "b": ["a"], "c": ["b"], "d": ["c"], "e": []})
    s.succeed("run-1", "e")
    s.time(1000)
    aid = s.attempt("run-1", "a")
    s.running(aid)
    s.cmd("complete_attempt", "completed", **s.fence(aid), exitCode=3)
    s.cmd("frontier_candidates", "page", limit=5)
    s.time(1000)
    s.cmd("advance_frontier", "terminal", runId="run-1")  # b, c, d skipped + workflow.failed
    s.cmd("frontier_candidates", "page", limit=5)
    return s


def terminals() -> Scenario:
    s = Scenario("adr0226-succeeded-and-failed-terminals",
                 "ADR-0226: the frontier terminalizes by AGG: succeeded, failed (start failure) and timed_out "
                 "(task deadline) Runs, with their error codes by path")
    s.admit("run-ok", {"a": []})
    s.admit("run-bad", {"a": []})
    s.admit("run-slow", {"a": []})
    s.succeed("run-ok", "a")
    bad = s.attempt("run-bad", "a", "local_process")
    s.start(bad)
    s.cmd("fail_start", "start_failed", **s.fence(bad))
    s.cmd("fail_start", "already_terminal", **s.fence(bad))
    slow = s.attempt("run-slow", "a")
    s.start(slow, timeout=2000)
    s.time(3000)
    s.cmd("renew_lease", "stop_requested", **s.fence(slow), durationMs=10_000)  # writes the timeout request
    s.cmd("renew_lease", "stop_requested", **s.fence(slow), durationMs=10_000)  # no second request
    s.cmd("complete_attempt", "completed", **s.fence(slow), exitCode=0)  # deadline passed: timed_out
    s.cmd("frontier_candidates", "page", limit=5)
    for run_id in ("run-bad", "run-ok", "run-slow"):
        s.cmd("advance_frontier", "terminal", runId=run_id)
    return s


def candidate_paging() -> Scenario:
    s = Scenario("adr0226-bounded-candidate-paging",
                 "Candidate queries read limit + 1 rows strictly after the cursor in key order; next is present "
                 "only when truncated; malformed pages are Invalid page_invalid")
    for i in range(5):
        s.admit(f"run-{i}", {"a": [], "b": ["a"]}, planned=T0 - 100 * (5 - i))
        s.time(10)
    first = s.cmd("task_candidates", "page", limit=2)
    assert first.result is not None and first.result["truncated"]
    second = s.cmd("task_candidates", "page", limit=2, after=first.result["next"])
    assert second.result is not None
    s.cmd("task_candidates", "page", limit=2, after=second.result["next"])
    for i in range(5):
        s.succeed(f"run-{i}", "a")
    page = s.cmd("frontier_candidates", "page", limit=3)
    assert page.result is not None
    s.cmd("frontier_candidates", "page", limit=3, after=page.result["next"])
    s.cmd("frontier_candidates", "page_invalid", limit=0)
    s.cmd("frontier_candidates", "page_invalid", limit=65)
    s.cmd("task_candidates", "page_invalid", limit=2, after={"readyAtMs": 1})
    s.cmd("recovery_candidates", "page_invalid", limit=1, extra=True)
    for i in range(3):
        s.cmd("advance_frontier", "advanced", runId=f"run-{i}")
        s.claim(s.attempt(f"run-{i}", "b"), duration=5000)
    s.time(6000)
    rec = s.cmd("recovery_candidates", "page", limit=2)
    assert rec.result is not None
    s.cmd("recovery_candidates", "page", limit=2, after=rec.result["next"])
    for i in range(3):
        s.cmd("request_cancel", "requested", runId=f"run-{i}", reason="user", actor={"type": "user", "id": "alice"})
        s.time(1)
    cancel = s.cmd("cancellation_candidates", "page", limit=2)
    assert cancel.result is not None
    s.cmd("cancellation_candidates", "page", limit=2, after=cancel.result["next"])
    return s


def drift_rolls_back() -> Scenario:
    s = Scenario("adr0226-drift-rolls-back",
                 "Stored drift (StepRun digest, Run identity, task receipt, lease mirror) is Unavailable with the "
                 "command's reason and writes nothing; the rest of the store keeps working")
    s.admit("run-1", {"a": [], "b": ["a"], "c": ["b"]})
    s.admit("run-2", {"a": []})
    s.admit("run-3", {"a": []})
    s.succeed("run-1", "a")
    s.time(1000)
    s.corrupt("stepRuns", "run-1:b", {"resultCode": "tampered"})  # digest no longer matches
    s.cmd("advance_frontier", "step_drift", runId="run-1")
    s.cmd("request_cancel", "requested", runId="run-1", reason="user", actor={"type": "user"})
    s.cmd("converge_cancellation", "step_drift", runId="run-1")
    s.corrupt("runs", "run-2", {"taskId": "other-workflow"})
    s.cmd("advance_frontier", "run_drift", runId="run-2")
    s.task("run_drift", "run-2", "a")
    aid = s.attempt("run-3", "a")
    s.corrupt("taskReceipts", aid, {"attemptNumber": 7})
    s.cmd("claim_lease", "receipt_drift", attemptId=aid, workerId="w1", durationMs=10_000)
    s.corrupt("taskReceipts", aid, {"attemptNumber": 1})  # repaired: the receipt digest matches again
    s.claim(aid)
    s.corrupt("attempts", aid, {"leaseVersion": 5})
    s.cmd("start_attempt", "lease_drift", **s.fence(aid), timeoutMs=None)
    s.cmd("recover_attempt", "lease_drift", attemptId=aid, evidence="not_running")
    s.cmd("frontier_candidates", "page", limit=5)
    return s


def receipt_disagrees_with_attempt() -> Scenario:
    s = Scenario("adr0226-receipt-disagrees-with-attempt",
                 "INV-20: a task receipt that is well-formed and correctly signed but names another attempt number "
                 "or admission time than its attempt is receipt drift (Unavailable), whichever way it differs")
    s.admit("run-1", {"a": []})
    aid = s.attempt("run-1", "a")
    for patch in ({"attemptNumber": 2}, {"attemptNumber": 1, "admittedAtMs": T0 - 1}):
        s.resign_receipt(aid, patch)
        s.cmd("claim_lease", "receipt_drift", attemptId=aid, workerId="w1", durationMs=10_000)
    return s


def convergence_refuses_a_moved_epoch() -> Scenario:
    s = Scenario("adr0228-convergence-refuses-a-moved-epoch",
                 "cancellation.md §3 item 8: an active attempt whose StepRun has left the attempt's admitted epoch "
                 "(a well-formed, re-signed StepRun one version on) is a snapshot the resolution refuses: convergence "
                 "answers Unavailable resolution_failed and writes nothing; the page reports the workflow failed")
    s.admit("run-1", {"a": [], "b": []})
    aid = s.attempt("run-1", "a")
    s.claim(aid, duration=60_000)
    s.cmd("request_cancel", "requested", runId="run-1", reason="user", actor={"type": "user"})
    s.resign_step("run-1:a", {"version": s.state.step_runs["run-1:a"]["version"] + 1})
    s.cmd("converge_cancellation", "resolution_failed", runId="run-1")
    s.cmd("converge_cancellation_page", "page", limit=10)
    return s


def page_skips_drifted_workflow() -> Scenario:
    s = Scenario("adr0228-page-isolates-drifted-workflow",
                 "D-6: a convergence page runs one transaction per workflow; a drifted workflow is reported "
                 "failed and writes nothing while the other workflows of the page commit")
    for i in range(3):
        s.admit(f"run-{i}", {"a": [], "b": ["a"]})
    s.time(1000)
    for i in range(3):
        s.cmd("request_cancel", "requested", runId=f"run-{i}", reason="policy", actor={"type": "system"})
    s.corrupt("stepRuns", "run-1:b", {"readyAtMs": 5})  # pending with readyAtMs: not a valid StepRun
    s.time(1000)
    s.cmd("converge_cancellation_page", "page", limit=2)
    s.cmd("converge_cancellation_page", "page", limit=2, after={"cancelRequestedAtMs": T0 + 1000, "runId": "run-1"})
    s.cmd("converge_cancellation_page", "page", limit=5)
    s.cmd("converge_cancellation_page", "page_invalid", limit=129)
    return s


def settled_replay() -> Scenario:
    s = Scenario("adr0226-settled-replay",
                 "ADR-0226 §4: a terminal aggregate replays read-only: advance_frontier answers settled, "
                 "request_cancel on it is a Conflict, worker replays answer already_*")
    s.admit("run-1", {"a": []})
    aid = s.attempt("run-1", "a")
    s.running(aid)
    s.cmd("start_attempt", "already_running", **s.fence(aid), timeoutMs=None)
    s.cmd("record_running", "already_running", **s.fence(aid))
    s.cmd("complete_attempt", "completed", **s.fence(aid), exitCode=0)
    s.cmd("complete_attempt", "already_terminal", **s.fence(aid), exitCode=0)
    s.time(1000)
    s.cmd("advance_frontier", "terminal", runId="run-1")
    s.cmd("advance_frontier", "settled", runId="run-1")
    s.time(5000)
    s.cmd("advance_frontier", "settled", runId="run-1")
    s.cmd("request_cancel", "run_terminal", runId="run-1", reason="user", actor={"type": "user"})
    s.cmd("converge_cancellation", "not_cancelling", runId="run-1")
    s.task("step_not_ready", "run-1", "a")
    return s


def admission_replay() -> Scenario:
    s = Scenario("adr0226-admission-replay-after-progress",
                 "ADR-0226 §5: exact admission replay returns existing after frontier, execution and cancellation "
                 "progress; other content under the same planId or runId is a Conflict")
    plan = s.admit("run-1", {"a": [], "b": ["a"]})
    s.cmd("admit_workflow", "existing", plan=plan)
    s.succeed("run-1", "a")
    s.time(1000)
    s.cmd("advance_frontier", "advanced", runId="run-1")
    aid = s.attempt("run-1", "b")
    s.task("existing", "run-1", "b")
    s.task("binding_mismatch", "run-1", "b", revision=2)
    s.claim(aid)
    s.cmd("admit_workflow", "existing", plan=plan)
    s.cmd("request_cancel", "requested", runId="run-1", reason="user", actor={"type": "user", "id": "alice"})
    s.cmd("admit_workflow", "existing", plan=plan)
    s.cmd("admit_workflow", "plan_id_conflict", plan=plans.make_plan("run-1", "plan-1", {"a": []}, T0))
    s.cmd("admit_workflow", "run_id_conflict", plan=plans.make_plan("run-1", "plan-other", {"a": []}, T0))
    other = plans.make_plan("run-9", "plan-9", {"a": []}, T0)
    reused = {k: v for k, v in other.items() if k != "planDigest"}
    reused["steps"] = [{**other["steps"][0], "stepRunId": "run-1:a"}]  # a StepRun id of run-1
    s.cmd("admit_workflow", "step_run_id_conflict", plan=sign_plan(reused))
    s.cmd("admit_workflow", "planned_in_future", plan=plans.make_plan("run-8", "plan-8", {"a": []}, T0 + 10**9))
    s.cmd("admit_workflow", "plan_invalid", plan={**plan, "planDigest": "0" * 64})
    return s


def worker_protocol() -> Scenario:
    s = Scenario("adr0227-worker-protocol",
                 "Dispatch leases and the start barrier: claim (new, idempotent, leased, after release, after "
                 "expiry), renew, fences, completion from starting, start failure past the task deadline, and "
                 "recovery of an expired starting attempt")
    s.admit("run-1", {"a": [], "b": [], "c": [], "d": []})
    a = s.attempt("run-1", "a")
    s.claim(a, "w1", 5000)
    s.cmd("claim_lease", "idempotent", attemptId=a, workerId="w1", durationMs=5000)
    s.cmd("claim_lease", "leased", attemptId=a, workerId="w2", durationMs=5000)
    s.cmd("renew_lease", "renewed", **s.fence(a), durationMs=5000)
    s.cmd("renew_lease", "worker_mismatch", attemptId=a, workerId="w2", leaseGeneration=1, durationMs=5000)
    s.cmd("renew_lease", "lease_generation_mismatch", attemptId=a, workerId="w1", leaseGeneration=2, durationMs=5000)
    s.cmd("renew_lease", "argument_invalid", attemptId=a, workerId="w1", leaseGeneration=1, durationMs=10)
    s.cmd("release_lease", "released", **s.fence(a), reason="capacity_changed")
    s.cmd("claim_lease", "claimed", attemptId=a, workerId="w2", durationMs=5000)  # re-claim: generation 2
    s.cmd("start_attempt", "lease_generation_mismatch", attemptId=a, workerId="w2", leaseGeneration=1,
          timeoutMs=None)
    s.time(6000)
    s.cmd("start_attempt", "lease_expired", **s.fence(a), timeoutMs=None)
    s.cmd("claim_lease", "claimed", attemptId=a, workerId="w1", durationMs=10_000)  # expired: generation 3
    s.cmd("start_attempt", "starting", **s.fence(a), timeoutMs=None)
    s.cmd("start_attempt", "already_starting", **s.fence(a), timeoutMs=None)
    s.cmd("complete_attempt", "completed", **s.fence(a), exitCode=0)  # from starting: synthetic start
    b = s.attempt("run-1", "b")
    s.start(b)
    s.cmd("complete_attempt", "completed", **s.fence(b), exitCode=-1)  # from starting: failed
    c = s.attempt("run-1", "c")
    s.start(c, timeout=1000)
    s.time(1500)
    s.cmd("fail_start", "start_failed", **s.fence(c))  # deadline passed: timed_out
    d = s.attempt("run-1", "d")
    s.start(d, duration=5000)
    s.time(5000)
    s.cmd("record_running", "lease_expired", **s.fence(d))
    s.cmd("recover_attempt", "failed", attemptId=d, evidence="not_running")  # starting → lost, step failed
    s.cmd("record_running", "not_leased", attemptId=d, workerId="w1", leaseGeneration=1)
    s.cmd("advance_frontier", "terminal", runId="run-1")
    return s


# ------------------------------------------------------------------------------------------------
# ADR-0228: cancellation convergence
def atomic_cancel() -> Scenario:
    s = Scenario("adr0228-attempt-two-steps-parent-atomic",
                 "ADR-0228 §5: one convergence settles an unleased claimed attempt, cancels its ready step and the "
                 "pending step, and terminalizes the parent, all in one transaction")
    s.admit("run-1", {"a": [], "b": ["a"]})
    aid = s.attempt("run-1", "a")
    s.claim(aid)
    s.cmd("release_lease", "released", **s.fence(aid), reason="shutdown")
    s.cmd("release_lease", "already_released", attemptId=aid, workerId="w1", leaseGeneration=1, reason="shutdown")
    s.cmd("release_lease", "replay_mismatch", attemptId=aid, workerId="w1", leaseGeneration=1, reason="declined")
    s.time(1000)
    s.cmd("request_cancel", "requested", runId="run-1", reason="user", actor={"type": "user", "id": "alice"})
    s.cmd("request_cancel", "existing", runId="run-1", reason="timeout", actor={"type": "system"})
    s.cmd("cancellation_candidates", "page", limit=5)
    s.time(1000)
    s.cmd("converge_cancellation", "terminal", runId="run-1")
    s.cmd("converge_cancellation", "settled", runId="run-1")
    s.cmd("cancellation_candidates", "page", limit=5)
    return s


def siblings_cancelled_while_blocked() -> Scenario:
    s = Scenario("adr0228-idle-siblings-cancelled-authority-blocks",
                 "ADR-0228 §3: convergence cancels idle siblings but never terminalizes a step whose attempt is "
                 "leased, starting or running; nothing new starts after intent")
    s.admit("run-1", {"p": [], "q": [], "r": [], "s": [], "t": ["s"], "u": []})
    leased = s.attempt("run-1", "p")
    s.claim(leased)
    starting = s.attempt("run-1", "q")
    s.start(starting, worker="w2")
    running = s.attempt("run-1", "r")
    s.running(running)
    idle = s.attempt("run-1", "u")  # claimed, never leased: settled by convergence
    s.time(1000)
    s.cmd("request_cancel", "requested", runId="run-1", reason="shutdown", actor={"type": "scheduler"})
    s.cmd("claim_lease", "not_eligible", attemptId=idle, workerId="w1", durationMs=10_000)
    s.cmd("start_attempt", "cancellation_requested", **s.fence(leased), timeoutMs=None)
    s.cmd("record_running", "cancellation_requested", **s.fence(starting))
    s.task("cancellation_requested", "run-1", "s")
    s.cmd("advance_frontier", "cancellation_requested", runId="run-1")
    s.cmd("renew_lease", "stop_requested", **s.fence(running), durationMs=10_000)
    s.cmd("task_candidates", "page", limit=5)
    s.cmd("converge_cancellation", "blocked", runId="run-1")
    s.cmd("converge_cancellation", "blocked", runId="run-1")  # nothing more to do while authority holds
    return s


def timeout_mapping() -> Scenario:
    s = Scenario("adr0228-timeout-mapping",
                 "ADR-0228 §3-§4: reason timeout maps ready steps and claimed attempts to timed_out, pending steps "
                 "to cancelled, completions under intent to timed_out whatever the exit code; the parent ends "
                 "timed_out")
    s.admit("run-1", {"a": [], "b": [], "c": ["a"], "d": []})
    s.attempt("run-1", "a")  # stays claimed without a lease: settled by convergence
    running = s.attempt("run-1", "b")
    s.running(running)
    starting = s.attempt("run-1", "d")
    s.start(starting, worker="w2")
    s.time(1000)
    s.cmd("request_cancel", "requested", runId="run-1", reason="timeout", actor={"type": "system"})
    s.cmd("converge_cancellation", "blocked", runId="run-1")  # a timed_out, c cancelled, b and d block
    s.cmd("complete_attempt", "completed", **s.fence(running), exitCode=0)  # → timed_out
    s.cmd("fail_start", "start_failed", **s.fence(starting))  # → timed_out
    s.time(1000)
    s.cmd("converge_cancellation", "terminal", runId="run-1")
    s.cmd("converge_cancellation", "settled", runId="run-1")
    s.admit("run-2", {"a": [], "b": []})
    first = s.attempt("run-2", "a")
    s.start(first)
    second = s.attempt("run-2", "b")
    s.start(second, worker="w2")
    s.cmd("request_cancel", "requested", runId="run-2", reason="reconcile", actor={"type": "reconciler"})
    s.cmd("complete_attempt", "completed", **s.fence(first), exitCode=7)  # from starting → cancelled
    s.cmd("fail_start", "start_failed", **s.fence(second))  # → cancelled
    s.cmd("converge_cancellation", "terminal", runId="run-2")
    return s


def partial_then_final() -> Scenario:
    s = Scenario("adr0228-partial-completion-final",
                 "ADR-0228 §4: partial convergence leaves the Run running with its intent, the worker's completion "
                 "is mapped to cancelled, and a later convergence (by page) terminalizes the parent last")
    s.admit("run-1", {"a": [], "b": [], "c": ["b"]})
    aid = s.attempt("run-1", "a")
    s.running(aid)
    s.time(1000)
    s.cmd("request_cancel", "requested", runId="run-1", reason="user", actor={"type": "user", "id": "bob"})
    s.cmd("converge_cancellation_page", "page", limit=10)  # blocked: b and c cancelled
    s.cmd("cancellation_candidates", "page", limit=10)
    s.time(1000)
    s.cmd("renew_lease", "stop_requested", **s.fence(aid), durationMs=10_000)
    s.cmd("complete_attempt", "completed", **s.fence(aid), exitCode=0)  # cancelled under intent
    s.cmd("converge_cancellation_page", "page", limit=10)  # terminal
    s.cmd("converge_cancellation_page", "page", limit=10)  # nothing left
    s.cmd("converge_cancellation", "settled", runId="run-1")
    return s


def dead_worker_recovered() -> Scenario:
    s = Scenario("adr0228-dead-worker-trusted-recovery",
                 "D-2/D-7: an expired lease keeps blocking cancellation until trusted recovery: running evidence "
                 "retries, unknown is manual, not_running fails the step; an expired unstarted claim is requeued "
                 "and then cancelled")
    s.admit("run-1", {"a": [], "b": ["a"]})
    aid = s.attempt("run-1", "a")
    s.running(aid, duration=10_000)
    s.admit("run-2", {"a": []})
    claim = s.attempt("run-2", "a")
    s.claim(claim, duration=5000)
    s.time(1000)
    s.cmd("request_cancel", "requested", runId="run-1", reason="user", actor={"type": "user"})
    s.cmd("request_cancel", "requested", runId="run-2", reason="timeout", actor={"type": "system"})
    s.cmd("converge_cancellation", "blocked", runId="run-1")
    s.cmd("recover_attempt", "lease_live", attemptId=aid, evidence="not_running")
    s.time(20_000)
    s.cmd("converge_cancellation", "blocked", runId="run-2")  # expired but leased: still blocked (D-7)
    s.cmd("recovery_candidates", "page", limit=10)
    s.cmd("recover_attempt", "retry", attemptId=aid, evidence="running")
    s.cmd("recover_attempt", "manual", attemptId=aid, evidence="unknown")
    s.cmd("recover_attempt", "failed", attemptId=aid, evidence="not_running")  # running → lost → failed
    s.cmd("recover_attempt", "requeued", attemptId=claim, evidence="unknown")  # unstarted: evidence ignored
    s.cmd("recover_attempt", "attempt_state_mismatch", attemptId=claim, evidence="not_running")
    s.cmd("complete_attempt", "not_leased", attemptId=aid, workerId="w1", leaseGeneration=1, exitCode=0)
    s.cmd("converge_cancellation_page", "page", limit=10)  # both terminal
    return s


SCENARIOS: tuple[Callable[[], Scenario], ...] = (
    dependency_readied, failure_skips_chain, terminals, candidate_paging, drift_rolls_back, settled_replay,
    admission_replay, worker_protocol, atomic_cancel, siblings_cancelled_while_blocked, timeout_mapping,
    partial_then_final, dead_worker_recovered, page_skips_drifted_workflow, step_ids_sort_against_keys,
    receipt_disagrees_with_attempt, convergence_refuses_a_moved_epoch,
)


def build() -> dict[str, str]:
    """File name → file text of every corpus trace."""
    out = {}
    for make in SCENARIOS:
        trace = make().trace()
        out[f"{trace.name}.json"] = dumps(trace)
    return out


def stale_files(directory: Path = CORPUS_DIR) -> list[str]:
    """Corpus files that are missing, different from a fresh build, or no longer built."""
    built = build()
    present = {p.name for p in directory.glob("*.json")}
    stale = [name for name, text in built.items()
             if not (directory / name).exists() or (directory / name).read_text(encoding="utf-8") != text]
    return sorted(stale + sorted(present - set(built)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")
    parser.add_argument("--dir", type=Path, default=CORPUS_DIR)
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.dir)
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0
    args.dir.mkdir(parents=True, exist_ok=True)
    built = build()
    for name, text in built.items():
        (args.dir / name).write_text(text, encoding="utf-8")
    for extra in sorted({p.name for p in args.dir.glob("*.json")} - set(built)):
        (args.dir / extra).unlink()
    print(f"wrote {len(built)} traces to {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
