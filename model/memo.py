"""Exact-input memoization of normalizers for the pure resolvers' internal use.

A resolution normalizes every record it reads; callers such as the frontier cadence ask about the
same plan and mostly unchanged StepRuns again and again. The cache key is the canonical JSON text of
the raw input, which distinguishes 1 from 1.0 and true and reflects key order, so a hit returns
exactly what normalization of that input returned (or re-raises nothing: failures are not cached).
Cached records are shared: only model-internal callers that never mutate records use this; the
public normalizers always build fresh objects.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .canonical import canonical_text

Normalizer = Callable[[Any], dict[str, Any]]


_SCALARS = (str, int, float, bool, type(None))


def is_plain_json(x: Any) -> bool:
    """True when x is built only from dict (str keys), list, str, int, float, bool and None, exactly."""
    stack = [x]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is dict:
            if any(type(k) is not str for k in node):
                return False
            stack.extend(node.values())
        elif t is list:
            stack.extend(node)
        elif t not in _SCALARS:
            return False
    return True


class ExactMemo:
    def __init__(self, fn: Normalizer, size: int) -> None:
        self.fn = fn
        self.size = size
        self.entries: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def __call__(self, x: Any) -> dict[str, Any]:
        # Only plain JSON values are keyed: the JSON text alone would confuse a tuple with a list or
        # a dict subclass with a dict, which the normalizers must reject.
        if not is_plain_json(x):
            return self.fn(x)
        key = canonical_text(x)
        hit = self.entries.get(key)
        if hit is not None:
            self.entries.move_to_end(key)
            return hit
        value = self.fn(x)
        self.entries[key] = value
        if len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self.entries.clear()
