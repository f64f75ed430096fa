"""`qlwf traces check` and the qlwf-trace@1 schema: valid files pass, edited or stale ones fail at the right step.

Hand edits are made to freshly exported files (never to the stored corpus): a changed outcome, a
changed record, a removed step, a changed time, a changed digest. The step each edit must be
reported at is known from the edit itself, not from the checker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.checkers.replay import replay_trace
from qlwf.conformance.exec.protocol_schema import SCHEMA_DIR, document_problems
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.lockstep.compare import run_lockstep
from qlwf.conformance.lockstep.model_port import ModelPort
from qlwf.conformance.mutants import by_name
from qlwf.conformance.traces import drift_mirror
from qlwf.conformance.traces.check import check_document, check_file, claimed_state
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import TraceFormatError, from_json, load, record
from qlwf.impl.port import COMMAND_NAMES
from qlwf.model.records import KIND_KEYS

from qlwf.cli import entry as cli

Doc = dict[str, Any]
CORPUS_FILES = sorted(CORPUS_DIR.glob("*.json"))
SCHEMA = json.loads((SCHEMA_DIR / "trace.json").read_text(encoding="utf-8"))


def fresh(name: str = "adr0228-timeout-mapping", form: str = "changes") -> Doc:
    """A freshly recorded trace as a file would hold it (a JSON round trip: no record shared between steps)."""
    doc: Doc = json.loads(json.dumps(record(load(CORPUS_DIR / f"{name}.json").inputs(), form).to_json()))
    return doc


def writing_steps(doc: Doc) -> list[int]:
    return [i for i, s in enumerate(doc["steps"]) if s["op"] == "command" and s["state"]["changes"]]


# ------------------------------------------------------------------------------------------------
# Schema
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_every_corpus_file_is_a_valid_self_contained_trace(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert document_problems("trace", doc) == []
    assert check_file(path).status == "ok"


def test_a_snapshot_form_trace_is_valid_and_checks() -> None:
    doc = fresh(form="snapshot")
    assert doc["stateForm"] == "snapshot" and all("snapshot" in s["state"] for s in doc["steps"])
    assert document_problems("trace", doc) == []
    assert check_document(doc, "t").status == "ok"


def test_schema_enums_are_the_model_tables() -> None:
    """The schema restates three lists; they must stay equal to where the lists live."""
    defs = SCHEMA["$defs"]
    assert defs["commandStep"]["properties"]["name"]["enum"] == list(COMMAND_NAMES)
    assert defs["corruptStep"]["properties"]["kind"]["enum"] == list(drift_mirror.CORRUPTIBLE)
    assert SCHEMA["properties"]["recordKeys"]["required"] == list(KIND_KEYS)
    common = json.loads((SCHEMA_DIR / "common.json").read_text(encoding="utf-8"))
    assert common["$defs"]["change"]["properties"]["kind"]["enum"] == list(KIND_KEYS)


def _drop_at_ms(d: Doc) -> None:
    del d["steps"][2]["atMs"]


def _both_forms(d: Doc) -> None:
    d["steps"][1]["state"]["snapshot"] = d["initialState"]


def _form_mismatch(d: Doc) -> None:
    d["stateForm"] = "snapshot"


def _extra_key(d: Doc) -> None:
    d["comment"] = "hi"


def _bad_digest(d: Doc) -> None:
    d["steps"][0]["state"]["digest"] = "not-a-digest"


def _unknown_command(d: Doc) -> None:
    d["steps"][0]["name"] = "drop_everything"


def _negative_time(d: Doc) -> None:
    d["steps"][0]["atMs"] = -1


def _no_outcome(d: Doc) -> None:
    del d["steps"][0]["outcome"]


def _outcome_on_advance(d: Doc) -> None:
    i = next(i for i, s in enumerate(d["steps"]) if s["op"] == "advance_time")
    d["steps"][i]["outcome"] = {"ok": {}}


@pytest.mark.parametrize("edit", [_drop_at_ms, _both_forms, _form_mismatch, _extra_key, _bad_digest, _unknown_command,
                                  _negative_time, _no_outcome, _outcome_on_advance], ids=lambda f: f.__name__)
def test_schema_rejects(edit: Any) -> None:
    doc = fresh()
    edit(doc)
    assert document_problems("trace", doc) != []
    result = check_document(doc, "edited.json")
    assert result.status == "invalid" and result.exit_code == 2
    assert result.problems[0].startswith("schema conformance/exec/schema/trace.json: ")


def test_a_trace_from_before_atms_is_reported_invalid_but_still_loads_and_replays() -> None:
    """Backward compatibility (decisions Q-20): older recorded files lack the self-contained keys."""
    doc = fresh()
    for k in ("stateForm", "recordKeys", "initialState"):
        del doc[k]
    for s in doc["steps"]:
        del s["atMs"]
    result = check_document(doc, "old.json")
    assert result.status == "invalid" and any("atMs" in p for p in result.problems)
    assert any("stateForm" in p for p in result.problems)
    old = from_json(doc)
    assert old.recorded and old.state_form == "changes"
    assert run_lockstep(old, ModelPort()).passed
    assert replay_trace(doc, out=lambda _: None).ok


@pytest.mark.parametrize("key,value,message", [
    ("initialState", "nonempty", "initialState must be the empty store"),
    ("recordKeys", "swapped", "recordKeys differ"),
    ("stateForm", "full", "stateForm must be one of"),
])
def test_the_loader_refuses_what_this_harness_cannot_replay(key: str, value: str, message: str) -> None:
    doc = fresh()
    if value == "nonempty":
        run = next(c["record"] for c in doc["steps"][0]["state"]["changes"] if c["kind"] == "runs")
        doc["initialState"] = {**doc["initialState"], "runs": [run]}
    elif value == "swapped":
        doc["recordKeys"] = {**doc["recordKeys"], "runs": ["runId"]}
    else:
        doc["stateForm"] = value
    with pytest.raises(TraceFormatError, match=message):
        from_json(doc)


# ------------------------------------------------------------------------------------------------
# Hand-edited and stale traces: the first wrong step
def test_a_changed_outcome_is_reported_at_its_step() -> None:
    doc = fresh()
    k = [i for i, s in enumerate(doc["steps"]) if s["op"] == "command" and "ok" in s["outcome"]][4]
    doc["steps"][k]["outcome"]["ok"]["status"] = "finished"
    result = check_document(doc, "t")
    assert result.status == "wrong" and result.exit_code == 1
    assert result.wrong is not None and (result.wrong.index, result.wrong.key) == (k, "outcome")
    assert result.wrong.recorded["ok"]["status"] == "finished" and result.wrong.model["ok"]["status"] != "finished"
    assert f"first wrong step {k} " in result.render() and "status: trace=\"finished\"" in result.render()


@pytest.mark.parametrize("position", [3, -1])  # -1: past event sequence 10, where string order would be wrong
@pytest.mark.parametrize("form", ["changes", "snapshot"])
def test_a_changed_record_is_reported_with_a_record_level_diff(form: str, position: int) -> None:
    doc = fresh(form=form)
    plain = fresh()
    k = [i for i in writing_steps(plain) if any(c["kind"] == "runs" for c in plain["steps"][i]["state"]["changes"])
         ][position]
    records = (doc["steps"][k]["state"]["changes"] if form == "changes"
               else [{"kind": kind, "record": r} for kind, rs in doc["steps"][k]["state"]["snapshot"].items()
                     for r in rs])
    run = next(c["record"] for c in records if c["kind"] == "runs")
    run["version"] += 7
    result = check_document(doc, "t")
    assert result.wrong is not None and (result.wrong.index, result.wrong.key) == (k, "state")
    (diff,) = result.wrong.record_diffs
    assert (diff.kind, diff.key, diff.status) == ("runs", (run["id"],), "differs")
    (field,) = diff.fields
    assert (field.path, field.backend, field.model) == ("version", run["version"], run["version"] - 7)
    assert f"runs {run['id']}:\n        version: trace={run['version']} model={run['version'] - 7}" in result.render()


def test_a_removed_record_is_reported_as_only_in_the_model() -> None:
    doc = fresh()
    k = writing_steps(doc)[2]
    removed = doc["steps"][k]["state"]["changes"].pop()
    result = check_document(doc, "t")
    assert result.wrong is not None and result.wrong.index == k
    assert [(d.kind, list(d.key), d.status) for d in result.wrong.record_diffs] == [
        (removed["kind"], removed["key"], "only_in_model")]


@pytest.mark.parametrize("position", [1, 5, -2])
def test_a_removed_step_is_reported_where_it_was(position: int) -> None:
    doc = fresh()
    k = writing_steps(doc)[position]
    del doc["steps"][k]
    result = check_document(doc, "t")
    assert result.wrong is not None and result.wrong.index == k, result.render()


def test_a_changed_time_is_reported() -> None:
    doc = fresh()
    k = next(i for i, s in enumerate(doc["steps"]) if s["op"] == "advance_time")
    doc["steps"][k]["atMs"] += 1
    result = check_document(doc, "t")
    assert result.wrong is not None and (result.wrong.index, result.wrong.key) == (k, "atMs")


def test_a_changed_digest_alone_is_reported_as_the_digest() -> None:
    doc = fresh()
    doc["steps"][3]["state"]["digest"] = "0" * 64
    result = check_document(doc, "t")
    assert result.wrong is not None and (result.wrong.index, result.wrong.key) == (3, "state.digest")


def test_a_trace_recorded_by_another_model_is_stale_at_its_first_different_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = load(CORPUS_DIR / "adr0226-failure-skips-chain.json").inputs()
    good = record(inputs).to_json()
    plant = by_name("skip_one_level_per_pass").plant
    assert plant is not None
    with monkeypatch.context() as mp:
        plant(mp)
        stale = record(inputs).to_json()
    first = next(i for i, (a, b) in enumerate(zip(good["steps"], stale["steps"], strict=True)) if a != b)
    result = check_document(stale, "stale.json")
    assert result.wrong is not None and result.wrong.index == first


def test_a_step_the_model_cannot_run_is_invalid() -> None:
    doc = fresh("adr0226-drift-rolls-back")
    k = next(i for i, s in enumerate(doc["steps"]) if s["op"] == "corrupt")
    doc["steps"][k]["key"] = ["no-such-record"]
    result = check_document(doc, "t")
    assert result.status == "invalid" and result.problems == [
        f"step {k}: the model cannot run this step: no {doc['steps'][k]['kind']} record with key ['no-such-record']"]


def test_lockstep_now_checks_every_recorded_record_not_only_the_digest() -> None:
    doc = fresh()
    k = writing_steps(doc)[3]
    change = doc["steps"][k]["state"]["changes"][0]
    change["record"] = {**change["record"], "edited": True}
    result = run_lockstep(from_json(doc), ModelPort())
    assert result.divergence is not None and result.divergence.kind == "expectation"
    assert result.divergence.step_index == k and "same digest" in result.divergence.message


# ------------------------------------------------------------------------------------------------
# The command line
def _qlwf(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    args = cli.build_parser().parse_args(argv)
    code = args.func(args)
    captured = capsys.readouterr()
    return code, captured.out.strip().splitlines(), captured.err


def test_cli_export_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = _qlwf(["traces", "export", str(tmp_path), "--generated", "3", "--seed", "11"], capsys)
    assert code == 0 and lines[-1].startswith("exported 3 traces, ") and lines[-1].endswith(f"to {tmp_path}")
    files = sorted(tmp_path.glob("*.json"))
    assert [p.name for p in files] == sorted(f"{generate(s).name}.json" for s in (11, 12, 13))
    code, lines, _ = _qlwf(["traces", "check", *map(str, files)], capsys)
    assert code == 0 and lines[-1] == "traces check: 3 file(s): 3 ok, 0 wrong, 0 invalid"


def test_cli_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = CORPUS_FILES[0]
    wrong = tmp_path / "wrong.json"
    doc = fresh()
    k = writing_steps(doc)[1]
    del doc["steps"][k]
    wrong.write_text(json.dumps(doc), encoding="utf-8")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json", encoding="utf-8")
    assert _qlwf(["traces", "check", str(good)], capsys)[0] == 0
    code, lines, _ = _qlwf(["traces", "check", str(good), str(wrong)], capsys)
    assert code == 1 and lines[1].startswith(f"WRONG   {wrong}: first wrong step {k} ")
    code, lines, _ = _qlwf(["traces", "check", str(wrong), str(garbage), str(tmp_path / "missing.json")], capsys)
    assert code == 2 and lines[-1] == "traces check: 3 file(s): 0 ok, 1 wrong, 2 invalid"
    assert any(line.startswith("  not JSON: ") for line in lines)
    assert any(line.startswith("  unreadable: ") for line in lines)
    code, lines, _ = _qlwf(["traces", "check", "--json", str(wrong)], capsys)
    report = json.loads(lines[0])
    assert code == 1 and report["status"] == "wrong" and report["wrongStep"]["stepIndex"] == k


def test_cli_check_of_a_file_without_steps_is_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A valid file of no step holds no expectation to re-derive: it said `ok`, exit 0, before issue 33."""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(fresh() | {"steps": []}), encoding="utf-8")
    wrong = tmp_path / "wrong.json"
    doc = fresh()
    doc["steps"][writing_steps(doc)[0]]["outcome"] = {"error": {"class": "Conflict", "code": "X", "reason": "y"}}
    wrong.write_text(json.dumps(doc), encoding="utf-8")
    code, lines, _ = _qlwf(["traces", "check", str(CORPUS_FILES[0]), str(empty)], capsys)
    assert code == 3 and lines[1] == f"EMPTY   {empty}: no step, so no expectation to re-derive: no verdict"
    assert lines[-1] == "traces check: 2 file(s): 1 ok, 0 wrong, 0 invalid, 1 empty (no step: no verdict)"
    assert _qlwf(["traces", "check", str(empty), str(wrong)], capsys)[0] == 1  # a wrong file outweighs it
    assert _qlwf(["traces", "check", str(empty), str(tmp_path / "missing.json")], capsys)[0] == 2
    code, lines, _ = _qlwf(["traces", "check", "--json", str(empty)], capsys)
    assert code == 3 and json.loads(lines[0])["status"] == "empty"


def test_cli_export_needs_something_to_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _qlwf(["traces", "export", str(tmp_path)], capsys)
    assert code == 2 and "nothing to export" in err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------
# Removals (the format can express them although the model never removes a record)
def test_a_removal_change_takes_the_record_out_of_the_claimed_state() -> None:
    doc = fresh()
    first = doc["steps"][0]["state"]["changes"]
    before = claimed_state({"changes": first}, doc["initialState"])
    assert before is not None
    run = next(c for c in first if c["kind"] == "runs")
    after = claimed_state({"changes": [{"kind": "runs", "key": run["key"], "record": None}]}, before)
    assert after is not None and after["runs"] == [] and after["events"] == before["events"]


class ScriptedPort:
    """A port whose store is a script of snapshots, one per step: enough to drive the replayer's removal path."""

    def __init__(self, snapshots: list[dict[str, list[dict[str, Any]]]]) -> None:
        self.snapshots = snapshots

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        return self.snapshots.pop(0)


def test_the_replayer_applies_removals() -> None:
    import support.trace_replayer as replayer

    empty: dict[str, list[Doc]] = {kind: [] for kind in KIND_KEYS}
    lease = {"attemptId": "a-1", "status": "leased"}
    doc = {"format": "qlwf-trace", "version": 1, "stateForm": "changes", "recordKeys": dict(KIND_KEYS),
           "initialState": empty, "steps": [
               {"op": "corrupt", "kind": "leases", "key": ["a-1"], "patch": {}, "atMs": 0, "state": {"changes": [
                   {"kind": "leases", "key": ["a-1"], "record": lease}]}},
               {"op": "advance_time", "atMs": 5, "state": {"changes": [
                   {"kind": "leases", "key": ["a-1"], "record": None}]}}]}

    class Port(ScriptedPort):
        def corrupt(self, *_: Any) -> None:
            pass

    with_lease = {**empty, "leases": [lease]}
    assert len(replayer.replay(json.dumps(doc), Port([empty, with_lease, empty]))) == 2
    with pytest.raises(replayer.Mismatch) as caught:
        replayer.replay(json.dumps(doc), Port([empty, with_lease, with_lease]))
    assert caught.value.index == 1 and "leases" in caught.value.what


# ------------------------------------------------------------------------------------------------
# The example of docs/traces.md
def test_the_docs_example_is_current_checks_and_replays_on_sqlite() -> None:
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "docs"))
    try:  # by name: docs/ is on no type checker's path
        traces_example = importlib.import_module("traces_example")
    finally:
        sys.path.pop(0)
    from qlwf.impl.sqlite.adapter import SqliteAdapter
    from support.trace_replayer import replay

    text = traces_example.DOC.read_text(encoding="utf-8")
    assert traces_example.updated(text, traces_example.render()) == text, "stale: run python docs/traces_example.py"
    doc = traces_example.example_trace().to_json()
    assert check_document(doc, "example").status == "ok"
    with SqliteAdapter() as port:
        assert len(replay(json.dumps(doc), port)) == 4
