"""The ExecutionPlan (records.md §6.1): its keys, digest, dependency order and normalizer."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

from . import tables as T
from .canonical import digest_bytes, json_digest, plain_canonical_json
from .record_common import _HEX_64, _IDENT_128, PLAN_FAIL, Record, canonical, exact_keys
from .values import (
    _RESOURCE_RE,
    INT31_MAX,
    is_array,
    is_digest,
    is_identifier,
    is_int_in,
    is_package_name,
    is_portable_id,
    is_resource_id,
    is_timestamp,
)

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
