"""Exact-input memoization of normalizers for the pure resolvers' internal use.

A resolution normalizes every record it reads; callers such as the frontier cadence ask about the
same plan and mostly unchanged StepRuns again and again. The cache key is exact: a hit returns what
normalization of that very input returned (failures are not cached). Cached records are shared:
only model-internal callers that never mutate records use this; the public normalizers always build
fresh objects.

The memo is process-global and used from the PostgreSQL adapter's worker threads, so the
OrderedDict operations hold a lock; normalization runs outside it (two threads missing on the same
key both normalize, and both results are equal). It is bounded by entry count and by key size, and
an input it cannot key (not plain JSON, a float that JSON cannot carry, a lone surrogate, an
oversized text) bypasses it: the normalizer itself then reports its typed error.

Cold traffic (an oracle client's new snapshots, decisions Q-19) pays for keys that never hit: a
memo that keeps missing samples its calls until a hit shows that inputs repeat again, and callers
that parsed their input from JSON text may say so (`parsed_json_input`) to skip the type walks.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from .canonical import canonical_json, plain_canonical_json

Normalizer = Callable[[Any], dict[str, Any]]
_R = TypeVar("_R")

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
    within trusting_record_identity() (outside, every call computes). The model's loads ask the same
    integrity questions about the same record objects at every command of an exploration (a step
    shares every record it did not write with the previous state); a new or rebuilt record is a new
    object and is asked afresh. The records are held, so their ids cannot be reused while kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, fn: Callable[..., _R], *records: Any) -> _R:
        if not _TRUSTED_IDENTITY.get():
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
