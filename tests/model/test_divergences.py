"""Where the oracle deliberately answers otherwise than ql3 (docs/divergences.md), one test per row.

Each test builds a valid input from a model state, checks that qlwf answers it, applies exactly the
one change of its row and asserts qlwf's answer: so a test pins exactly that difference. ql3's
answer is stated in the document (read from whyour/qinglong), never computed here. The last test
checks that every test the document names exists.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from model_fixtures import (
    LEASE_MS,
    Sim,
    binding_for,
    cancel_input_of,
    make_plan,
    seal_step_run,
    seal_task_receipt,
    situation,
)
from qlwf.conformance.generate import plans
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.model import tables as T
from qlwf.model.errors import QlwfError
from qlwf.model.oracle import ORACLE_REQUEST_INVALID, consult

from qlwf.oracle.protocol import answer_line

Record = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "divergences.md"
INT31_MAX = 2147483647
CANCEL_INVALID = T.FAMILIES["cancellation"].invalid
CANCEL_UNAVAILABLE = T.FAMILIES["cancellation"].unavailable
RECOVERY_INVALID = T.FAMILIES["task_recovery"].invalid
FRONTIER_INVALID = T.FAMILIES["frontier"].invalid


# --------------------------------------------------------------------------------------------------
# Valid inputs, taken from model states (model_fixtures.situation: the demo plan fetch -> report)
def cancel_input(stage: str = "claimed", reason: str = "user") -> Record:
    """A `cancel` snapshot of the demo workflow with intent; the fetch attempt driven to `stage`."""
    sc = situation(stage, cancel=reason)
    return cancel_input_of(sc.sim.state, sc.run_id)


def recover_input(stage: str = "running", cancel: str | None = None) -> Record:
    """A `recover` input for the fetch attempt at `stage`, observed after its lease expired."""
    sc = situation(stage, cancel=cancel)
    sc.sim.tick(2 * LEASE_MS)
    s = sc.sim.state
    a = s.attempts[sc.attempt_id]
    reason = "unstarted_claim_expired" if a["status"] == "claimed" else "execution_not_running"
    return copy.deepcopy({"admission": s.receipts[a["id"]], "run": s.runs[sc.run_id], "attempt": a,
                          "stepRun": s.step_runs[a["stepRunId"]], "reason": reason, "observedAtMs": s.clock})


def frontier_input() -> Record:
    """A `frontier` snapshot whose pass moves one step: fetch succeeded, report pending."""
    sc = situation("running")
    sc.sim.do("complete_attempt", 6000, **sc.fence(exitCode=0))
    s = sc.sim.state
    return copy.deepcopy({"plan": sc.plan, "run": s.runs[sc.run_id], "stepRuns": s.steps_of_run(sc.run_id),
                          "observedAtMs": s.clock})


def refusal(fn: str, inp: Any) -> QlwfError:
    with pytest.raises(QlwfError) as err:
        consult(fn, inp)
    return err.value


def assert_refused(fn: str, inp: Any, cls: str, code: str | None, reason: str) -> QlwfError:
    err = refusal(fn, inp)
    assert (err.error_class, err.code, err.reason) == (cls, code, reason), err
    return err


def line(fn: str, inp: Any) -> str:
    return json.dumps({"fn": fn, "input": inp}, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------------------------------
# Divergences
def test_v01_recovery_under_cancel_intent_recovers() -> None:
    """D-2: ql3's builder refuses a Run with intent; qlwf recovers, and convergence then ends the Run."""
    assert consult("recover", recover_input("running"))
    res = consult("recover", recover_input("running", cancel="user")).resolution
    assert res["disposition"] == "failed" and res["attempt"]["status"] == "lost"
    assert res["run"]["cancelRequestedAtMs"] == 6000 and res["run"]["status"] == "running"
    # The command path: recovery releases the running attempt's authority, so convergence terminalizes.
    sc = situation("running", cancel="user")
    blocked = sc.sim.do("converge_cancellation", 6500, runId=sc.run_id)
    assert blocked["status"] == "blocked"
    sc.sim.tick(2 * LEASE_MS)
    assert sc.sim.do("recover_attempt", attemptId=sc.attempt_id, evidence="not_running")["status"] == "failed"
    assert sc.sim.do("converge_cancellation", runId=sc.run_id)["status"] == "terminal"
    assert sc.sim.run(sc.run_id)["status"] == "cancelled"


def test_v02_recover_attempt_key_outside_the_generic_record_is_refused() -> None:
    inp = recover_input("running")
    assert consult("recover", inp)
    inp["attempt"]["nodeId"] = "node-7"
    err = assert_refused("recover", inp, "Invalid", RECOVERY_INVALID, "input_invalid")
    assert "nodeId" in err.message


def test_v03_cancel_attempt_key_outside_the_generic_record_is_refused() -> None:
    inp = cancel_input("claimed")
    assert consult("cancel", inp)
    inp["activeTaskAttempts"][0]["attempt"]["nodeId"] = "node-7"
    err = assert_refused("cancel", inp, "Invalid", CANCEL_INVALID, "snapshot_invalid")
    assert "nodeId" in err.message


def test_v04_cancel_active_entry_with_another_key_is_refused() -> None:
    inp = cancel_input("claimed")
    assert consult("cancel", inp)
    inp["activeTaskAttempts"][0]["note"] = "x"
    err = assert_refused("cancel", inp, "Invalid", CANCEL_INVALID, "snapshot_invalid")
    assert "exactly {admission, attempt, leaseStatus}" in err.message


@pytest.mark.parametrize("reason", ["manual", "", None, 3])
def test_v05_cancel_reason_outside_the_five_is_refused(reason: Any) -> None:
    inp = cancel_input("claimed")
    assert consult("cancel", inp)
    inp["run"]["cancelReason"] = reason
    err = assert_refused("cancel", inp, "Invalid", CANCEL_INVALID, "snapshot_invalid")
    assert err.message == "Run is not a cancelling runtime-owned Workflow aggregate"


@pytest.mark.parametrize(("record", "key", "value"), [
    ("run", "createdAtMs", "1000"), ("run", "createdAtMs", None), ("run", "createdAtMs", -1),
    ("run", "startedAtMs", 1000.5), ("run", "startedAtMs", "absent"),
    ("attempt", "startedAtMs", None), ("attempt", "finishedAtMs", None),
], ids=lambda x: repr(x))
def test_v06_recover_time_that_is_not_a_timestamp_is_refused(record: str, key: str, value: Any) -> None:
    inp = recover_input("running")
    assert consult("recover", inp)
    if value == "absent":
        del inp[record][key]
    else:
        inp[record][key] = value
    err = assert_refused("recover", inp, "Invalid", RECOVERY_INVALID, "input_invalid")
    assert err.message == "a recorded Run or attempt time is not a timestamp"


@pytest.mark.parametrize("value", [None, "5000"])
def test_v07_cancel_running_attempt_start_time_that_is_not_a_timestamp_is_refused(value: Any) -> None:
    inp = cancel_input("running")
    assert consult("cancel", inp)
    inp["activeTaskAttempts"][0]["attempt"]["startedAtMs"] = value
    err = assert_refused("cancel", inp, "Invalid", CANCEL_INVALID, "snapshot_invalid")
    assert err.message.endswith("startedAtMs is not a timestamp")


@pytest.mark.parametrize("field", ["taskRevision", "attemptId"])
def test_v08_receipt_fields_wider_than_records_are_refused(field: str) -> None:
    inp = cancel_input("claimed")
    assert consult("cancel", inp)
    entry = inp["activeTaskAttempts"][0]
    receipt = entry["admission"]
    if field == "taskRevision":  # ql3: 1-10 digits, no upper bound; records.md §6.10: TASK_REVISION (R <= 2^31-1)
        changed = {"taskRevision": f"qltd:v1:3000000000:{receipt['taskDefinitionDigest']}"}
    else:  # ql3: any IDENTIFIER (128); records.md §6.10: PORTABLE_ID (36)
        changed = {"attemptId": "wta:" + "0" * 40}
        entry["attempt"]["id"] = changed["attemptId"]
    entry["admission"] = seal_task_receipt({**receipt, **changed})
    err = assert_refused("cancel", inp, "Invalid", CANCEL_INVALID, "snapshot_invalid")
    assert err.message == "active Attempt admission is invalid"


def test_v09_cancel_orders_step_runs_by_code_point_not_by_ql3_collation() -> None:
    """D-9: step keys `a_x` and `a-x`: code point puts `a-x` first, ICU root collation `a_x`."""
    inp = cancel_input("admitted")
    res = consult("cancel", inp).resolution
    assert [m["stepRun"]["stepKey"] for m in res["stepMutations"]] == ["fetch", "report"]
    renamed = {"fetch": "a_x", "report": "a-x"}
    inp["stepRuns"] = [seal_step_run({**s, "stepKey": renamed[s["stepKey"]]}) for s in inp["stepRuns"]]
    res = consult("cancel", inp).resolution
    assert [m["stepRun"]["stepKey"] for m in res["stepMutations"]] == ["a-x", "a_x"]
    assert [m["event"]["sequence"] for m in res["stepMutations"]] == [5, 6]


def _two_cancelling_runs(*, leased: bool) -> Sim:
    """Runs r1 (intent at 2000) and r2 (intent at 3000), each with a claimed attempt of step a."""
    sim = Sim(clock=1000)
    for n in (1, 2):
        plan = make_plan({"a": [], "b": ["a"]}, run_id=f"r{n}", plan_id=f"p{n}", prefix=f"r{n}-")
        sim.do("admit_workflow", plan=plan)
        aid = sim.do("admit_task_attempt", runId=f"r{n}", stepRunId=f"r{n}-a",
                     binding=binding_for(plan, "a"))["attempt"]["id"]
        if leased:
            sim.do("claim_lease", attemptId=aid, workerId="w1", durationMs=600_000)
    for n, at in ((1, 2000), (2, 3000)):
        sim.do("request_cancel", at, runId=f"r{n}", reason="user", actor={"type": "user"})
    return sim


def test_v10_a_failing_workflow_does_not_fail_the_convergence_page() -> None:
    """D-6: one transaction per workflow; the failing one is an outcome, the next one converges."""
    sim = _two_cancelling_runs(leased=False)
    page = sim.do("converge_cancellation_page", 5000, limit=10)
    assert [(o["runId"], o["status"]) for o in page["outcomes"]] == [("r1", "terminal"), ("r2", "terminal")]
    sim = _two_cancelling_runs(leased=False)
    r1_attempt = next(a["id"] for a in sim.state.attempts.values() if a["runId"] == "r1")
    sim.put("receipts", r1_attempt, None)  # r1's snapshot can no longer be loaded
    page = sim.do("converge_cancellation_page", 5000, limit=10)
    assert [(o["runId"], o["status"]) for o in page["outcomes"]] == [("r1", "failed"), ("r2", "terminal")]
    assert page["outcomes"][0]["error"] == {"class": "Unavailable", "code": CANCEL_UNAVAILABLE,
                                            "reason": "receipt_drift"}
    assert sim.run("r1")["status"] == "running" and sim.run("r2")["status"] == "cancelled"



def test_v11_convergence_pages_resume_after_a_caller_held_cursor() -> None:
    """S-10: with limit 1 and two blocked Runs, the second page reaches r2 (ql3 would take r1 again)."""
    sim = _two_cancelling_runs(leased=True)
    first = sim.do("converge_cancellation_page", 5000, limit=1)
    assert [(o["runId"], o["status"]) for o in first["outcomes"]] == [("r1", "blocked")]
    assert first["next"] == {"cancelRequestedAtMs": 2000, "runId": "r1"} and first["hasMore"] is True
    second = sim.do("converge_cancellation_page", limit=1, after=first["next"])
    assert [(o["runId"], o["status"]) for o in second["outcomes"]] == [("r2", "blocked")]
    assert second["next"] is None and second["hasMore"] is True


def test_v12_sqlite_keeps_dispatch_leases_so_a_leased_claim_blocks_convergence() -> None:
    """D-10: on SQLite a claimed attempt with a `leased` lease blocks (ql3-local-sqlite passes null)."""
    t0 = 1000
    for claim, expected in ((False, "terminal"), (True, "blocked")):
        with SqliteAdapter() as port:
            port.execute("admit_workflow", {"plan": plans.make_plan("run-1", "plan-1", {"a": []}, t0)}, now=t0)
            out = port.execute("admit_task_attempt", {"runId": "run-1", "stepRunId": "run-1:a",
                                                      "binding": plans.binding("a")}, now=t0)
            if claim:
                port.execute("claim_lease", {"attemptId": out["attempt"]["id"], "workerId": "w1",
                                             "durationMs": 10_000}, now=t0)
            port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}},
                         now=t0 + 1)
            res = port.execute("converge_cancellation", {"runId": "run-1"}, now=t0 + 2)
            assert res["status"] == expected


def test_v13_an_integer_written_with_a_fraction_is_not_an_integer() -> None:
    """records.md §1: `1.0` is not an `int` (ql3's JSON.parse makes it the number 1)."""
    snap = frontier_input()
    text = line("frontier", snap)
    assert "ok" in answer_line(text)
    literal = f'"observedAtMs":{snap["observedAtMs"]}'
    assert text.count(literal) == 1
    answer = answer_line(text.replace(literal, literal + ".0"))
    assert answer["error"]["class"] == "Invalid" and answer["error"]["code"] == FRONTIER_INVALID


def _json_mutation(kind: str) -> tuple[str, str]:
    """A valid cancel request line and the same line with one JSON-level change in an unchecked value."""
    inp = cancel_input("claimed")
    inp["run"]["taskSnapshotRef"] = "MARK"
    text = line("cancel", inp)
    assert text.count('"MARK"') == 1
    replacement = {
        "lone_surrogate": '"\\ud800"',
        "duplicate_name": '"MARK","taskSnapshotRef":"MARK"',
        "too_deep": "[" * 70 + "]" * 70,
        "beyond_double": "1E400",
    }[kind]
    return text, text.replace('"MARK"', replacement)


@pytest.mark.parametrize("kind", ["lone_surrogate", "duplicate_name", "too_deep", "beyond_double"])
def test_v14_json_text_the_strict_gate_refuses(kind: str) -> None:
    """decisions Q-12: refused before the model sees it (ql3's JSON.parse accepts each of these)."""
    good, bad = _json_mutation(kind)
    assert "ok" in answer_line(good)
    err = answer_line(bad)["error"]
    assert (err["class"], err["code"]) == ("Invalid", ORACLE_REQUEST_INVALID)
    assert err["message"].startswith("json_invalid")


# --------------------------------------------------------------------------------------------------
# Fixed: the oracle now answers as ql3 does
@pytest.mark.parametrize("counter", ["eventSequence", "version"])
def test_f01_frontier_with_a_run_counter_at_int31_max_still_resolves(counter: str) -> None:
    """frontier.md §4.2: only a counter ABOVE 2147483647 when a mutation is built fails (ql3 alike)."""
    inp = frontier_input()
    assert len(consult("frontier", inp).resolution["stepMutations"]) == 1
    inp["run"][counter] = INT31_MAX
    (m,) = consult("frontier", inp).resolution["stepMutations"]
    assert m[f"expectedRun{counter[0].upper()}{counter[1:]}"] == INT31_MAX
    if counter == "eventSequence":
        assert m["event"]["sequence"] == INT31_MAX + 1
    inp["run"][counter] = INT31_MAX + 1  # above: the mutation layer refuses (unchanged)
    assert_refused("frontier", inp, "Invalid", "STEP_RUN_INVALID", "step_run_invalid")


def test_f02_step_transition_context_counter_at_int31_max_is_accepted() -> None:
    """records.md §6.5: the context's Run counters are INT31, 2147483647 included (ql3 alike)."""
    inp = frontier_input()
    report = next(s for s in inp["stepRuns"] if s["stepKey"] == "report")
    request = {"current": report,
               "command": {"expectedVersion": report["version"], "expectedDigest": report["stepRunDigest"],
                           "mutationId": "m-1", "to": "ready", "atMs": inp["observedAtMs"]},
               "context": {"expectedRunVersion": 9, "expectedRunEventSequence": 9, "eventId": "e-1",
                           "dedupeKey": "e-1", "actor": {"type": "reconciler"}}}
    assert consult("step-transition", request)
    request["context"] |= {"expectedRunVersion": INT31_MAX, "expectedRunEventSequence": INT31_MAX}
    assert consult("step-transition", request).resolution["event"]["sequence"] == INT31_MAX + 1


# --------------------------------------------------------------------------------------------------
# Checked: no divergence
@pytest.mark.parametrize("intent", [False, True])
def test_c01_recover_does_not_read_the_cancel_reason(intent: bool) -> None:
    """Neither ql3's builder nor qlwf reads cancelReason in recovery (with intent, row V-1 applies)."""
    inp = recover_input("running", cancel="user" if intent else None)
    inp["run"]["cancelReason"] = "manual"
    assert consult("recover", inp).resolution["disposition"] == "failed"


# --------------------------------------------------------------------------------------------------
# The document
def _named_tests() -> list[tuple[str, str]]:
    """(file, test name) of every test cell of the document's tables."""
    found = re.findall(r"`(tests/[a-z0-9_/]*test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)`", DOC.read_text(encoding="utf-8"))
    assert found, "docs/divergences.md names no test"
    return found


def test_every_test_the_document_names_exists() -> None:
    missing = []
    for path, name in _named_tests():
        file = REPO / path
        names = ({n.name for n in ast.walk(ast.parse(file.read_text(encoding="utf-8")))
                  if isinstance(n, ast.FunctionDef)} if file.is_file() else set())
        if name not in names:
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/divergences.md names tests that do not exist: {missing}"


def test_every_test_of_this_file_is_in_the_document() -> None:
    named = {name for path, name in _named_tests() if path == "tests/model/test_divergences.py"}
    here = {n.name for n in ast.parse(Path(__file__).read_text(encoding="utf-8")).body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
            and not n.name.startswith("test_every_test_")}
    assert here <= named, f"tests of this file missing from docs/divergences.md: {sorted(here - named)}"
