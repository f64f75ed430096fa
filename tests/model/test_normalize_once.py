"""Creation and admission paths that normalize or encode once must answer what the long way answers.

* A new StepRun is checked and sealed in one pass (records.seal_new_step_run): the record, the
  mutation digest and every refusal must equal sealing with the reference encoder and then
  normalizing, the order the model used before.
* A command that holds the plan it just normalized builds the admission bundle and the task attempt
  admission without normalizing it again (admission.normalized_plan_bundle,
  attempts.build_loaded_task_attempt_admission): same answers as the public builders.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from model_fixtures import (
    DEMO_BINDING,
    DOMAIN_STEP_RUN_MUTATION,
    MUTATION_KEYS,
    STEP_RUN_INVALID,
    Record,
    demo_plan,
    json_digest,
    make_run,
    raises,
    seal_step_run,
)
from qlwf.conformance.generate import plans
from qlwf.model.admission import create_admission_bundle, normalized_plan_bundle
from qlwf.model.attempts import build_loaded_task_attempt_admission, build_task_attempt_admission
from qlwf.model.errors import QlwfError
from qlwf.model.records import normalize_plan, normalize_step_run
from qlwf.model.steprun import create_step_run_mutation

CONTEXT: Record = {"expectedRunVersion": 1, "expectedRunEventSequence": 1, "eventId": "ev-1", "dedupeKey": "ev-1",
                   "actor": {"type": "system"}}
GOOD_FIELDS: Record = {"id": "sr-1", "runId": "run-1", "stepKey": "fetch", "kind": "task",
                       "definitionRef": "plugin-package:" + "a" * 64 + ":task:fetch", "definitionDigest": "b" * 64,
                       "required": True, "initialStatus": "ready", "createdAtMs": 1000}
# Good and bad values per creation field (bad: wrong type, out of range, malformed, a float that
# the reference encoder writes and the fast encoder must never be asked about).
FIELD_VALUES: dict[str, list[Any]] = {
    "id": ["sr-1", "x" * 128, "", "x" * 129, "bad id", 7, None],
    "runId": ["run-1", "", 1.5, True],
    "stepKey": ["fetch", "a:b", "Fetch", "", ["fetch"]],
    "kind": ["task", "tool", "approval", "", 0],
    "definitionRef": [GOOD_FIELDS["definitionRef"], "plugin-package:x", "\u00e9t\u00e9", "", None],
    "definitionDigest": ["b" * 64, "B" * 64, "b" * 63, 64],
    "required": [True, False, 1, None],
    "initialStatus": ["ready", "pending"],
    "createdAtMs": [0, 1000, 2**53 - 1, 2**53, -1, 1000.0, 1e16, True, "1000", None],
}


def reference_creation(fields: Record, mutation_id: str) -> Record:
    """records.md §6.3 creation written out, sealed with the reference encoder, then normalized."""
    ready = fields["initialStatus"] == "ready"
    body = {"schema": "qinglong/step-run@v1", "id": fields["id"], "runId": fields["runId"], "parentStepRunId": None,
            "stepKey": fields["stepKey"], "kind": fields["kind"], "definitionRef": fields["definitionRef"],
            "definitionDigest": fields["definitionDigest"], "required": fields["required"],
            "status": fields["initialStatus"], "version": 1, "attemptCount": 0, "inputRef": None, "outputRef": None,
            "approvalRequestId": None, "readyAtMs": fields["createdAtMs"] if ready else None, "startedAtMs": None,
            "finishedAtMs": None, "resultCode": None, "errorSummary": None, "createdAtMs": fields["createdAtMs"],
            "updatedAtMs": fields["createdAtMs"], "lastMutationId": mutation_id}
    return normalize_step_run(seal_step_run(body))


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except QlwfError as e:
        return "error", (e.error_class, e.code, e.message)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in FIELD_VALUES.items()}),
       st.sampled_from(["mut-1", "m" * 128, "bad id"]))
def test_a_created_step_run_equals_sealing_then_normalizing(fields: Record, mutation_id: str) -> None:
    before = copy.deepcopy(fields)
    got = outcome(create_step_run_mutation, fields, mutation_id, CONTEXT)
    assert fields == before  # the caller's fields are not touched
    if mutation_id == "bad id":  # checked before the record is built
        assert got[0] == "error" and got[1][1] == STEP_RUN_INVALID
        return
    want = outcome(reference_creation, fields, mutation_id)
    if want[0] == "error":
        assert got == want  # the same refusal, message included
        return
    assert got[0] == "ok", got
    mutation = got[1]
    assert mutation["stepRun"] == want[1]
    assert list(mutation["stepRun"]) == list(want[1])
    body = {k: mutation[k] for k in MUTATION_KEYS[:-1]}
    assert mutation["mutationDigest"] == json_digest(DOMAIN_STEP_RUN_MUTATION, body)


def test_a_non_finite_creation_time_is_a_typed_refusal() -> None:
    """The reference encoder refuses NaN and infinities with ValueError; creation checks every value
    before encoding anything, so the caller gets the typed Invalid of a bad value instead."""
    for value in (math.nan, math.inf, -math.inf):
        raises("Invalid", STEP_RUN_INVALID, create_step_run_mutation, {**GOOD_FIELDS, "createdAtMs": value},
               "mut-1", CONTEXT)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=5),
       st.integers(0, 2**40))
def test_the_bundle_of_a_normalized_plan_is_the_public_bundle(edges: list[list[bool]], planned: int) -> None:
    keys = [f"s{i}" for i in range(len(edges))]
    needs = {k: [keys[j] for j in range(i) if edges[i][j]] for i, k in enumerate(keys)}
    plan = plans.make_plan("run-n", "plan-n", needs, planned)
    normalized = normalize_plan(plan)
    assert normalized_plan_bundle(normalized) == create_admission_bundle(plan)


PLAN = demo_plan()
FETCH = create_admission_bundle(PLAN)["stepMutations"][0]["stepRun"]


def builder_input(**over: Any) -> Record:
    return copy.deepcopy({"plan": normalize_plan(PLAN), "run": make_run(PLAN), "stepRun": FETCH,
                          "binding": dict(DEMO_BINDING), "attemptNumber": 1, "admittedAtMs": 2000, **over})


LOADED_CASES: dict[str, Record] = {
    "created": {},
    "later epoch": {"attemptNumber": 8192, "admittedAtMs": 1000},
    "stepRun invalid": {"stepRun": {**FETCH, "stepRunDigest": "0" * 64}},
    "binding invalid": {"binding": {**DEMO_BINDING, "executorType": "k8s"}},
    "run mismatch": {"run": {**make_run(PLAN), "requestId": "plan-0002"}},
    "not ready": {"stepRun": {**FETCH, "status": "pending"}},
    "admitted too early": {"admittedAtMs": 999},
    "attempt number": {"attemptNumber": 0},
    "extra key": {"extra": 1},
}


def test_the_loaded_task_attempt_admission_is_the_public_one() -> None:
    for case, over in LOADED_CASES.items():
        public, loaded = outcome(build_task_attempt_admission, builder_input(**over)), outcome(
            build_loaded_task_attempt_admission, builder_input(**over))
        assert loaded == public, case
    assert outcome(build_task_attempt_admission, builder_input())[0] == "ok"  # the cases include a success
