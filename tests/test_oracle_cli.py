"""The oracle command line: single snapshots, --explain, batch, and fail-closed errors."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qlwf.model.oracle import FUNCTIONS, consult

from qlwf.cmd_oracle import answer_line

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def qlwf(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qlwf.cli", *args], input=stdin, capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def load(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text(encoding="utf-8"))


def test_frontier_example_skips_the_whole_chain_in_one_pass() -> None:
    out = qlwf("oracle", "frontier", str(EXAMPLES / "frontier-chain-root-failed.json"))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    # frontier.md §4.3: the pending chain below a failed step is skipped in one pass, and the Run fails.
    assert [m["stepRun"]["status"] for m in res["stepMutations"]] == ["skipped"] * 3
    assert res["terminalStatus"] == "failed"
    assert res["terminalTransition"]["errorCode"] == "workflow_step_failed"
    assert out.stdout.count("\n") == 1  # canonical one-line JSON


def test_cancel_example_explains_every_step_and_attempt() -> None:
    out = qlwf("oracle", "cancel", str(EXAMPLES / "cancel-running-sibling-blocks.json"), "--explain")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    snap = load("cancel-running-sibling-blocks.json")
    subjects = {s["id"] for s in snap["stepRuns"]} | {e["attempt"]["id"] for e in snap["activeTaskAttempts"]}
    assert set(body["explanation"]) == subjects
    assert body["resolution"]["terminalTransition"] is None  # a running sibling blocks the parent (ADR-0228 §4)
    assert body["resolution"]["blockedStepRunIds"] == ["sr-left"]


@pytest.mark.parametrize("fn,name", [
    ("admit-workflow", "admit-workflow-diamond.json"), ("admit-attempt", "admit-attempt-fetch.json"),
    ("recover", "recover-unstarted-claim.json"), ("cancel", "cancel-timeout-expired-lease.json"),
    ("frontier", "frontier-diamond-root-succeeded.json"),
])
def test_every_example_resolves_from_the_command_line(fn: str, name: str) -> None:
    out = qlwf("oracle", fn, str(EXAMPLES / name), "--explain")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["resolution"] == consult(fn, load(name)).resolution


def test_stdin_and_malformed_input_exit_2_with_one_line() -> None:
    good = qlwf("oracle", "frontier", "-", stdin=(EXAMPLES / "frontier-diamond-root-succeeded.json").read_text())
    assert good.returncode == 0
    for payload, code in [("{", "QLWF_ORACLE_REQUEST_INVALID json_invalid"),
                          ('{"a": 1, "a": 2}', "QLWF_ORACLE_REQUEST_INVALID json_invalid"),
                          ("[]", "Invalid PLUGIN_PACKAGE_WORKFLOW_FRONTIER_INVALID"),
                          ('{"plan": {}, "run": {}, "stepRuns": [], "observedAtMs": 1}',
                           "PLUGIN_PACKAGE_WORKFLOW_EXECUTION_PLAN_INVALID plan_invalid")]:
        bad = qlwf("oracle", "frontier", "-", stdin=payload)
        assert bad.returncode == 2
        assert bad.stdout == ""
        assert bad.stderr.count("\n") == 1 and code in bad.stderr and "Traceback" not in bad.stderr


def test_batch_answers_one_line_per_request() -> None:
    out = qlwf("oracle", "batch", stdin=(EXAMPLES / "batch.jsonl").read_text() + "not json\n"
               + '{"fn": "nope", "input": {}}\n')
    assert out.returncode == 0
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [next(iter(x)) for x in lines] == ["ok", "ok", "error", "error", "error"]
    assert lines[2]["error"]["class"] == "Invalid"
    assert set(lines[2]["error"]) == {"class", "code", "message"}


def test_batch_step_transition_returns_the_mutation() -> None:
    snap = load("frontier-diamond-root-succeeded.json")
    left = next(s for s in snap["stepRuns"] if s["stepKey"] == "left")
    request = {"fn": "step-transition", "input": {
        "current": left,
        "command": {"expectedVersion": 1, "expectedDigest": left["stepRunDigest"], "mutationId": "m-1",
                    "to": "ready", "atMs": snap["observedAtMs"]},
        "context": {"expectedRunVersion": 9, "expectedRunEventSequence": 9, "eventId": "e-1", "dedupeKey": "e-1",
                    "actor": {"type": "reconciler"}}}}
    answer = answer_line(json.dumps(request))
    m = answer["ok"]
    assert (m["previousStatus"], m["stepRun"]["status"], m["stepRun"]["version"]) == ("pending", "ready", 2)
    assert m["event"]["sequence"] == 10 and m["event"]["type"] == "step.ready"
    request["input"]["command"]["to"] = "running"  # pending → running is not in state-machines.md §3.1
    assert answer_line(json.dumps(request))["error"]["code"] == "STEP_RUN_STATE_CONFLICT"


def _mutations(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """Replace, delete or retype one nested value of a JSON document."""
    if isinstance(value, dict) and value and depth < 6:
        key = draw(st.sampled_from(sorted(value)))
        out = dict(value)
        action = draw(st.sampled_from(["recurse", "recurse", "delete", "replace"]))
        if action == "delete":
            del out[key]
        elif action == "replace":
            out[key] = draw(JSON_SCALARS)
        else:
            out[key] = _mutations(draw, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and depth < 6:
        i = draw(st.integers(0, len(value) - 1))
        out_list = list(value)
        out_list[i] = _mutations(draw, value[i], depth + 1)
        return out_list
    return draw(JSON_SCALARS)


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False),
                         st.text(max_size=5), st.just([]), st.just({}))
SNAPSHOTS = {
    "frontier": "frontier-chain-root-failed.json", "cancel": "cancel-running-sibling-blocks.json",
    "recover": "recover-unstarted-claim.json", "admit-attempt": "admit-attempt-fetch.json",
    "admit-workflow": "admit-workflow-diamond.json",
}


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_snapshots_fail_closed_never_crash(data: st.DataObject) -> None:
    fn = data.draw(st.sampled_from(sorted(SNAPSHOTS)))
    original = load(SNAPSHOTS[fn])
    mutated = _mutations(data.draw, original)
    before = copy.deepcopy(mutated)
    answer = answer_line(json.dumps({"fn": fn, "input": mutated}))
    assert mutated == before  # inputs are never mutated
    if "error" in answer:
        assert answer["error"]["class"] in ("Invalid", "Conflict", "Unavailable")
        assert answer["error"]["code"] != "QLWF_ORACLE_INTERNAL_ERROR", answer


def test_oracle_function_table_is_complete() -> None:
    assert set(FUNCTIONS) == {"frontier", "cancel", "recover", "admit-attempt", "admit-workflow", "step-transition"}
