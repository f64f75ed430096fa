"""Evidence-bearing traces (issue 35): every admit_task_attempt step of the corpus and of generated traces
carries the ql3 evidence its binding derives from (task-attempts.md §3A), `qlwf traces check` holds
binding = derived(evidence) except on a step marked as a foreign-binding probe, and the exec protocol passes
the evidence to the driver."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.exec import profiles
from qlwf.conformance.generate import plans
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.generate.surface import generate_within
from qlwf.conformance.traces.check import check_document, evidence_problem
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import (
    FOREIGN_BINDING,
    Trace,
    TraceFormatError,
    command,
    from_json,
    load,
    model_step,
    record,
)
from qlwf.model.evidence import foreign_binding_refusal
from qlwf.model.state import State

CORPUS = sorted(CORPUS_DIR.glob("*.json"))


def admit_steps(trace: Any) -> list[tuple[State, dict[str, Any]]]:
    """Each admit_task_attempt step with the model state before it."""
    state, out = State(clock=trace.initial_clock), []
    for step in trace.steps:
        if step["op"] == "command" and step["name"] == "admit_task_attempt":
            out.append((state, step))
        state = model_step(state, {k: v for k, v in step.items() if k in ("op", "name", "args", "deltaMs", "kind",
                                                                             "key", "patch")}).state
    return out


def test_every_corpus_admission_carries_evidence_that_derives_its_binding() -> None:
    steps = [s for path in CORPUS for s in admit_steps(load(path))]
    assert len(steps) > 20
    for state, step in steps:
        assert step.get("evidence") is not None, step["args"]
        assert evidence_problem(state, step) is None


def test_generated_admissions_carry_evidence_except_where_no_plan_step_backs_the_binding() -> None:
    with_evidence = without = 0
    for seed in range(12):
        for state, step in admit_steps(generate(seed)):
            assert "evidence" in step
            if step["evidence"] is None:
                without += 1
                args = step["args"]
                backed = (len(state.admission_of_run(args["runId"])) == 1 and args["stepRunId"] in state.step_runs
                          and args["binding"].get("executorType") in ("local_process", "remote_worker")
                          and args["binding"].get("resourceTaskId") != "zz")
                assert not backed, args
            else:
                with_evidence += 1
                assert evidence_problem(state, step) is None
    assert with_evidence > 10 * without > 0


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def _first_admission(doc: dict[str, Any]) -> int:
    return next(i for i, s in enumerate(doc["steps"]) if s.get("name") == "admit_task_attempt")


@pytest.mark.parametrize("tamper", ["binding", "receipt", "execution"])
def test_a_binding_the_evidence_does_not_derive_is_a_wrong_step(tamper: str) -> None:
    doc = _doc(CORPUS_DIR / "adr0227-worker-protocol.json")
    i = _first_admission(doc)
    step = doc["steps"][i]
    if tamper == "binding":  # a placeholder digest, as the traces before evidence had
        step["args"]["binding"]["executionDigest"] = "e" * 64
    elif tamper == "receipt":  # an item changed without resealing: the digest no longer matches
        step["evidence"]["taskReconciliation"]["items"][0]["revision"] += 1
    else:
        step["evidence"]["execution"]["command"]["args"].append("--extra")
    result = check_document(doc, "t.json")
    assert result.status == "wrong" and result.wrong is not None
    assert (result.wrong.index, result.wrong.key) == (i, "evidence")
    assert "evidence" in result.render() and result.exit_code == 1


def test_version_1_files_still_read_and_cannot_carry_evidence() -> None:
    doc = _doc(CORPUS_DIR / "adr0227-worker-protocol.json")
    old = copy.deepcopy(doc) | {"version": 1}
    with pytest.raises(TraceFormatError, match="unexpected keys \\['evidence'\\]"):
        from_json(old)
    for step in old["steps"]:
        step.pop("evidence", None)
    assert from_json(old).steps == [{k: v for k, v in s.items() if k != "evidence"} for s in doc["steps"]]
    assert check_document(old, "old.json").status == "ok"
    assert doc["version"] == 2 and check_document(doc, "new.json").status == "ok"


def test_evidence_only_on_admit_task_attempt_steps() -> None:
    doc = _doc(CORPUS_DIR / "adr0227-worker-protocol.json")
    other = next(s for s in doc["steps"] if s["op"] == "command" and s["name"] != "admit_task_attempt")
    other["evidence"] = None
    with pytest.raises(TraceFormatError, match="unexpected keys"):
        from_json(doc)


def test_the_exec_driver_receives_each_steps_evidence() -> None:
    """Through the SQLite reference driver: every apply of admit_task_attempt carries the step's evidence."""
    from qlwf.conformance.exec.port import ExecBackend, reference_driver
    from qlwf.conformance.lockstep.compare import run_lockstep

    trace = load(CORPUS_DIR / "adr0227-worker-protocol.json")
    wire: list[tuple[str, str]] = []
    backend = ExecBackend(reference_driver("sqlite"), transcript=wire)
    try:
        assert run_lockstep(trace, backend.open()).passed
    finally:
        backend.shutdown()
    sent = [json.loads(line) for direction, line in wire if line.startswith("{")]
    applies = [m for m in sent if m.get("type") == "apply" and m.get("command") == "admit_task_attempt"]
    expected = [s["evidence"] for s in trace.steps if s.get("name") == "admit_task_attempt"]
    assert expected and all(e is not None for e in expected)
    assert [m.get("evidence") for m in applies] == expected


# ---- foreign-binding probes (a store that derives the binding refuses one it cannot derive) ------------------
def _probe_doc() -> tuple[dict[str, Any], int]:
    """A recorded edge trace with a foreign-binding probe, as JSON, and the index of its first probe."""
    trace = next(t for t in (generate_within(seed, profiles.EDGE) for seed in range(8))
                 if any("probe" in s for s in t.steps))
    doc = json.loads(json.dumps(record(trace).to_json()))
    return doc, next(i for i, s in enumerate(doc["steps"]) if "probe" in s)


def test_a_marked_probe_is_accepted_with_the_refusal_as_its_outcome() -> None:
    doc, i = _probe_doc()
    assert doc["version"] == 2 and doc["steps"][i]["probe"] == FOREIGN_BINDING
    assert doc["steps"][i]["outcome"] == {"error": {"class": "Invalid", "reason": "input_invalid",
                                                    "code": "PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION_INVALID"}}
    assert doc["steps"][i]["state"]["changes"] == []
    result = check_document(doc, "probe.json")
    assert result.status == "ok", result.render()
    # the recorded outcome is checked like any other: an admission recorded as taken is wrong
    doc["steps"][i]["outcome"] = doc["steps"][i + 1]["outcome"]
    wrong = check_document(doc, "probe.json")
    assert wrong.status == "wrong" and wrong.wrong is not None
    assert (wrong.wrong.index, wrong.wrong.key) == (i, "outcome")


def test_an_unmarked_foreign_binding_is_still_a_wrong_step() -> None:
    doc, i = _probe_doc()
    del doc["steps"][i]["probe"]
    result = check_document(doc, "t.json")
    assert result.status == "wrong" and result.wrong is not None
    assert (result.wrong.index, result.wrong.key) == (i, "evidence")
    assert "binding differs from the one derived from the evidence" in str(result.wrong.model)


def test_a_marked_probe_whose_binding_is_the_derived_one_is_a_wrong_step() -> None:
    doc, i = _probe_doc()
    doc["steps"][i]["args"]["binding"] = doc["steps"][i + 1]["args"]["binding"]  # the admission's own, derived
    result = check_document(doc, "t.json")
    assert result.status == "wrong" and result.wrong is not None
    assert (result.wrong.index, result.wrong.key) == (i, "probe") and "probes nothing" in str(result.wrong.model)
    assert "probe" in result.render() and result.exit_code == 1


def test_a_probe_where_the_derived_binding_is_refused_too_is_a_wrong_step() -> None:
    """Where the admission fails anyway (a StepRun not ready), which refusal a store gives first is not fixed."""
    plan = plans.make_plan("run-1", "plan-1", {"a": [], "b": ["a"]}, 1_000_000)
    head = [command("admit_workflow", {"plan": plan}), command("advance_frontier", {"runId": "run-1"})]

    def probe(key: str) -> dict[str, Any]:
        args = {"runId": "run-1", "stepRunId": f"run-1:{key}", "binding": plans.binding(key, "local_process")}
        evidence = plans.admission(plan, key, "local_process")[1]
        return command("admit_task_attempt", args, evidence, probe=FOREIGN_BINDING)

    ready = check_document(record(Trace("t", 1_000_000, [*head, probe("a")], "t")).to_json(), "t.json")
    assert ready.status == "ok", ready.render()
    pending = check_document(record(Trace("t", 1_000_000, [*head, probe("b")], "t")).to_json(), "t.json")
    assert pending.status == "wrong" and pending.wrong is not None
    assert (pending.wrong.index, pending.wrong.key) == (2, "probe") and "refused too" in str(pending.wrong.model)


@pytest.mark.parametrize(("edit", "message"), ids=["unknown probe", "no evidence"], argvalues=[
    (lambda s: s.update(probe="other-probe"), "probe must be one of"),
    (lambda s: s.update(evidence=None), "probe must be one of"),
])
def test_the_loader_refuses_a_probe_it_does_not_know_or_without_evidence(edit: Any, message: str) -> None:
    doc, i = _probe_doc()
    edit(doc["steps"][i])
    with pytest.raises(TraceFormatError, match=message):
        from_json(doc)
    assert check_document(doc, "t.json").status == "invalid"
    doc, i = _probe_doc()
    with pytest.raises(TraceFormatError, match="unexpected keys"):
        from_json(doc | {"version": 1})


def test_the_refusal_is_the_models_own_reading_of_the_evidence() -> None:
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, 1_000_000)
    derived, evidence = plans.admission(plan, "a", "local_process")
    assert foreign_binding_refusal(plan, "a", derived, evidence) is None
    refusal = foreign_binding_refusal(plan, "a", plans.binding("a", "local_process"), evidence)
    assert refusal is not None and refusal.to_json() == {
        "class": "Invalid", "code": "PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION_INVALID", "reason": "input_invalid"}
    with pytest.raises(ValueError, match="evidence must be"):
        foreign_binding_refusal(plan, "a", derived, None)
