"""The model's speed-ups. This is NOT the specification: the plain functions are.

The spec is the plain code: the rule-by-rule normalizers of `records.py`, the predicates of
`invariants.py`, the pure resolutions that read records through them. Everything here only makes
them cheaper and must answer exactly what the plain code answers: the same record, the same refusal
with the same message, the same violations in the same order. tests/model/test_speedups.py holds
fast = plain on generated states and on corrupted records (a flipped field, a broken digest); a
speed-up that cannot be held equal to a plain function has no place in the model.

The plain path: `QLWF_PLAIN_MODEL=1` in the environment turns every speed-up off for the whole
process; `with plain_model():` turns them off within a block (this thread's context only). Then every
memo calls its function, every invariant part is computed afresh and every record is checked rule
by rule.

What is here, and who uses it:

* the switch: `speedups_on()`, `plain_model()`;
* exact-input memos of the normalizers (`ExactMemo`: records.py builds the shared ones the pure
  resolutions read records through), with the callers' vouching scopes `parsed_json_input()`
  (`qlwf oracle`) and `trusting_record_identity()` (the explorer, the generators, the stateful test);
* answers remembered by the identity of the records asked about: `IdentityMemo` (the model's
  integrity loads, cmd_loads.py) and the per-record parts of INV-5/6/8/26 (`reused`, within
  `reusing_record_checks()`);
* fused validators, every rule of a record in one expression: `step_values_ok` (a StepRun's values,
  record_step_run.py) and `context_values_ok` (a mutation context, steprun.py). Each is only ever
  stricter than the rules (exact `str` types before set look-ups), so a False hands the value to the
  rule-by-rule check, which decides and words the refusal.

model/memo.py is the memo's former home; it re-exports the memo names for their importers.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from . import tables as T
from .canonical import canonical_json, plain_canonical_json
from .record_common import _HEX_64, _IDENT_128
from .values import INT31_MAX, SAFE_INT_MAX, is_reference_text, is_result_code, is_summary_text

Normalizer = Callable[[Any], dict[str, Any]]
_R = TypeVar("_R")
_V = TypeVar("_V")

# ------------------------------------------------------------------------------------------------
# The switch
_SPEEDUPS: ContextVar[bool] = ContextVar("qlwf_speedups",
                                         default=os.environ.get("QLWF_PLAIN_MODEL", "") in ("", "0"))


def speedups_on() -> bool:
    """False within plain_model(), or everywhere when the process runs with QLWF_PLAIN_MODEL=1."""
    return _SPEEDUPS.get()


@contextmanager
def plain_model(plain: bool = True) -> Iterator[None]:
    """Within: every speed-up is off (plain=False, within: on), in this thread's context only."""
    token = _SPEEDUPS.set(not plain)
    try:
        yield
    finally:
        _SPEEDUPS.reset(token)


# ------------------------------------------------------------------------------------------------
# Exact-input memos of the normalizers (decisions)
#
# A resolution normalizes every record it reads; callers such as the frontier cadence ask about the
# same plan and mostly unchanged StepRuns again and again. The cache key is exact: a hit returns what
# normalization of that very input returned (failures are not cached). Cached records are shared:
# only model-internal callers that never mutate records use this; the public normalizers always
# build fresh objects.
#
# The memo is process-global and used from the PostgreSQL adapter's worker threads, so the
# OrderedDict operations hold a lock; normalization runs outside it (two threads missing on the same
# key both normalize, and both results are equal). It is bounded by entry count and by key size,
# and an input it cannot key (not plain JSON, a float that JSON cannot carry, a lone surrogate, an
# oversized text) bypasses it: the normalizer itself then reports its typed error.
#
# Cold traffic (an oracle client's new snapshots, decisions Q-19) pays for keys that never hit: a
# memo that keeps missing samples its calls until a hit shows that inputs repeat again, and callers
# that parsed their input from JSON text may say so (`parsed_json_input`) to skip the type walks.

_SCALAR_TYPES = frozenset((str, int, float, bool, type(None)))
_FLAT_VALUE_TYPES = _SCALAR_TYPES - {float}
_STR_ONLY = frozenset((str,))
# Larger inputs are normalized every time instead of pinning their text (a plan is at most 262144 bytes).
MAX_KEY_CHARS = 1 << 19  # bytes of key text


# Set while the values the memos are asked about were built by a JSON parser (see parsed_json_input).
_PARSED_INPUT: ContextVar[bool] = ContextVar("qlwf_memo_parsed_input", default=False)


@contextmanager
def parsed_json_input() -> Iterator[None]:
    """Within: the caller vouches that every value the memos are asked about came from a strict JSON
    parser (exact dict with str keys, list, str, int, bool, None, finite float; no lone surrogate),
    as `qlwf oracle` inputs do, so the keys skip their type walks. The resolvers ask the memos only
    about parts of their input. Per thread (a context variable): other threads are unaffected."""
    token = _PARSED_INPUT.set(True)
    try:
        yield
    finally:
        _PARSED_INPUT.reset(token)


# Set while the caller vouches that no record the memos are asked about is changed in place (see
# trusting_record_identity).
_TRUSTED_IDENTITY: ContextVar[bool] = ContextVar("qlwf_memo_trusted_identity", default=False)


@contextmanager
def trusting_record_identity(enabled: bool = True) -> Iterator[None]:
    """Within: the caller vouches that no value the memos are asked about is mutated in place while
    the scope lasts (the explorer's and the stateful test's States share unchanged records between
    steps and never mutate one, model/state.py), so a memo may answer a value it has normalized
    before, the very same object, without keying it again. Per thread; enabled=False, within: keys
    are built as outside."""
    token = _TRUSTED_IDENTITY.set(enabled)
    try:
        yield
    finally:
        _TRUSTED_IDENTITY.reset(token)


def is_plain_json(x: Any) -> bool:
    """True when x is built only from dict (str keys), list, str, int, float, bool and None, exactly."""
    t = type(x)
    if t is not dict and t is not list:
        return t in _SCALAR_TYPES
    stack = [x]
    push = stack.append
    while stack:  # only containers are pushed: scalars are checked where they are met
        node = stack.pop()
        if type(node) is dict:
            if not _STR_ONLY.issuperset(map(type, node)):
                return False
            values: Any = node.values()
        else:
            values = node
        for v in values:
            tv = type(v)
            if tv is dict or tv is list:
                push(v)
            elif tv not in _SCALAR_TYPES:
                return False
    return True


def text_key(x: Any) -> Hashable | None:
    """The JSON text of a plain JSON value as bytes, or None when it has none (or is oversized).

    The text distinguishes 1 from 1.0 and true and reflects key order, so equal keys mean equal
    inputs: it is the fast encoder's text (canonical, except that floats are written another way),
    and either encoder's text parses back to exactly the value it was written from (a float always
    with `.` or `e`) - save NaN and infinities, which orjson writes as `null`. So a text with `null`
    in it is replaced by the reference text, which raises for those.
    """
    if _PARSED_INPUT.get():
        return _parsed_key(x)
    if not is_plain_json(x):
        return None
    try:
        key = plain_canonical_json(x)
        if b"null" in key:
            key = canonical_json(x)
    except (ValueError, RecursionError):  # NaN/infinity, a lone surrogate, an int too long to print, depth
        return None
    return key if len(key) <= MAX_KEY_CHARS else None


def _parsed_key(x: Any) -> Hashable | None:
    """text_key of a value a JSON parser built: exact types, and every float finite (orjson writes
    one in a shortest round-trip form, which tells it from any integer), so no walk and no `null`
    re-check are needed; only the size bound and what the fast encoder refuses remain."""
    try:
        key = plain_canonical_json(x)
    except (ValueError, RecursionError):  # a lone surrogate or nesting no encoder writes: no key
        return None
    return key if len(key) <= MAX_KEY_CHARS else None


def flat_key(x: Any) -> Hashable | None:
    """An exact key for a flat JSON object (scalar values only, such as a StepRun), or None.

    Its canonical JSON text: for str keys and str/int/bool/None values (exact types, no floats) the
    fast encoder writes exactly canonical_json, which tells 1 from true and reflects key order. A
    float, a subclass, an integer beyond 64 bits or a lone surrogate yields None (no memo). Size:
    only keys of successful normalizations are kept, bounded by the normalizer's own size limit
    (16384 bytes for a StepRun).
    """
    if type(x) is not dict:
        return None
    if _PARSED_INPUT.get():
        return _parsed_key(x)
    if not (_FLAT_VALUE_TYPES.issuperset(map(type, x.values())) and _STR_ONLY.issuperset(map(type, x))):
        return None
    try:
        return plain_canonical_json(x)
    except ValueError:  # a lone surrogate (the reference encoder refuses it too)
        return None


# A memo that has missed this many times in a row is being sent new inputs (an oracle client's cold
# snapshots): it then keys only one call in SAMPLE_EVERY, and the first hit there resumes keying every
# call. Keying costs an encoding and two lock round trips per record, pure overhead on misses; a
# bypassed call normalizes as a miss would, so no answer changes, only whether it is remembered.
COLD_STREAK = 1024
SAMPLE_EVERY = 16


class ExactMemo:
    """A bounded, thread-safe LRU of `fn` keyed by `key` (text_key unless told otherwise)."""

    def __init__(self, fn: Normalizer, size: int, key: Callable[[Any], Hashable | None] = text_key) -> None:
        self.fn = fn
        self.size = size
        self.key = key
        self.entries: OrderedDict[Hashable, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        # Heuristic counters: a race between threads only moves which call is sampled.
        self.misses_in_a_row = 0
        self._calls = 0
        # id(input) -> (input, value), only used and filled within trusting_record_identity(); the
        # input is held so that its id cannot be reused by another object while the entry lasts.
        self._by_identity: dict[int, tuple[Any, dict[str, Any]]] = {}

    def __call__(self, x: Any) -> dict[str, Any]:
        if not _SPEEDUPS.get():
            return self.fn(x)
        if _TRUSTED_IDENTITY.get():
            known = self._by_identity.get(id(x))
            if known is not None and known[0] is x:
                return known[1]
            value = self._keyed(x)
            with self._lock:
                if len(self._by_identity) >= self.size:
                    self._by_identity.clear()
                self._by_identity[id(x)] = (x, value)
            return value
        return self._keyed(x)

    def _keyed(self, x: Any) -> dict[str, Any]:
        if self.misses_in_a_row >= COLD_STREAK:
            self._calls += 1
            if self._calls % SAMPLE_EVERY:
                return self.fn(x)
        # Only plain JSON values are keyed: the JSON text alone would confuse a tuple with a list or
        # a dict subclass with a dict, which the normalizers must reject.
        key = self.key(x)
        if key is None:
            return self.fn(x)
        with self._lock:
            hit = self.entries.get(key)
            if hit is not None:
                self.entries.move_to_end(key)
                self.misses_in_a_row = 0
                return hit
        value = self.fn(x)
        with self._lock:
            # A key another thread stored meanwhile keeps its place: the bound holds either way.
            self.entries[key] = value
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
            self.misses_in_a_row += 1
        return value

    def __len__(self) -> int:
        with self._lock:  # never observe the moment between an insertion and its eviction
            return len(self.entries)

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self._by_identity.clear()
            self.misses_in_a_row = 0


class IdentityMemo:
    """Answers of pure functions of records, remembered by the identity of the records passed, and only
    within trusting_record_identity() with the speed-ups on (otherwise every call computes). The
    model's loads ask the same integrity questions about the same record objects at every command of
    an exploration (a step shares every record it did not write with the previous state); a new or
    rebuilt record is a new object and is asked afresh. The records are held, so their ids cannot be
    reused while kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, fn: Callable[..., _R], *records: Any) -> _R:
        if not (_TRUSTED_IDENTITY.get() and _SPEEDUPS.get()):
            return fn(*records)
        key = (fn, *map(id, records))
        hit = self._entries.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], records, strict=True)):
            known: _R = hit[1]
            return known
        value = fn(*records)
        with self._lock:
            if len(self._entries) >= self.size:
                self._entries.clear()
            self._entries[key] = (records, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# ------------------------------------------------------------------------------------------------
# Incremental invariant evaluation (the explorer, the stateful test, lockstep; decisions Q-41)
#
# A committed record is never changed in place (States are immutable values, model/state.py): a step
# replaces the records it writes and shares every other one with the previous state. Within
# `reusing_record_checks()` the per-record parts of the invariants (INV-6's normalizations, INV-5's
# admission bundle, INV-8's mutation digests, INV-26's lease shape) are remembered by the identity of
# the records they read, so a state pays only for what its step wrote. Outside it everything is
# evaluated in full.
_REUSE: ContextVar[dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] | None] = ContextVar(
    "qlwf_invariant_reuse", default=None)
REUSE_BOUND = 250_000  # entries; past it the memo starts afresh (it pins the records it keys on)


@contextmanager
def reusing_record_checks(enabled: bool = True, memo: dict[Any, Any] | None = None) -> Iterator[None]:
    """Within: per-record invariant parts are reused for records seen before (same object); with
    enabled=False, within: everything is evaluated in full. `memo` carries the reuse across scopes
    (a caller checking one evolving state step by step). The caller vouches that no record it
    passes is mutated in place meanwhile (the model never does)."""
    token = _REUSE.set((memo if memo is not None else {}) if enabled else None)
    try:
        with trusting_record_identity(enabled):  # the same vouching lets the normalizer memos skip keys
            yield
    finally:
        _REUSE.reset(token)


def reused(kind: str, inputs: tuple[Any, ...], compute: Callable[[], _V]) -> _V:
    """compute(), a function of `inputs` alone named by `kind`; within reusing_record_checks() the
    answer given before for the very same input objects."""
    memo = _REUSE.get()
    if memo is None or not _SPEEDUPS.get():
        return compute()
    key = (kind, *map(id, inputs))
    hit = memo.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], inputs, strict=True)):
        value: _V = hit[1]
        return value
    value = compute()
    if len(memo) >= REUSE_BOUND:
        memo.clear()
    memo[key] = (inputs, value)  # holding the inputs keeps their ids from being reused
    return value


# ------------------------------------------------------------------------------------------------
# Fused validators
_PRINTABLE_512 = re.compile(r"[\x20-\x7e]{1,512}", re.ASCII).fullmatch  # an ASCII REFERENCE_TEXT
_PRINTABLE_2048 = re.compile(r"[\x20-\x7e]{1,2048}", re.ASCII).fullmatch  # an ASCII SUMMARY_TEXT


def _ident(v: Any) -> bool:
    return type(v) is str and _IDENT_128(v) is not None


def _ts(v: Any) -> bool:
    return type(v) is int and 0 <= v <= SAFE_INT_MAX


def _ref(v: Any) -> bool:
    """is_reference_text, without encoding the usual printable ASCII text to count its bytes."""
    return type(v) is str and (_PRINTABLE_512(v) is not None or is_reference_text(v))


_IDENT_PART = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
# id, runId, stepKey, lastMutationId, definitionRef (ASCII REFERENCE_TEXT), definitionDigest, stepRunDigest
_STEP_TEXTS = re.compile("\x00".join([_IDENT_PART] * 4 + [r"[\x20-\x7e]{1,512}", "[0-9a-f]{64}", "[0-9a-f]{64}"]),
                         re.ASCII).fullmatch
_STEP_KIND_SET = frozenset(T.STEP_KINDS)
_STEP_STATUS_SET = frozenset(T.STEP_STATUSES)


def step_values_ok(v: tuple[Any, ...]) -> bool:
    """Every value rule of a StepRun (record_step_run._STEP_RULES) on its values in canonical order
    (STEP_RUN_KEYS), held in locals. Only ever stricter than the rules (exact str types before a set
    look-up): a False runs the rule loop, which decides."""
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


_ACTOR_TYPE_SET = frozenset(T.ACTOR_TYPES)


def context_values_ok(v: tuple[Any, ...]) -> bool:
    """Every check of steprun._check_context on a mutation context's values in CONTEXT_KEYS order (the
    caller has checked its exact key set), short-circuited, no messages. Only ever stricter than the
    checks (exact str types before set look-ups): a False runs _check_context's checks, which decide."""
    version, sequence, event_id, dedupe_key, actor = v
    return (type(version) is int and 0 <= version <= INT31_MAX and type(sequence) is int and 0 <= sequence <= INT31_MAX
            and type(event_id) is str and _IDENT_128(event_id) is not None
            and (dedupe_key is event_id or (type(dedupe_key) is str and _IDENT_128(dedupe_key) is not None))
            and type(actor) is dict and type(actor.get("type")) is str and actor["type"] in _ACTOR_TYPE_SET
            and (len(actor) == 1 or (len(actor) == 2 and type(actor.get("id")) is str
                                     and _IDENT_128(actor["id"]) is not None)))
