"""Task attempt admission from ql3's own input (task-attempts.md §3A).

The inputs come from the public evidence builders (qlwf.model.evidence) over a Workflow the model
admitted; each check A1-A18 gets one mutation that breaks exactly it, the reason texts are §3A's
table (written out here, not read from the code), and every pair of composable mutations must be
answered by the earlier check, which pins ql3's check order. An accepted ql3 input must give the
answer the §3 form gives for the binding derived from the same evidence.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from qlwf.model import evidence as E
from qlwf.model.canonical import canonical_json
from qlwf.model.collation import CollationUnsupported
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.execution_revision import normalize_execution_revision, seal_cluster_revision, seal_local_revision
from qlwf.model.oracle import consult
from qlwf.model.reconciliation import normalize_reconciliation_receipt, seal_reconciliation_receipt
from qlwf.model.records import seal_step_run, sign_plan
from qlwf.model.system import WorkflowSystem

Record = dict[str, Any]
CODE = "PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION_INVALID"
# task-attempts.md §3A, the table's third column.
REASON_TEXT = {
    "A1": "admission input must be an object",
    "A2": "admission input shape is invalid",
    "A3": "durable Workflow evidence is invalid",
    "A4": "execution revision executorType is invalid",
    "A5": "execution revision is invalid",
    "A6": "execution revision taskRevision is invalid",
    "A7": "execution revision Task identity is inconsistent",
    "A8": "execution revision projectId is invalid",
    "A9": "execution revision taskId is invalid",
    "A10": "attemptNumber is invalid",
    "A11": "admittedAtMs is invalid",
    "A12": "Run does not match the admitted Workflow aggregate",
    "A13": "StepRun is not one exact ready Task from the plan",
    "A14": "Task reconciliation does not match the immutable plan",
    "A15": "runtime Task identity is invalid",
    "A16": "execution binding is not the reconciled Task revision",
    "A17": "admission time precedes durable evidence",
    "A18": "Run counters overflowed",
}
D = {c: c * 64 for c in "0123456789abcdef"}


def make_plan(package: str = "demo-pkg", tasks: tuple[str, ...] = ("fetch", "report")) -> Record:
    rev = D["3"]
    steps = [{"stepRunId": f"sr-{t}", "stepKey": t, "taskId": t, "taskDefinitionRef": f"plugin-package:{rev}:task:{t}",
              "taskDefinitionDigest": D["6"], "needs": [] if i == 0 else [tasks[0]],
              "initialStatus": "ready" if i == 0 else "pending", "required": True} for i, t in enumerate(tasks)]
    return sign_plan({
        "schema": "qinglong/plugin-package-workflow-execution-plan@v1", "planId": "plan-1", "runId": "run-1",
        "target": {"projectId": "proj-1", "packageName": package, "installationId": "inst-1", "lockDigest": D["1"],
                   "generation": 3, "generationDigest": D["2"], "materializedRevisionDigest": rev,
                   "publicationDigest": D["4"], "workflowId": "nightly", "workflowDefinitionDigest": D["5"]},
        "steps": steps, "plannedAtMs": 1000,
    })


class Scenario:
    """A Workflow admitted by the model, its first step ready, and ql3 evidence for that step's Task."""

    def __init__(self, executor: str = "local_process", plan: Record | None = None, **receipt_args: Any) -> None:
        self.plan = plan or make_plan()
        w = WorkflowSystem(clock=1000)
        out = w.apply("admit_workflow", plan=self.plan)
        assert out.ok, out.error
        self.run = w.state.runs["run-1"]
        self.steps = {s["stepKey"]: s for s in w.state.steps_of_run("run-1")}
        self.task = self.plan["steps"][0]["taskId"]
        self.receipt = E.build_task_reconciliation(self.plan, committed_at_ms=900, **receipt_args)
        build = E.build_local_execution_revision if executor == "local_process" else E.build_cluster_execution_revision
        self.execution = build(self.plan, self.receipt, self.task)

    def input(self) -> Record:
        return E.build_ql3_admission_input(self.plan, self.run, self.steps[self.task], self.receipt, self.execution,
                                           attempt_number=3, admitted_at_ms=2000)


def answer(inp: Any) -> Any:
    return consult("admit-attempt", copy.deepcopy(inp)).resolution


def refusal(inp: Any) -> QlwfError:
    with pytest.raises(QlwfError) as info:
        answer(inp)
    return info.value


def reseal_execution(inp: Record, **changes: Any) -> None:
    x = {**inp["execution"], **changes}
    inp["execution"] = (seal_local_revision if x["executorType"] == "local_process" else seal_cluster_revision)(x)


def unchecked_reseal_execution(inp: Record, **changes: Any) -> None:
    """Change identity fields and recompute the digest without the normalizer (A6-A9 values pass A5)."""
    from qlwf.model.canonical import json_digest
    from qlwf.model.execution_revision import LOCAL_DIGEST_KEYS
    x = {**inp["execution"], **changes}
    unsigned = {k: x[k] for k in LOCAL_DIGEST_KEYS if k in x}
    x["contentDigest"] = json_digest("qinglong.local-task-execution-revision.v1", unsigned)
    inp["execution"] = x


def reseal_receipt(inp: Record, **changes: Any) -> None:
    inp["taskReconciliation"] = seal_reconciliation_receipt({**inp["taskReconciliation"], **changes})


def item_of(inp: Record, task_id: str) -> Record:
    return next(i for i in inp["taskReconciliation"]["items"] if i["taskId"] == task_id)


# One mutation per check, each breaking that check alone on the local scenario's input.
def m_a2(inp: Record) -> None:
    inp["binding"] = None


def m_a3(inp: Record) -> None:
    inp["stepRun"]["stepRunDigest"] = D["0"]


def m_a4(inp: Record) -> None:
    inp["execution"]["executorType"] = "container"


def m_a5(inp: Record) -> None:
    inp["execution"]["contentDigest"] = D["0"]


def m_a6(inp: Record) -> None:
    unchecked_reseal_execution(inp, taskRevision=inp["execution"]["taskRevision"] + " ")


def m_a7(inp: Record) -> None:
    unchecked_reseal_execution(inp, taskRevision=inp["execution"]["taskRevision"].replace("qltd:v1:1:", "qltd:v1:01:"))


def m_a8(inp: Record) -> None:
    unchecked_reseal_execution(inp, projectId="proj 1")


def m_a9(inp: Record) -> None:
    unchecked_reseal_execution(inp, taskId="pkg:demo-pkg:fetch!")


def m_a10(inp: Record) -> None:
    inp["attemptNumber"] = 8193


def m_a11(inp: Record) -> None:
    inp["admittedAtMs"] = 1.5


def m_a12(inp: Record) -> None:
    inp["run"]["requestId"] = "plan-2"


def m_a13(inp: Record) -> None:
    inp["stepRun"] = seal_step_run({**inp["stepRun"], "attemptCount": 64})


def m_a14(inp: Record) -> None:
    reseal_receipt(inp, generation=4)


def m_a16(inp: Record) -> None:
    task = inp["execution"]["taskId"]
    items = [{**i, "disposition": "disabled"} if i["taskId"] == task else i for i in inp["taskReconciliation"]["items"]]
    reseal_receipt(inp, items=items)


def m_a17(inp: Record) -> None:
    inp["admittedAtMs"] = 899  # before the receipt's commit (900) and the plan (1000)


def m_a18(inp: Record) -> None:
    inp["run"]["version"] = inp["run"]["eventSequence"] = 2147483647


MUTATIONS: dict[str, Callable[[Record], None]] = {
    "A2": m_a2, "A3": m_a3, "A4": m_a4, "A5": m_a5, "A6": m_a6, "A7": m_a7, "A8": m_a8, "A9": m_a9, "A10": m_a10,
    "A11": m_a11, "A12": m_a12, "A13": m_a13, "A14": m_a14, "A16": m_a16, "A17": m_a17, "A18": m_a18,
}
# A1 (not an object) composes with nothing; A15 needs another plan (below). Every other pair composes:
# each mutation re-seals only what it changes, on top of what is already there.
ORDER = list(MUTATIONS)


def check_of(err: QlwfError) -> str:
    assert isinstance(err, Invalid) and err.code == CODE and err.reason == "input_invalid", err
    matches = [k for k, text in REASON_TEXT.items() if text == err.message]
    assert matches, f"message {err.message!r} is no §3A reason text"
    return matches[0]


def test_a_local_ql3_input_is_answered_as_the_binding_form_with_the_derived_binding() -> None:
    s = Scenario("local_process")
    inp = s.input()
    binding = E.evidence_binding(s.plan, s.receipt, s.execution, s.task)
    section3 = {k: v for k, v in inp.items() if k not in ("taskReconciliation", "execution")}
    section3["binding"] = binding
    assert canonical_json(answer(inp)) == canonical_json(answer(section3))
    res = answer(inp)
    assert res["receipt"]["taskReconciliationReceiptDigest"] == s.receipt["receiptDigest"]
    assert res["receipt"]["executionDigest"] == s.execution["contentDigest"]
    assert res["receipt"]["executorType"] == "local_process"
    assert res["receipt"]["taskRevision"] == f"qltd:v1:1:{D['6']}"
    assert res["attempt"]["attempt"] == 3 and res["attempt"]["createdAtMs"] == 2000


def test_a_cluster_ql3_input_is_answered_with_a_remote_worker_binding() -> None:
    s = Scenario("remote_worker", revisions={"fetch": 41})
    res = answer(s.input())
    assert res["receipt"]["executorType"] == "remote_worker" == res["attempt"]["executorType"]
    assert res["receipt"]["taskRevision"] == f"qltd:v1:41:{D['6']}"
    assert res["receipt"]["executionDigest"] == s.execution["contentDigest"]


@pytest.mark.parametrize("check", ORDER)
def test_each_check_fails_with_its_reason_text(check: str) -> None:
    inp = Scenario().input()
    assert answer(inp)  # the unmutated input is admitted
    MUTATIONS[check](inp)
    assert check_of(refusal(inp)) == check


def test_a_non_object_fails_a1_and_an_input_with_both_forms_fails_a2() -> None:
    not_objects: tuple[Any, ...] = ([], None, "x", 3)
    for value in not_objects:
        assert check_of(refusal(value)) == "A1"
    assert check_of(refusal({})) == "A2"  # neither form's keys
    inp = Scenario().input()
    inp["binding"] = E.evidence_binding(make_plan(), inp["taskReconciliation"], inp["execution"], "fetch")
    assert check_of(refusal(inp)) == "A2"  # both forms' keys


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations(ORDER, 2)))
def test_the_earlier_check_answers_when_two_fail(first: str, second: str) -> None:
    inp = Scenario().input()
    MUTATIONS[second](inp)
    MUTATIONS[first](inp)
    assert check_of(refusal(inp)) == first


def test_a15_a_runtime_task_id_longer_than_an_identifier() -> None:
    plan = make_plan(package="p" * 63, tasks=("t" * 63, "report"))  # pkg:<63>:<63> is 131 characters
    state = _admitted(plan)
    s = Scenario()  # valid evidence otherwise: A15 is decided before the item is looked up
    receipt = seal_reconciliation_receipt({**s.receipt, "packageName": "p" * 63})
    inp = E.build_ql3_admission_input(plan, state.runs["run-1"], state.steps_of_run("run-1")[1], receipt,
                                      s.execution, admitted_at_ms=2000)
    assert inp["stepRun"]["stepKey"] == "t" * 63
    assert check_of(refusal(inp)) == "A15"


def _admitted(plan: Record) -> Any:
    w = WorkflowSystem(clock=1000)
    assert w.apply("admit_workflow", plan=plan).ok
    return w.state


@pytest.mark.parametrize("case", ["no item", "other project", "other task", "other revision", "other digest",
                                  "already_disabled"])
def test_a16_every_way_the_execution_is_not_the_reconciled_revision(case: str) -> None:
    inp = Scenario().input()
    task = inp["execution"]["taskId"]
    items = inp["taskReconciliation"]["items"]
    if case == "no item":
        reseal_receipt(inp, items=[i for i in items if i["taskId"] != task])
    elif case == "already_disabled":
        reseal_receipt(inp, items=[{**i, "disposition": case} if i["taskId"] == task else i for i in items])
    elif case == "other project":
        reseal_execution(inp, projectId="proj-2")
    elif case == "other task":
        reseal_execution(inp, taskId="pkg:demo-pkg:report")
    elif case == "other revision":
        reseal_execution(inp, taskRevision=f"qltd:v1:2:{item_of(inp, task)['contentDigest']}")
    else:
        reseal_execution(inp, taskRevision=f"qltd:v1:1:{D['e']}")
    assert check_of(refusal(inp)) == "A16"


@pytest.mark.parametrize("disposition", ["created", "retained", "updated"])
def test_every_executable_disposition_is_admitted(disposition: str) -> None:
    assert answer(Scenario(dispositions={"fetch": disposition}).input())


def test_a_local_revision_above_int31_is_accepted_when_the_item_matches() -> None:
    s = Scenario(revisions={"fetch": 2147483648})
    res = answer(s.input())
    assert res["receipt"]["taskRevision"] == f"qltd:v1:2147483648:{D['6']}"


def test_a_run_at_the_counter_limit_fails_only_after_the_time_check() -> None:
    inp = Scenario().input()
    m_a18(inp)
    assert check_of(refusal(inp)) == "A18"
    m_a17(inp)
    assert check_of(refusal(inp)) == "A17"


def test_unknown_keys_of_a_local_revision_are_ignored() -> None:
    inp = Scenario().input()
    plain = answer(inp)
    inp["execution"] = {"pid": 4242, **inp["execution"], "note": {"any": ["value"]}}
    assert canonical_json(answer(inp)) == canonical_json(plain)


def test_unknown_keys_of_a_cluster_revision_are_refused() -> None:
    inp = Scenario("remote_worker").input()
    inp["execution"]["note"] = "x"
    assert check_of(refusal(inp)) == "A5"


def test_a_cluster_revision_digest_covers_the_sorted_environment_and_the_default_placement() -> None:
    s = Scenario("remote_worker")
    x = copy.deepcopy(s.execution)
    assert [e["name"] for e in x["environment"]] == ["_TRACE", "api_token", "API_URL", "NODE_ENV"]
    x["environment"].reverse()  # an unsorted input normalizes to the same digest
    assert normalize_execution_revision(x) == s.execution
    bare = E.build_cluster_execution_revision(s.plan, s.receipt, s.task, placement={})
    assert bare["placement"] == {"required": {"executors": ["remote-worker"]}}
    for absent in ({k: v for k, v in bare.items() if k != "placement"}, {**bare, "placement": None}):
        assert normalize_execution_revision(absent) == bare


def test_labels_follow_ql3_property_order() -> None:
    s = Scenario("remote_worker")
    labels = s.execution["placement"]["required"]["labels"]
    assert list(labels) == ["2", "10", "Tier", "zone"]


@pytest.mark.parametrize("change", [
    {"placement": {"required": {"executors": ["local-process"]}}},
    {"placement": {"required": {"runtimes": [{"name": "node", "versionRange": ">=>1"}]}}},
    {"placement": {"preferred": [{"labels": {}, "weight": 5}]}},
    {"placement": {"required": {"features": ["gpu", "gpu"]}}},
    {"environment": [{"name": "QL3_TOKEN", "kind": "public", "value": "x"}]},
    {"environment": [{"name": "A", "kind": "public", "value": "x"}, {"name": "A", "kind": "public", "value": "y"}]},
    {"command": {"kind": "shell", "command": "run", "shell": None}},
    {"command": {"kind": "argv", "file": "bin/run", "args": []}},
    {"timeoutMs": None},
])
def test_malformed_cluster_parts_fail_a5(change: Record) -> None:
    inp = Scenario("remote_worker").input()
    from qlwf.model.canonical import json_digest
    from qlwf.model.execution_revision import CLUSTER_DIGEST_KEYS
    x = {**inp["execution"], **change}
    x["contentDigest"] = json_digest("qinglong.cluster-task-execution-revision.v1",
                                     {k: x[k] for k in CLUSTER_DIGEST_KEYS if k in x})
    inp["execution"] = x
    assert check_of(refusal(inp)) == "A5"


def test_a_secret_reference_of_another_project_fails_a5() -> None:
    from qlwf.model.execution_parts import encode_secret_ref
    s = Scenario("remote_worker")
    env = [{"name": "TOKEN", "kind": "secret", "secretRef": encode_secret_ref("proj-2", "token")}]
    with pytest.raises(ValueError, match="secretRef"):
        E.build_cluster_execution_revision(s.plan, s.receipt, s.task, environment=env)


def test_receipt_items_out_of_collation_order_fail_a3() -> None:
    inp = Scenario().input()
    r = inp["taskReconciliation"]
    items = list(reversed(r["items"]))
    from qlwf.model.reconciliation import reconciliation_receipt_digest
    body = {**r, "items": items}
    inp["taskReconciliation"] = {**body, "receiptDigest": reconciliation_receipt_digest(body)}
    assert check_of(refusal(inp)) == "A3"


def test_a_receipt_that_must_order_text_outside_the_collation_is_unavailable() -> None:
    inp = Scenario().input()
    r = inp["taskReconciliation"]
    extra = {"taskId": "pkg:demo-pkg:café", "revision": 1, "disposition": "created", "contentDigest": D["9"]}
    from qlwf.model.reconciliation import reconciliation_receipt_digest
    body = {**r, "items": [*r["items"], extra]}
    inp["taskReconciliation"] = {**body, "receiptDigest": reconciliation_receipt_digest(body)}
    err = refusal(inp)
    assert isinstance(err, CollationUnsupported)
    assert (err.error_class, err.code) == ("Unavailable", "QLWF_ORACLE_COLLATION_UNSUPPORTED")


def test_the_binding_form_still_answers_as_before() -> None:
    s = Scenario()
    inp = {k: v for k, v in s.input().items() if k not in ("taskReconciliation", "execution")}
    inp["binding"] = E.evidence_binding(s.plan, s.receipt, s.execution, s.task)
    inp["binding"]["taskId"] = "pkg:demo-pkg:other"
    err = refusal(inp)
    assert err.message.startswith("binding disagrees with the plan step")  # §3's own messages, not §3A's


def test_builders_cover_every_task_and_every_disposition() -> None:
    plan = make_plan(tasks=("fetch", "report", "notify"))
    receipt = E.build_task_reconciliation(plan)
    ids = [i["taskId"] for i in receipt["items"]]
    assert {f"pkg:demo-pkg:{t}" for t in ("fetch", "report", "notify")} <= set(ids)
    assert {i["disposition"] for i in receipt["items"]} == {"already_disabled", "created", "disabled", "retained",
                                                            "updated"}
    assert normalize_reconciliation_receipt(copy.deepcopy(receipt)) == receipt
    for build in (E.build_local_execution_revision, E.build_cluster_execution_revision):
        x = build(plan, receipt, "report")
        assert normalize_execution_revision(copy.deepcopy(x)) == x


def test_builders_are_deterministic_and_refuse_a_task_outside_the_plan() -> None:
    plan = make_plan()
    assert canonical_json(E.build_task_reconciliation(plan)) == canonical_json(E.build_task_reconciliation(plan))
    with pytest.raises(ValueError, match="no step"):
        E.build_local_execution_revision(plan, E.build_task_reconciliation(plan), "missing")


def test_a_version_range_the_semver_port_cannot_judge_is_unavailable() -> None:
    """`1.2+b` is valid for npm semver 7.7.4 (build metadata is stripped) but not for the Python port:
    the oracle says it cannot judge it rather than refuse what ql3 accepts (docs/divergences.md)."""
    s = Scenario("remote_worker")
    placement = {"required": {"runtimes": [{"name": "node", "versionRange": "1.2+b"}]}}
    from qlwf.model.semver_range import SemverRangeUnsupported
    with pytest.raises(SemverRangeUnsupported) as info:
        E.build_cluster_execution_revision(s.plan, s.receipt, s.task, placement=placement)
    assert (info.value.error_class, info.value.code) == ("Unavailable", "QLWF_ORACLE_SEMVER_RANGE_UNSUPPORTED")


ODD_VALUES: tuple[Any, ...] = (None, True, 0, -1, 1.5, 2**53, "", "x" * 300, "\u00e9", [], [None], {}, {"k": 1})


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _mutants(inp: Record) -> list[Record]:
    """Every single-place mutation of `inp`: each value (at any depth) replaced by each odd value or
    deleted, and an unknown key added to each object."""
    out = []
    for path in _paths(inp)[1:]:
        for change in (*ODD_VALUES, "delete", "add"):
            m = copy.deepcopy(inp)
            parent = m
            for key in path[:-1]:
                parent = parent[key]
            if change == "delete":
                del parent[path[-1]]
            elif change == "add":
                if not isinstance(parent[path[-1]], dict):
                    continue
                parent[path[-1]]["unknownKey"] = 1
            else:
                parent[path[-1]] = change
            out.append(m)
    return out


@pytest.mark.parametrize("executor", ["local_process", "remote_worker"])
def test_every_single_mutation_of_ql3_evidence_is_answered_or_refused_with_a_typed_error(executor: str) -> None:
    """Replace any value anywhere in a valid §3A input by an odd one, delete it, or add a key: the
    oracle answers or raises one of its typed errors, never another exception (README §6: every
    value read is type-checked)."""
    mutants = _mutants(Scenario(executor).input())
    assert len(mutants) > 1000
    for inp in mutants:
        with contextlib.suppress(QlwfError):
            consult("admit-attempt", inp)
