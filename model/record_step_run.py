"""The StepRun (records.md §6.3): its keys, the rule of every value, the record invariants, the digest,
the normalizer and the sealing of a StepRun the model builds."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from . import tables as T
from .canonical import canonical_json, digest_bytes, plain_canonical_json
from .errors import InvalidRaiser
from .record_common import _HEX_64, STEP_FAIL, Record, exact_keys
from .speedups import speedups_on, step_values_ok
from .values import (
    INT31_MAX,
    is_bool,
    is_digest,
    is_identifier,
    is_int_in,
    is_object,
    is_reference_text,
    is_result_code,
    is_summary_text,
    is_timestamp,
)

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


_STEP_VALUES = operator.itemgetter(*STEP_RUN_KEYS)  # a StepRun's values in canonical order, at C speed


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
    if speedups_on() and step_values_ok(values):  # every rule at once (model/speedups.py); else rule by rule
        return values
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
