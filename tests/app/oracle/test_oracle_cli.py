"""The oracle command line: single snapshots, --explain, batch, and fail-closed errors."""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import re
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.oracle import FUNCTIONS, Answer, consult
from support.oracle_batch import BATCH_COMMAND, ORACLE_COMMAND, STARTUP_S, BatchClient

from qlwf.cli import oracle as cmd_oracle
from qlwf.oracle import protocol
from qlwf.oracle.protocol import answer_line, encode_answer, one_line

REPO = Path(__file__).resolve().parents[3]
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
    assert [next(iter(x)) for x in lines] == ["ok", "ok", "ok", "error", "error", "error"]
    assert lines[2]["ok"]["receipt"]["executorType"] == "remote_worker"  # ql3's admission input (§3A)
    assert lines[3]["error"]["class"] == "Invalid"
    assert set(lines[3]["error"]) == {"class", "code", "message"}


def step_transition_input(current: dict[str, Any], at_ms: int, run_version: int = 9) -> dict[str, Any]:
    """pending → ready of `current` (state-machines.md §3.1) under a reconciler."""
    return {"current": current,
            "command": {"expectedVersion": current["version"], "expectedDigest": current["stepRunDigest"],
                        "mutationId": "m-1", "to": "ready", "atMs": at_ms},
            "context": {"expectedRunVersion": run_version, "expectedRunEventSequence": run_version, "eventId": "e-1",
                        "dedupeKey": "e-1", "actor": {"type": "reconciler"}}}


def example_step_transition() -> dict[str, Any]:
    snap = load("frontier-diamond-root-succeeded.json")
    left = next(s for s in snap["stepRuns"] if s["stepKey"] == "left")
    return step_transition_input(left, snap["observedAtMs"])


def test_batch_step_transition_returns_the_mutation() -> None:
    request: dict[str, Any] = {"fn": "step-transition", "input": example_step_transition()}
    answer = answer_line(json.dumps(request))
    m = answer["ok"]
    assert (m["previousStatus"], m["stepRun"]["status"], m["stepRun"]["version"]) == ("pending", "ready", 2)
    assert m["event"]["sequence"] == 10 and m["event"]["type"] == "step.ready"
    request["input"]["command"]["to"] = "running"  # pending → running is not in state-machines.md §3.1
    assert answer_line(json.dumps(request))["error"]["code"] == "STEP_RUN_STATE_CONFLICT"


def _mutations(draw: Callable[[st.SearchStrategy[Any]], Any], value: Any, depth: int = 0) -> Any:
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


# --------------------------------------------------------------------------------------------------
# Issue 9 §2: batch answers each line as soon as it is read
def every_function() -> list[tuple[str, Any]]:
    """One valid input per oracle function (the examples, and a transition of the diamond's `left`)."""
    cases = [(fn, load(name)) for fn, name in sorted(SNAPSHOTS.items())]
    return [*cases, ("step-transition", example_step_transition())]


def request_line(fn: Any, inp: Any) -> bytes:
    return json.dumps({"fn": fn, "input": inp}).encode("utf-8") + b"\n"


def model_error(fn: str, inp: Any) -> QlwfError:
    with pytest.raises(QlwfError) as info:
        consult(fn, inp)
    return info.value


def test_batch_answers_each_line_before_the_next_is_sent() -> None:
    cases = every_function()
    assert {fn for fn, _ in cases} == set(FUNCTIONS)
    with BatchClient() as client:  # every ask() waits for the answer with a timeout, stdin still open
        for fn, inp in cases:
            assert client.ask(request_line(fn, inp)) == {"ok": consult(fn, inp).resolution}, fn
            want = model_error(fn, {})
            got = client.ask(request_line(fn, {}))["error"]
            assert (got["class"], got["code"]) == (want.error_class, want.code), fn
            assert got["message"].startswith(f"{want.reason}: ")
        for line, reason in [(b"not json\n", "json_invalid"), (b"\n", "request_invalid"),
                             (b'{"fn": ["frontier"], "input": {}}\n', "request_invalid")]:
            got = client.ask(line)["error"]
            assert got["code"] == "QLWF_ORACLE_REQUEST_INVALID" and got["message"].startswith(f"{reason}: "), line
        assert client.proc.poll() is None
        rc, stderr = client.close()
    assert (rc, stderr) == (0, b"")


def test_batch_ends_quietly_when_the_reader_closes_stdout() -> None:
    proc = subprocess.Popen(BATCH_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        fn, inp = every_function()[0]
        proc.stdin.write(request_line(fn, inp))
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], STARTUP_S)[0], "no first answer"
        assert "ok" in json.loads(proc.stdout.readline())
        proc.stdout.close()  # the reader goes away; the next answer meets EPIPE
        proc.stdin.write(request_line(fn, inp))
        proc.stdin.flush()
        rc = proc.wait(STARTUP_S)  # stdin is still open: only the broken pipe can end the process
        assert (rc, proc.stderr.read()) == (0, b"")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        proc.stderr.close()


def test_single_command_ends_quietly_when_stdout_is_closed() -> None:
    proc = subprocess.Popen([*ORACLE_COMMAND, "frontier", str(EXAMPLES / SNAPSHOTS["frontier"])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # long before the answer is written: the interpreter is still starting
    rc = proc.wait(STARTUP_S)
    assert (rc, proc.stderr.read()) == (0, b"")
    proc.stderr.close()


def _help_section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_oracle_help_lists_every_function_the_output_and_the_exit_codes() -> None:
    out = qlwf("oracle", "--help")
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in _help_section(out.stdout, "functions (input):")}
    assert listed == set(FUNCTIONS) | {"batch"}
    codes = {line.split()[0] for line in _help_section(out.stdout, "exit codes:")}
    assert codes == {"0", "2", "70"}
    output = "\n".join(_help_section(out.stdout, "output:"))
    assert all(word in output for word in ("canonical JSON", '"ok"', '"error"', "--explain"))


# --------------------------------------------------------------------------------------------------
# Issue 9 §3: one bad line never costs the others
def recover_text(raw_value: str, *, request: bool = True) -> str:
    """The recovery example with run.priority spelled `raw_value`: a field the recovery echoes unchecked."""
    snap = load(SNAPSHOTS["recover"])
    snap["run"]["priority"] = "@@VALUE@@"
    text = json.dumps({"fn": "recover", "input": snap} if request else snap)
    return text.replace('"@@VALUE@@"', raw_value)


NOT_STRICT_JSON = ["1E400", "-1E400", "1" + "0" * 400, "-" + "9" * 400, "NaN", "Infinity", "-Infinity",
                   '"\\ud800"', '"tail\\udfff"', '"\\udc00\\ud800"', '{"\\ud800": 1}', '{"k\\udbff": 1}',
                   "[" * 70 + "]" * 70, '{"a": 1, "a": 1}', str(2 * int(sys.float_info.max))]


@pytest.mark.parametrize("raw", ["7", '"\\ud83d\\ude00"', "1E300", "[[[[0]]]]", "-" + "9" * 300,
                                 str(-int(sys.float_info.max))])
def test_the_probe_field_is_echoed_unchecked(raw: str) -> None:
    # Why run.priority: whatever it holds reaches the answer, so a value the encoder refuses used to escape.
    answer = answer_line(recover_text(raw))
    assert answer["ok"]["run"]["priority"] == json.loads(raw)


@pytest.mark.parametrize("raw", NOT_STRICT_JSON)
def test_non_strict_json_is_invalid_at_parse_time(raw: str) -> None:
    error = answer_line(recover_text(raw))["error"]
    assert (error["class"], error["code"]) == ("Invalid", "QLWF_ORACLE_REQUEST_INVALID")
    assert error["message"].startswith("json_invalid: ")


def test_bad_lines_cost_no_other_line_under_a_strict_utf8_locale() -> None:
    good = recover_text("7").encode("utf-8")
    bad = [recover_text(raw).encode("utf-8") for raw in NOT_STRICT_JSON]
    bad += [b"\xff\xfe{}", good.replace(b'"recover"', b'"rec\xedver"'), b'{"fn": "recover", "input": "\xed\xa0\x80"}']
    lines = [good, *bad, good]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8", "PYTHONUTF8": "0"}
    out = subprocess.run(BATCH_COMMAND, input=b"\n".join(lines) + b"\n", capture_output=True, cwd=REPO, env=env,
                         timeout=120)
    assert (out.returncode, out.stderr) == (0, b"")
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(answers) == len(lines)
    assert answers[0] == answers[-1] == {"ok": consult("recover", json.loads(good)["input"]).resolution}
    for line, answer in zip(bad, answers[1:-1], strict=True):
        assert answer["error"]["message"].startswith("json_invalid: "), line[:80]


@pytest.mark.parametrize("raw", ["1E400", '"\\ud800"'])
def test_single_command_rejects_non_strict_json_with_exit_2(raw: str) -> None:
    out = qlwf("oracle", "recover", "-", stdin=recover_text(raw, request=False))
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.count("\n") == 1 and "QLWF_ORACLE_REQUEST_INVALID json_invalid" in out.stderr


def test_a_byte_order_mark_is_refused_by_name(tmp_path: Path) -> None:
    """An editor may save a snapshot with a BOM; the refusal says so instead of "Expecting value"."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + (EXAMPLES / "frontier-diamond-root-succeeded.json").read_bytes())
    out = qlwf("oracle", "frontier", str(path))
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.count("\n") == 1 and "json_invalid: input starts with a byte order mark" in out.stderr
    batch = qlwf("oracle", "batch", stdin='\ufeff{"fn": "frontier", "input": {}}\n')
    assert "byte order mark" in json.loads(batch.stdout)["error"]["message"]


def test_single_command_rejects_invalid_utf8_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(recover_text('"caf\\u00e9"', request=False).replace("\\u00e9", "é").encode("latin-1"))
    out = qlwf("oracle", "recover", str(path))
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.count("\n") == 1 and "QLWF_ORACLE_REQUEST_INVALID json_invalid" in out.stderr


@pytest.mark.parametrize("fn", [["frontier"], {}, {"frontier": 1}, 1, None, True, 2.5])
def test_a_non_string_fn_is_invalid(fn: Any) -> None:
    error = answer_line(request_line(fn, load(SNAPSHOTS["frontier"])).decode())["error"]
    assert (error["class"], error["code"]) == ("Invalid", "QLWF_ORACLE_REQUEST_INVALID")
    with pytest.raises(Invalid) as info:
        consult(fn, load(SNAPSHOTS["frontier"]))
    assert info.value.code == "QLWF_ORACLE_REQUEST_INVALID"


def test_every_line_gets_one_answer_blank_lines_included() -> None:
    good = recover_text("7").encode("utf-8")
    body = b"\n" + good + b"\n   \t\r\n\r\n" + good  # the last line has no line end
    out = subprocess.run(BATCH_COMMAND, input=body, capture_output=True, cwd=REPO, timeout=120)
    assert (out.returncode, out.stderr) == (0, b"")
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert [next(iter(a)) for a in answers] == ["error", "ok", "error", "error", "ok"]
    assert all(answers[i]["error"]["message"].startswith("request_invalid: ") for i in (0, 2, 3))


@pytest.mark.parametrize("name", ["two\nlines.json", "carriage\rreturn.json", "esc\x1b[2Jape.json",
                                  "line\u2028separator.json", "bell\x07.json"])
def test_error_messages_are_one_line(name: str, tmp_path: Path) -> None:
    out = qlwf("oracle", "frontier", str(tmp_path / name))
    assert (out.returncode, out.stdout) == (2, "")
    message = out.stderr.removesuffix("\n")
    assert "file_unreadable" in message and not CONTROL.search(message), repr(out.stderr)


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def test_one_line_escapes_controls_and_surrogates() -> None:
    text = one_line("a\nb\rc\x1bd\x85e\u2028f\ud800g\tcafé 😀")
    assert not CONTROL.search(text)
    assert text.encode("utf-8").decode("utf-8") == text  # no lone surrogate left
    assert "café 😀" in text and text.startswith("a") and "\\n" in text and "\\ud800" in text


UNENCODABLE = [float("nan"), float("inf"), "\ud800", {"\udc00": 1}, object(), {(1, 2): 3}]
UNENCODABLE_IDS = ["nan", "inf", "surrogate", "surrogate-key", "object", "tuple-key"]


@pytest.mark.parametrize("bad", UNENCODABLE, ids=UNENCODABLE_IDS)
def test_the_answer_writer_never_raises_on_model_output(bad: Any) -> None:
    line = encode_answer({"ok": {"echo": bad}})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    error = json.loads(line)["error"]
    assert error["code"] == "QLWF_ORACLE_INTERNAL_ERROR" and error["message"].startswith("answer_unencodable: ")


@pytest.mark.parametrize("bad", UNENCODABLE[:3], ids=UNENCODABLE_IDS[:3])
def test_unencodable_model_output_is_an_answer_or_exit_70(bad: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # Requests with a float literal: their answers go through the reference encoder, which refuses
    # what is not JSON. (A float-free request's answer holds no float — the model computes none —
    # and is written by the fast encoder; tests/conformance/checkers/test_oracle_fuzz.py compares those bytes.)
    for module in (protocol, cmd_oracle):  # the batch answers in the protocol, a single file in the CLI
        monkeypatch.setattr(module, "consult", lambda fn, inp: Answer({"echo": bad}, {}))
    error = json.loads(protocol.answer_bytes(request_line("frontier", {"weight": 0.5})))["error"]
    assert error["code"] == "QLWF_ORACLE_INTERNAL_ERROR"
    snapshot = json.loads((EXAMPLES / SNAPSHOTS["frontier"]).read_text()) | {"weight": 0.5}
    (tmp_path / "s.json").write_text(json.dumps(snapshot))
    args = argparse.Namespace(fn="frontier", file=str(tmp_path / "s.json"), explain=False, pretty=False)
    assert cmd_oracle.run_single(args) == protocol.EXIT_INTERNAL
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "internal error" in captured.err


def test_batch_collects_garbage_between_answers_and_restores_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch mode runs the cyclic collector after each flushed answer (a full collection every
    FULL_COLLECTION_EVERY answers), never inside one, and leaves an in-process caller's collector as it was."""
    import gc
    import io

    lines = (EXAMPLES / "batch.jsonl").read_bytes().splitlines(keepends=True)
    n = cmd_oracle.FULL_COLLECTION_EVERY + 3
    stdin = io.BytesIO(b"".join(lines[i % len(lines)] for i in range(n)))
    stdout = io.BytesIO()
    collected: list[tuple[int, int, bool]] = []  # (generation, answers written so far, collector enabled)
    monkeypatch.setattr(sys, "stdin", argparse.Namespace(buffer=stdin))
    monkeypatch.setattr(sys, "stdout", argparse.Namespace(buffer=stdout))

    def collect(generation: int = 2) -> int:
        collected.append((generation, stdout.getvalue().count(b"\n"), gc.isenabled()))
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    assert gc.isenabled()
    assert cmd_oracle.run_batch(argparse.Namespace()) == 0
    assert stdout.getvalue().count(b"\n") == n
    assert [answers for _, answers, _ in collected] == list(range(1, n + 1)), "one collection after each answer"
    assert [g for g, _, _ in collected].count(2) == 1 and collected[cmd_oracle.FULL_COLLECTION_EVERY - 1][0] == 2
    assert not any(enabled for _, _, enabled in collected), "no automatic collection while serving"
    assert gc.isenabled() and gc.get_freeze_count() == 0
