"""Exact-key normalizers of the ql3 records (records.md §4, §6).

Every normalizer requires a JSON object with the exact key set, checks each value in table order,
checks the record invariants, recomputes the digest (if any) and returns a NEW dict in canonical
key order. Failures raise the normalizer's typed Invalid error.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable
from functools import cache
from typing import Any

from . import tables as T
from .canonical import canonical_json, digest_bytes, json_digest, plain_canonical_json
from .errors import InvalidRaiser
from .values import (
    _RESOURCE_RE,
    INT31_MAX,
    SAFE_INT_MAX,
    is_array,
    is_bool,
    is_bounded_string,
    is_digest,
    is_identifier,
    is_int,
    is_int31,
    is_int_in,
    is_object,
    is_package_name,
    is_portable_id,
    is_reference_text,
    is_resource_id,
    is_result_code,
    is_runtime_task_id,
    is_str,
    is_summary_text,
    is_timestamp,
    task_revision_digest,
)

Record = dict[str, Any]

# The key of every record kind of a state snapshot (commands.md §1.3): record vocabulary shared by
# the trace format, the replay diff and the storage drivers.
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "admissions": ("planDigest",), "admissionSteps": ("planDigest", "stepKey"), "runs": ("id",), "stepRuns": ("id",),
    "mutations": ("mutationId",), "events": ("runId", "sequence"), "attempts": ("id",),
    "taskReceipts": ("attemptId",), "leases": ("attemptId",),
}


PLAN_FAIL = InvalidRaiser(T.FAMILIES["plan"].invalid or "", "plan_invalid")
STEP_FAIL = InvalidRaiser(T.FAMILIES["step_run"].invalid or "", "step_run_invalid")
ADMISSION_RECEIPT_FAIL = InvalidRaiser(T.FAMILIES["admission_receipt"].invalid or "", "receipt_invalid")
TASK_RECEIPT_FAIL = InvalidRaiser(T.FAMILIES["task_admission"].invalid or "", "receipt_invalid")
BINDING_FAIL = InvalidRaiser(T.FAMILIES["task_admission"].invalid or "", "argument_invalid")


@cache
def _keyset(keys: tuple[str, ...]) -> frozenset[str]:
    return frozenset(keys)


def exact_keys(x: Any, required: tuple[str, ...], optional: tuple[str, ...], fail: InvalidRaiser, what: str) -> None:
    if type(x) is dict and (x.keys() == _keyset(required) if not optional
                            else _keyset(required) <= x.keys() <= _keyset(required + optional)):
        return  # the common case, decided without building the messages' lists
    fail.check(is_object(x), f"{what} must be an object")
    keys = set(x)
    missing = [k for k in required if k not in keys]
    extra = sorted(keys - set(required) - set(optional))
    if missing or extra:
        fail(f"{what} keys mismatch (missing {missing}, unexpected {extra})")


def canonical(x: Record, order: tuple[str, ...]) -> Record:
    """A new dict with the present keys of `order`, in that order."""
    return {k: x[k] for k in order if k in x}


# --------------------------------------------------------------------------------------------------
# ExecutionPlan (records.md §6.1)
PLAN_KEYS = ("schema", "planId", "runId", "target", "steps", "plannedAtMs", "planDigest")
TARGET_KEYS = (
    "projectId", "packageName", "installationId", "lockDigest", "generation", "generationDigest",
    "materializedRevisionDigest", "publicationDigest", "workflowId", "workflowDefinitionDigest",
)
PLAN_STEP_KEYS = (
    "stepRunId", "stepKey", "taskId", "taskDefinitionRef", "taskDefinitionDigest", "needs",
    "initialStatus", "required",
)
_TARGET_RULES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("projectId", is_identifier),
    ("packageName", is_package_name),
    ("installationId", is_identifier),
    ("lockDigest", is_digest),
    ("generation", lambda v: is_int_in(v, 1, INT31_MAX)),
    ("generationDigest", is_digest),
    ("materializedRevisionDigest", is_digest),
    ("publicationDigest", is_digest),
    ("workflowId", is_resource_id),
    ("workflowDefinitionDigest", is_digest),
)


def task_definition_ref(materialized_revision_digest: str, task_id: str) -> str:
    return f"plugin-package:{materialized_revision_digest}:task:{task_id}"


def plan_digest(unsigned_plan: Record) -> str:
    return json_digest(T.DOMAIN_PLAN, unsigned_plan)


def topological_keys(steps: list[Record]) -> list[str] | None:
    """Step keys in a dependency order (Kahn's algorithm over need → dependent edges), or None
    when the needs form a cycle; every need must be a known step key."""
    indeg = {s["stepKey"]: len(s["needs"]) for s in steps}
    dependents: dict[str, list[str]] = {k: [] for k in indeg}
    for s in steps:
        for need in s["needs"]:
            dependents[need].append(s["stepKey"])
    order = [k for k, n in indeg.items() if n == 0]
    for k in order:
        for dep in dependents[k]:
            indeg[dep] -= 1
            if indeg[dep] == 0:
                order.append(dep)
    return order if len(order) == len(indeg) else None


def _is_acyclic(steps: list[Record]) -> bool:
    return topological_keys(steps) is not None


# `,"planDigest":"<64 hex>"` appended to the unsigned plan's text (the closing brace moves after it).
_PLAN_DIGEST_MEMBER_BYTES = len(',"planDigest":""') + 64


_PLAN_STEP_KEYSET = frozenset(PLAN_STEP_KEYS)
_PLAN_STEP_VALUES = operator.itemgetter(*PLAN_STEP_KEYS)
_RESOURCE = _RESOURCE_RE.fullmatch  # is_resource_id's pattern


def normalize_plan(x: Any) -> Record:
    fail = PLAN_FAIL
    exact_keys(x, PLAN_KEYS, (), fail, "plan")
    fail.check(x["schema"] == T.SCHEMA_PLAN, "plan schema mismatch")
    target = x["target"]
    exact_keys(target, TARGET_KEYS, (), fail, "plan target")
    for key, rule in _TARGET_RULES:
        fail.check(rule(target[key]), f"plan target {key} is invalid")
    target = canonical(target, TARGET_KEYS)
    steps_in = x["steps"]
    fail.check(is_array(steps_in) and 1 <= len(steps_in) <= T.MAX_WORKFLOW_STEPS,
               "plan steps must be an array of 1..128 steps")
    steps: list[Record] = []
    # `if not ...: fail(f"...")` rather than fail.check(..., f"..."): the messages are built only on failure.
    mrd = target["materializedRevisionDigest"]
    ref_prefix = task_definition_ref(mrd, "")
    for i, step in enumerate(steps_in):
        if not (type(step) is dict and step.keys() == _PLAN_STEP_KEYSET):
            exact_keys(step, PLAN_STEP_KEYS, (), fail, f"plan step {i}")
        (step_run_id, key, task_id, definition_ref, definition_digest, needs, initial,
         required) = _PLAN_STEP_VALUES(step)
        if not (initial in ("ready", "pending") and required is True):
            fail(f"plan step {i} initialStatus/required invalid")
        if not (type(key) is str and _RESOURCE(key) is not None):  # is_resource_id
            fail(f"plan step {i} stepKey invalid")
        if not (type(task_id) is str and _RESOURCE(task_id) is not None):
            fail(f"plan step {i} taskId invalid")
        if not (is_array(needs) and len(needs) <= T.MAX_WORKFLOW_STEPS):
            fail(f"plan step {i} needs must be an array")
        for j, need in enumerate(needs):
            if not (type(need) is str and _RESOURCE(need) is not None):
                fail(f"plan step {i} need {j} invalid")
            if need == key:
                fail(f"plan step {i} needs itself")
            if not (j == 0 or needs[j - 1] < need):
                fail(f"plan step {i} needs not strictly ascending")
        if (initial == "ready") != (not needs):
            fail(f"plan step {i} initialStatus must be ready iff needs is empty")
        if not definition_ref == ref_prefix + task_id:  # noqa: SIM201 - task_definition_ref(mrd, taskId)
            fail(f"plan step {i} taskDefinitionRef mismatch")
        if not (type(step_run_id) is str and _IDENT_128(step_run_id) is not None):  # is_identifier
            fail(f"plan step {i} stepRunId invalid")
        if not (type(definition_digest) is str and _HEX_64(definition_digest) is not None):  # is_digest
            fail(f"plan step {i} taskDefinitionDigest invalid")
        steps.append({"stepRunId": step_run_id, "stepKey": key, "taskId": task_id, "taskDefinitionRef": definition_ref,
                      "taskDefinitionDigest": definition_digest, "needs": list(needs), "initialStatus": initial,
                      "required": required})
    steps.sort(key=lambda s: s["stepKey"])
    for a, b in itertools.pairwise(steps):
        if a["stepKey"] == b["stepKey"]:
            fail(f"duplicate stepKey {a['stepKey']}")
    fail.check(len({s["stepRunId"] for s in steps}) == len(steps), "duplicate stepRunId")
    keys = {s["stepKey"] for s in steps}
    for s in steps:
        for need in s["needs"]:
            if need not in keys:
                fail(f"step {s['stepKey']} needs unknown step {need}")
    fail.check(_is_acyclic(steps), "dependency graph is cyclic")
    fail.check(is_identifier(x["planId"]), "planId invalid")
    fail.check(is_portable_id(x["runId"]), "runId invalid")
    fail.check(is_timestamp(x["plannedAtMs"]), "plannedAtMs invalid")
    unsigned = {"schema": T.SCHEMA_PLAN, "planId": x["planId"], "runId": x["runId"], "target": target,
                "steps": steps, "plannedAtMs": x["plannedAtMs"]}
    fail.check(is_digest(x["planDigest"]), "planDigest invalid")
    # Every value is validated (no floats), so the fast encoder is exact; one encoding serves the
    # digest and the size of the signed plan.
    body = plain_canonical_json(unsigned)
    fail.check(x["planDigest"] == digest_bytes(T.DOMAIN_PLAN, body), "planDigest mismatch")
    plan = {**unsigned, "planDigest": x["planDigest"]}
    fail.check(len(body) + _PLAN_DIGEST_MEMBER_BYTES <= T.MAX_PLAN_BYTES, "plan exceeds 262144 bytes")
    return plan


def sign_plan(unsigned: Record) -> Record:
    """Attach the planDigest to an unsigned plan (steps sorted first) and normalize it."""
    steps = sorted(unsigned["steps"], key=lambda s: s["stepKey"])
    body = {**canonical(unsigned, PLAN_KEYS[:-1]), "steps": steps}
    return normalize_plan({**body, "planDigest": plan_digest(body)})


# --------------------------------------------------------------------------------------------------
# StepRun (records.md §6.3)
STEP_RUN_KEYS = (
    "schema", "id", "runId", "parentStepRunId", "stepKey", "kind", "definitionRef", "definitionDigest",
    "required", "status", "version", "attemptCount", "inputRef", "outputRef", "approvalRequestId",
    "readyAtMs", "startedAtMs", "finishedAtMs", "resultCode", "errorSummary", "createdAtMs",
    "updatedAtMs", "lastMutationId", "stepRunDigest",
)


def _nullable(rule: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or rule(v)


_STEP_RULES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("schema", lambda v: v == T.SCHEMA_STEP_RUN),
    ("id", is_identifier),
    ("runId", is_identifier),
    ("parentStepRunId", _nullable(is_identifier)),
    ("stepKey", is_identifier),
    ("kind", lambda v: v in T.STEP_KINDS),
    ("definitionRef", is_reference_text),
    ("definitionDigest", is_digest),
    ("required", is_bool),
    ("status", lambda v: v in T.STEP_STATUSES),
    ("version", lambda v: is_int_in(v, 1, INT31_MAX)),
    ("attemptCount", lambda v: is_int_in(v, 0, T.MAX_STEP_RUN_ATTEMPTS)),
    ("inputRef", _nullable(is_reference_text)),
    ("outputRef", _nullable(is_reference_text)),
    ("approvalRequestId", _nullable(is_identifier)),
    ("readyAtMs", _nullable(is_timestamp)),
    ("startedAtMs", _nullable(is_timestamp)),
    ("finishedAtMs", _nullable(is_timestamp)),
    ("resultCode", _nullable(is_result_code)),
    ("errorSummary", _nullable(is_summary_text)),
    ("createdAtMs", is_timestamp),
    ("updatedAtMs", is_timestamp),
    ("lastMutationId", is_identifier),
    ("stepRunDigest", is_digest),
)



_IDENT_128 = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", re.ASCII).fullmatch  # is_identifier's
_HEX_64 = re.compile(r"[0-9a-f]{64}", re.ASCII).fullmatch  # is_digest's


def _ident(v: Any) -> bool:
    return type(v) is str and _IDENT_128(v) is not None


def _ts(v: Any) -> bool:
    return type(v) is int and 0 <= v <= SAFE_INT_MAX


_PRINTABLE_512 = re.compile(r"[\x20-\x7e]{1,512}", re.ASCII).fullmatch  # an ASCII REFERENCE_TEXT
_PRINTABLE_2048 = re.compile(r"[\x20-\x7e]{1,2048}", re.ASCII).fullmatch  # an ASCII SUMMARY_TEXT


def _ref(v: Any) -> bool:
    """is_reference_text, without encoding the usual printable ASCII text to count its bytes."""
    return type(v) is str and (_PRINTABLE_512(v) is not None or is_reference_text(v))


_STR_ONLY = frozenset((str,))
_IDENT_PART = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
# id, runId, stepKey, lastMutationId, definitionRef (ASCII REFERENCE_TEXT), definitionDigest, stepRunDigest
_STEP_TEXTS = re.compile("\x00".join([_IDENT_PART] * 4 + [r"[\x20-\x7e]{1,512}", "[0-9a-f]{64}", "[0-9a-f]{64}"]),
                         re.ASCII).fullmatch
_STEP_VALUES = operator.itemgetter(*STEP_RUN_KEYS)  # a StepRun's values in canonical order, at C speed
_STEP_KIND_SET = frozenset(T.STEP_KINDS)
_STEP_STATUS_SET = frozenset(T.STEP_STATUSES)


def _step_values_ok(v: tuple[Any, ...]) -> bool:
    """The rules of _STEP_RULES on the values in canonical order, held in locals (no dict look-ups). Only
    ever stricter than the rules (exact str types before a set look-up): a False runs the rule loop,
    which decides."""
    (schema, id_, run_id, parent, step_key, kind, definition_ref, definition_digest, required, status,
     version, attempt_count, input_ref, output_ref, approval, ready, started, finished, result_code,
     error_summary, created, updated, last_mutation, digest) = v
    ident, ref, ts = _ident, _ref, _ts
    texts = (id_, run_id, step_key, last_mutation, definition_ref, definition_digest, digest)
    # The seven always-present text fields in one match (none of their patterns admits NUL, so each
    # field matches its own part); a non-ASCII reference text, or any failure, checks them one by one.
    texts_ok = (_STR_ONLY.issuperset(map(type, texts)) and _STEP_TEXTS("\x00".join(texts)) is not None) or (
        ident(id_) and ident(run_id) and ident(step_key) and ident(last_mutation) and ref(definition_ref)
        and type(definition_digest) is str and _HEX_64(definition_digest) is not None
        and type(digest) is str and _HEX_64(digest) is not None)
    return (
        schema == T.SCHEMA_STEP_RUN and texts_ok and (parent is None or ident(parent))
        and type(kind) is str and kind in _STEP_KIND_SET
        and type(required) is bool and type(status) is str and status in _STEP_STATUS_SET
        and type(version) is int and 1 <= version <= INT31_MAX
        and type(attempt_count) is int and 0 <= attempt_count <= T.MAX_STEP_RUN_ATTEMPTS
        and (input_ref is None or ref(input_ref)) and (output_ref is None or ref(output_ref))
        and (approval is None or ident(approval))
        and (ready is None or ts(ready)) and (started is None or ts(started)) and (finished is None or ts(finished))
        and (result_code is None or is_result_code(result_code))
        and (error_summary is None or (type(error_summary) is str and _PRINTABLE_2048(error_summary) is not None)
             or is_summary_text(error_summary))
        and ts(created) and ts(updated)
    )


_STEP_TIMESTAMP_SHAPE = T.STEP_TIMESTAMP_SHAPE


_TERMINAL_SHAPE = (None, None, True)
_INVARIANT_VALUES = operator.itemgetter(
    "createdAtMs", "updatedAtMs", "readyAtMs", "startedAtMs", "finishedAtMs", "status", "approvalRequestId",
    "outputRef", "resultCode", "errorSummary", "parentStepRunId", "attemptCount",
)


def _step_body_bytes(step_run: Record) -> bytes:
    return canonical_json({k: step_run[k] for k in STEP_RUN_KEYS[:-1]})


# `,"stepRunDigest":"<64 hex>"}`: what the full record's text has after the body's last member.
_STEP_DIGEST_TAIL_BYTES = len(',"stepRunDigest":""}') + 64


def step_run_digest(step_run: Record) -> str:
    return digest_bytes(T.DOMAIN_STEP_RUN, _step_body_bytes(step_run))


def _step_json_size(body: bytes) -> int:
    """Size of the full record's canonical JSON: the body plus `,"stepRunDigest":"<64 hex>"`."""
    return len(body) + len(',"stepRunDigest":""') + 64


def step_run_invariant_violation(s: Record) -> str | None:
    """The first record invariant of records.md §6.3 that `s` (type-checked) violates, or None."""
    (created, updated, ready, started, finished, status, approval, output_ref, result_code, error_summary,
     parent, attempt_count) = _INVARIANT_VALUES(s)
    if updated < created:
        return "updatedAtMs precedes createdAtMs"
    if ready is not None and not created <= ready <= updated:
        return "readyAtMs outside [createdAtMs, updatedAtMs]"
    if started is not None and (ready is None or not ready <= started <= updated):
        return "startedAtMs requires readyAtMs and lies within [readyAtMs, updatedAtMs]"
    if finished is not None and (
        not created <= finished <= updated
        or (ready is not None and finished < ready)
        or (started is not None and finished < started)
    ):
        return "finishedAtMs out of order"
    shape = _STEP_TIMESTAMP_SHAPE[status]
    if shape != _TERMINAL_SHAPE or finished is None:  # a terminal StepRun needs only finishedAtMs
        for name, want, value in zip(("readyAtMs", "startedAtMs", "finishedAtMs"), shape,
                                     (ready, started, finished), strict=True):
            if want is not None and want != (value is not None):
                return f"{status} StepRun must {'' if want else 'not '}have {name}"
    if status == "waiting_approval" and approval is None:
        return "waiting_approval requires approvalRequestId"
    if output_ref is not None and status != "succeeded":
        return "outputRef is allowed only when succeeded"
    if status in T.STEP_RESULT_CODE_REQUIRED and result_code is None:
        return f"{status} requires resultCode"
    if status in ("succeeded", "pending", "ready", "waiting_approval", "running") and (
        result_code is not None or error_summary is not None
    ):
        return f"{status} must not carry resultCode or errorSummary"
    if parent is not None and parent == s["id"]:
        return "parentStepRunId equals id"
    if attempt_count == 0 and started is not None:
        return "attemptCount 0 with startedAtMs"
    if attempt_count > 0 and status in ("pending", "ready") and started is not None:
        return "pending/ready StepRun with attempts must not have startedAtMs"
    return None


STEP_RUN_KEYSET = frozenset(STEP_RUN_KEYS)


def _checked_step_values(x: Record, fail: InvalidRaiser) -> tuple[Any, ...]:
    """The values of a StepRun with exactly its keys, in canonical order, each checked by its rule."""
    values: tuple[Any, ...] = _STEP_VALUES(x)
    if not _step_values_ok(values):
        for key, rule in _STEP_RULES:
            if not rule(x[key]):
                fail(f"StepRun {key} is invalid")
    return values


def normalize_step_run(x: Any, fail: InvalidRaiser = STEP_FAIL) -> Record:
    if not (is_object(x) and x.keys() == STEP_RUN_KEYSET):
        exact_keys(x, STEP_RUN_KEYS, (), fail, "StepRun")
    s = dict(zip(STEP_RUN_KEYS, _checked_step_values(x, fail), strict=True))  # a copy in canonical order
    problem = step_run_invariant_violation(s)
    if problem:
        fail(f"StepRun {s['id']}: {problem}")
    # Validated values only (no floats), so the fast encoder is exact. The record ends with its
    # 64-hex digest, so the body is the full text without that last member.
    full = plain_canonical_json(s)
    body = full[:-_STEP_DIGEST_TAIL_BYTES] + b"}"
    fail.check(digest_bytes(T.DOMAIN_STEP_RUN, body) == s["stepRunDigest"], f"StepRun {s['id']} digest mismatch")
    fail.check(len(full) <= T.MAX_STEP_RUN_JSON_BYTES, "StepRun JSON exceeds 16384 bytes")
    return s


def seal_step_run(s: Record) -> Record:
    """Recompute stepRunDigest of a StepRun, in canonical order (no value is checked: test vectors
    seal deliberately invalid records with it)."""
    body = {k: s[k] for k in STEP_RUN_KEYS[:-1]}
    return {**body, "stepRunDigest": step_run_digest(body)}


# Stands in for the digest of a StepRun being created while its values are checked (any 64-hex passes).
_UNSEALED_DIGEST = "0" * 64


def seal_new_step_run(body: Record, fail: InvalidRaiser = STEP_FAIL) -> Record:
    """Check and seal a new StepRun whose values come from a caller: `body` is the caller's own new
    dict with every key but stepRunDigest, in canonical order. Every value rule, the record
    invariants and the size are checked, in normalize_step_run's order, then the record is encoded
    and digested once."""
    body["stepRunDigest"] = _UNSEALED_DIGEST
    _checked_step_values(body, fail)
    return seal_built_step_run(body, fail, fresh=True)


def seal_built_step_run(s: Record, fail: InvalidRaiser = STEP_FAIL, *, fresh: bool = False) -> Record:
    """Seal a StepRun the model just built from validated inputs and self-check it (§3.2): record
    invariants and size are checked; types hold by construction. `fresh`: `s` is the caller's own
    new dict, which may be sealed in place instead of copied."""
    if tuple(s) == STEP_RUN_KEYS and type(s["stepRunDigest"]) is str and _HEX_64(s["stepRunDigest"]) is not None:
        # A transition's copy of a normalized record: canonical order, ending with the previous
        # 64-hex digest, so the body is its text without that member, and the copy keeps the order.
        problem = step_run_invariant_violation(s)
        if problem:
            fail(f"StepRun {s['id']}: {problem}")
        raw = plain_canonical_json(s)[:-_STEP_DIGEST_TAIL_BYTES] + b"}"  # validated values: no floats
        sealed = s if fresh else dict(s)
    else:
        sealed = {k: s[k] for k in STEP_RUN_KEYS[:-1]}
        problem = step_run_invariant_violation(sealed)
        if problem:
            fail(f"StepRun {s['id']}: {problem}")
        raw = plain_canonical_json(sealed)  # built from validated values: no floats
    fail.check(_step_json_size(raw) <= T.MAX_STEP_RUN_JSON_BYTES, "StepRun JSON exceeds 16384 bytes")
    digest = digest_bytes(T.DOMAIN_STEP_RUN, raw)
    sealed["stepRunDigest"] = digest
    return sealed


# --------------------------------------------------------------------------------------------------
# Workflow admission receipt (records.md §6.9)
ADMISSION_RECEIPT_KEYS = (
    "schema", "planId", "planDigest", "runId", "publicationDigest", "workflowId", "steps",
    "finalRunVersion", "finalRunEventSequence", "admittedAtMs", "receiptDigest",
)
ADMISSION_RECEIPT_STEP_KEYS = ("stepKey", "stepRunId", "stepRunDigest", "mutationId", "eventId")


def admission_receipt_digest(receipt: Record) -> str:
    return json_digest(T.DOMAIN_ADMISSION_RECEIPT, {k: receipt[k] for k in ADMISSION_RECEIPT_KEYS[:-1]})


def normalize_admission_receipt(x: Any, fail: InvalidRaiser = ADMISSION_RECEIPT_FAIL) -> Record:
    exact_keys(x, ADMISSION_RECEIPT_KEYS, (), fail, "admission receipt")
    fail.check(x["schema"] == T.SCHEMA_ADMISSION_RECEIPT, "admission receipt schema mismatch")
    fail.check(is_identifier(x["planId"]), "planId invalid")
    fail.check(is_digest(x["planDigest"]), "planDigest invalid")
    fail.check(is_portable_id(x["runId"]), "runId invalid")
    fail.check(is_digest(x["publicationDigest"]), "publicationDigest invalid")
    fail.check(is_resource_id(x["workflowId"]), "workflowId invalid")
    steps_in = x["steps"]
    fail.check(is_array(steps_in) and 1 <= len(steps_in) <= T.MAX_WORKFLOW_STEPS, "steps must be 1..128 entries")
    steps = []
    for i, e in enumerate(steps_in):
        exact_keys(e, ADMISSION_RECEIPT_STEP_KEYS, (), fail, f"receipt step {i}")
        fail.check(is_resource_id(e["stepKey"]) and is_identifier(e["stepRunId"]) and is_digest(e["stepRunDigest"])
                   and is_identifier(e["mutationId"]) and is_portable_id(e["eventId"]),
                   f"receipt step {i} invalid")
        steps.append(canonical(e, ADMISSION_RECEIPT_STEP_KEYS))
    steps.sort(key=lambda e: e["stepKey"])
    for field in ADMISSION_RECEIPT_STEP_KEYS:
        if field != "stepRunDigest":
            fail.check(len({e[field] for e in steps}) == len(steps), f"receipt steps repeat a {field}")
    n = len(steps) + 1
    fail.check(is_int(x["finalRunVersion"]) and x["finalRunVersion"] == n, "finalRunVersion must be steps + 1")
    fail.check(is_int(x["finalRunEventSequence"]) and x["finalRunEventSequence"] == n,
               "finalRunEventSequence must be steps + 1")
    fail.check(is_timestamp(x["admittedAtMs"]), "admittedAtMs invalid")
    r = {**canonical(x, ADMISSION_RECEIPT_KEYS), "steps": steps}
    fail.check(is_digest(x["receiptDigest"]) and admission_receipt_digest(r) == x["receiptDigest"],
               "receiptDigest mismatch")
    fail.check(len(canonical_json(r)) <= T.MAX_ADMISSION_RECEIPT_BYTES, "receipt exceeds 262144 bytes")
    return r


# --------------------------------------------------------------------------------------------------
# Execution binding and task attempt receipt (records.md §6.10)
BINDING_KEYS = (
    "resourceTaskId", "taskReconciliationReceiptDigest", "taskId", "taskRevision", "taskDefinitionDigest",
    "executorType", "executionDigest",
)
TASK_RECEIPT_KEYS = (
    "schema", "attemptId", "planDigest", "runId", "stepRunId", "stepRunVersion", "stepRunDigest",
    *BINDING_KEYS, "attemptNumber", "eventId", "runVersion", "runEventSequence", "admittedAtMs",
    "receiptDigest",
)


def _binding_shape_problem(x: Record) -> str | None:
    if not is_resource_id(x["resourceTaskId"]):
        return "resourceTaskId invalid"
    if not is_digest(x["taskReconciliationReceiptDigest"]):
        return "taskReconciliationReceiptDigest invalid"
    if not is_runtime_task_id(x["taskId"]):
        return "taskId invalid"
    if not is_digest(x["taskDefinitionDigest"]):
        return "taskDefinitionDigest invalid"
    suffix = task_revision_digest(x["taskRevision"])
    if suffix is None or suffix != x["taskDefinitionDigest"]:
        return "taskRevision invalid or its digest differs from taskDefinitionDigest"
    if x["executorType"] not in T.EXECUTOR_TYPES:
        return "executorType invalid"
    if not is_digest(x["executionDigest"]):
        return "executionDigest invalid"
    return None


def normalize_binding(x: Any, fail: InvalidRaiser = BINDING_FAIL) -> Record:
    exact_keys(x, BINDING_KEYS, (), fail, "execution binding")
    problem = _binding_shape_problem(x)
    if problem:
        fail(f"execution binding {problem}")
    return canonical(x, BINDING_KEYS)


def binding_plan_problem(binding: Record, plan: Record, step: Record) -> str | None:
    """Agreement of a binding with its plan step (records.md §6.10), or the disagreement."""
    if binding["resourceTaskId"] != step["taskId"]:
        return "resourceTaskId differs from the plan step taskId"
    if binding["taskId"] != f"pkg:{plan['target']['packageName']}:{step['taskId']}":
        return "taskId differs from pkg:<packageName>:<taskId>"
    if task_revision_digest(binding["taskRevision"]) != binding["taskDefinitionDigest"]:
        return "taskRevision digest differs from taskDefinitionDigest"
    return None


def task_receipt_digest(receipt: Record) -> str:
    return json_digest(T.DOMAIN_TASK_RECEIPT, {k: receipt[k] for k in TASK_RECEIPT_KEYS[:-1]})


def normalize_task_receipt(x: Any, fail: InvalidRaiser = TASK_RECEIPT_FAIL) -> Record:
    exact_keys(x, TASK_RECEIPT_KEYS, (), fail, "task attempt receipt")
    fail.check(x["schema"] == T.SCHEMA_TASK_RECEIPT, "task attempt receipt schema mismatch")
    fail.check(is_portable_id(x["attemptId"]), "attemptId invalid")
    fail.check(is_digest(x["planDigest"]), "planDigest invalid")
    fail.check(is_portable_id(x["runId"]), "runId invalid")
    fail.check(is_identifier(x["stepRunId"]), "stepRunId invalid")
    fail.check(is_int_in(x["stepRunVersion"], 1, INT31_MAX), "stepRunVersion invalid")
    fail.check(is_digest(x["stepRunDigest"]), "stepRunDigest invalid")
    problem = _binding_shape_problem(x)
    if problem:
        fail(f"task attempt receipt {problem}")
    fail.check(is_int_in(x["attemptNumber"], 1, T.MAX_RUN_ATTEMPTS), "attemptNumber invalid")
    fail.check(is_portable_id(x["eventId"]), "eventId invalid")
    fail.check(is_int_in(x["runVersion"], 1, INT31_MAX), "runVersion invalid")
    fail.check(x["runEventSequence"] == x["runVersion"] and is_int(x["runEventSequence"]),
               "runEventSequence must equal runVersion")
    fail.check(is_timestamp(x["admittedAtMs"]), "admittedAtMs invalid")
    r = canonical(x, TASK_RECEIPT_KEYS)
    fail.check(is_digest(x["receiptDigest"]) and task_receipt_digest(r) == x["receiptDigest"],
               "receiptDigest mismatch")
    fail.check(len(canonical_json(r)) <= T.MAX_TASK_RECEIPT_BYTES, "receipt exceeds 16384 bytes")
    return r


# --------------------------------------------------------------------------------------------------
# Run (records.md §6.2), RunAttempt (§6.7), DispatchLease (§6.8), RunEvent (§6.4)
RUN_KEYS = (
    "id", "projectId", "taskId", "taskRevision", "taskSnapshotRef", "triggerType", "executionOrigin",
    "executionOwner", "requestId", "status", "version", "eventSequence", "priority", "idempotencyKey",
    "createdAtMs", "startedAtMs", "cancelRequestedAtMs", "cancelReason", "finishedAtMs", "errorCode",
    "errorSummary",
)


ATTEMPT_KEYS = (
    "id", "runId", "stepRunId", "attempt", "status", "executorType", "workerId", "leaseGeneration",
    "leaseVersion", "leaseExpiresAtMs", "deadlineAtMs", "callbackSequence", "createdAtMs", "startedAtMs",
    "finishedAtMs", "exitCode", "errorCode", "errorSummary",
)
ATTEMPT_REQUIRED_KEYS = ("id", "runId", "stepRunId", "attempt", "status", "executorType", "callbackSequence",
                         "createdAtMs")
ATTEMPT_LEASE_KEYS = ("workerId", "leaseGeneration", "leaseVersion", "leaseExpiresAtMs")
_ATTEMPT_RULES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("id", is_portable_id),
    ("runId", is_portable_id),
    ("stepRunId", is_identifier),
    ("attempt", lambda v: is_int_in(v, 1, T.MAX_RUN_ATTEMPTS)),
    ("status", lambda v: v in T.ATTEMPT_STATUSES),
    ("executorType", lambda v: v in T.EXECUTOR_TYPES),
    ("workerId", is_identifier),
    ("leaseGeneration", lambda v: is_int_in(v, 1, INT31_MAX)),
    ("leaseVersion", is_int31),
    ("leaseExpiresAtMs", is_timestamp),
    ("deadlineAtMs", is_timestamp),
    ("callbackSequence", is_int31),
    ("createdAtMs", is_timestamp),
    ("startedAtMs", is_timestamp),
    ("finishedAtMs", is_timestamp),
    ("exitCode", lambda v: is_int_in(v, -2147483648, 2147483647)),
    ("errorCode", lambda v: is_bounded_string(v, 128) and v != ""),
    ("errorSummary", lambda v: is_bounded_string(v, 1024) and v != ""),
)


def attempt_problem(x: Any) -> str | None:
    """Type and shape problems of a stored model RunAttempt (the model subset), or None.

    For stored records only (integrity loads, INV-6): ql3 snapshots given to the pure functions
    are checked by their own lists (cancellation.md §3 item 8, task-attempts.md §8 item 4).
    """
    if not is_object(x):
        return "attempt must be an object"
    if any(k not in x for k in ATTEMPT_REQUIRED_KEYS) or set(x) - set(ATTEMPT_KEYS):
        return "attempt keys mismatch"
    for key, rule in _ATTEMPT_RULES:
        if key in x and not rule(x[key]):
            return f"attempt {key} is invalid"
    present = [k in x for k in ATTEMPT_LEASE_KEYS]
    if any(present) and not all(present):
        return "attempt lease keys must be all present or all absent"
    return None


# records.md §6.7: keys of the generic ql3 RunAttempt record outside the model subset (D-13). The
# model never stores them, but a ql3 snapshot handed to a pure function may carry any of them.
GENERIC_ATTEMPT_EXTRA_KEYS = (
    "workerSessionId", "workerGeneration", "executorHandle", "pid", "logArtifactId", "leaseToken",
    "leaseTokenDigest", "offerId", "callbackTokenHash",
)
GENERIC_ATTEMPT_KEYSET = frozenset((*ATTEMPT_KEYS, *GENERIC_ATTEMPT_EXTRA_KEYS))

# (attempt key, task receipt key) pairs that must agree for an attempt handed to a pure function
# (cancellation.md §3 item 8c, task-attempts.md §8 item 4: the same list in both).
ATTEMPT_RECEIPT_AGREEMENT = (
    ("id", "attemptId"), ("runId", "runId"), ("stepRunId", "stepRunId"), ("attempt", "attemptNumber"),
    ("executorType", "executorType"), ("createdAtMs", "admittedAtMs"),
)


def foreign_attempt_keys(x: Record) -> list[str]:
    """Keys of a snapshot attempt that the generic RunAttempt record does not have (records.md §6.7).

    This is the only shape check of an attempt given to a pure function: the exact model key set
    and "lease keys together" are invariants of stored model records, never input checks.
    """
    return sorted(k for k in x if k not in GENERIC_ATTEMPT_KEYSET)


LEASE_KEYS = (
    "attemptId", "runId", "status", "version", "leaseGeneration", "workerId", "acquiredAtMs", "renewedAtMs",
    "expiresAtMs", "releasedAtMs", "releaseReason", "completedAtMs", "updatedAtMs",
)
LEASE_OPTIONAL_KEYS = ("releasedAtMs", "releaseReason", "completedAtMs")
_LEASE_RULES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("attemptId", is_portable_id),
    ("runId", is_portable_id),
    ("status", lambda v: v in T.LEASE_STATUSES),
    ("version", is_int31),
    ("leaseGeneration", lambda v: is_int_in(v, 1, INT31_MAX)),
    ("workerId", is_identifier),
    ("acquiredAtMs", is_timestamp),
    ("renewedAtMs", is_timestamp),
    ("expiresAtMs", is_timestamp),
    ("releasedAtMs", is_timestamp),
    ("releaseReason", lambda v: v in T.RELEASE_REASONS),
    ("completedAtMs", is_timestamp),
    ("updatedAtMs", is_timestamp),
)


def lease_problem(x: Any) -> str | None:
    if not is_object(x):
        return "lease must be an object"
    required = tuple(k for k in LEASE_KEYS if k not in LEASE_OPTIONAL_KEYS)
    if any(k not in x for k in required) or set(x) - set(LEASE_KEYS):
        return "lease keys mismatch"
    for key, rule in _LEASE_RULES:
        if key in x and not rule(x[key]):
            return f"lease {key} is invalid"
    if x["renewedAtMs"] < x["acquiredAtMs"] or x["expiresAtMs"] <= x["renewedAtMs"]:
        return "lease times out of order"
    if x["updatedAtMs"] < x["acquiredAtMs"]:
        return "lease updatedAtMs precedes acquiredAtMs"
    released = "releasedAtMs" in x or "releaseReason" in x
    completed = "completedAtMs" in x
    if x["status"] == "leased" and (released or completed):
        return "leased lease carries release or completion keys"
    if x["status"] == "released" and not ("releasedAtMs" in x and "releaseReason" in x and not completed):
        return "released lease shape invalid"
    if x["status"] == "completed" and not (completed and not released):
        return "completed lease shape invalid"
    return None


EVENT_KEYS = (
    "id", "runId", "sequence", "type", "dedupeKey", "actorType", "actorId", "attemptId", "stepRunId",
    "payload", "createdAtMs",
)


def event_problem(x: Any) -> str | None:
    if not is_object(x):
        return "event must be an object"
    required = ("id", "runId", "sequence", "type", "actorType", "payload", "createdAtMs")
    if any(k not in x for k in required) or set(x) - set(EVENT_KEYS):
        return "event keys mismatch"
    checks = (
        is_portable_id(x["id"]), is_portable_id(x["runId"]), is_int_in(x["sequence"], 1, INT31_MAX),
        is_str(x["type"]) and 1 <= len(x["type"]) <= 128, x["actorType"] in T.ACTOR_TYPES,
        is_object(x["payload"]), is_timestamp(x["createdAtMs"]),
        "dedupeKey" not in x or (is_str(x["dedupeKey"]) and 1 <= len(x["dedupeKey"]) <= 255),
        "actorId" not in x or is_identifier(x["actorId"]),
        "attemptId" not in x or is_portable_id(x["attemptId"]),
        "stepRunId" not in x or is_identifier(x["stepRunId"]),
    )
    if not all(checks):
        return "event field invalid"
    if len(canonical_json(x["payload"])) > T.MAX_EVENT_PAYLOAD_BYTES:
        return "event payload exceeds 16384 bytes"
    return None


def make_event(*, event_id: str, run_id: str, sequence: int, type_: str, actor: Record,
               payload: Record, created_at_ms: int, attempt_id: str | None = None,
               step_run_id: str | None = None) -> Record:
    """A RunEvent in canonical order with dedupeKey = id (every v1 producer)."""
    e: Record = {"id": event_id, "runId": run_id, "sequence": sequence, "type": type_, "dedupeKey": event_id,
                 "actorType": actor["type"]}
    if "id" in actor:
        e["actorId"] = actor["id"]
    if attempt_id is not None:
        e["attemptId"] = attempt_id
    if step_run_id is not None:
        e["stepRunId"] = step_run_id
    e["payload"] = payload
    e["createdAtMs"] = created_at_ms
    return e


def actor_problem(actor: Any) -> str | None:
    if not is_object(actor) or "type" not in actor or set(actor) - {"type", "id"}:
        return "actor must be {type} or {type, id}"
    if actor["type"] not in T.ACTOR_TYPES:
        return "actor type invalid"
    if "id" in actor and not is_identifier(actor["id"]):
        return "actor id invalid"
    return None


# Shared, memoized normalizers for the pure resolvers (see memo.py); never hand these out.
from .memo import ExactMemo, flat_key  # noqa: E402 - needs the normalizers above

shared_plan = ExactMemo(normalize_plan, 64)
shared_step_run = ExactMemo(normalize_step_run, 8192, key=flat_key)  # a StepRun's values are all scalars
shared_admission_receipt = ExactMemo(normalize_admission_receipt, 64)
shared_task_receipt = ExactMemo(normalize_task_receipt, 4096)
