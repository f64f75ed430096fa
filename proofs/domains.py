"""Finite Z3 domains (enumeration sorts) whose members are read from the rule tables.

Z3 refuses to declare an enumeration sort name twice, so sorts are cached by (name, members);
a mutated table that changes a member list gets a fresh, suffixed sort.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import z3

_CACHE: dict[tuple[str, tuple[Any, ...]], Dom] = {}
_NAMES: dict[str, int] = {}


def _label(value: Any) -> str:
    return "null" if value is None else re.sub(r"[^A-Za-z0-9_]", "_", str(value))


class Dom:
    """An enumeration sort over Python values (strings or None), with encode/decode."""

    def __init__(self, name: str, values: Sequence[Any], sort_name: str) -> None:
        self.name = name
        self.values = tuple(values)
        self.sort, consts = z3.EnumSort(sort_name, [f"{sort_name}.{_label(v)}" for v in self.values])
        self._by_value = dict(zip(self.values, consts, strict=True))
        self._by_name = {str(c): v for v, c in self._by_value.items()}

    def __call__(self, value: Any) -> z3.ExprRef:
        return self._by_value[value]

    def __contains__(self, value: Any) -> bool:
        return value in self._by_value

    def var(self, name: str) -> z3.ExprRef:
        return z3.Const(name, self.sort)

    def isin(self, x: z3.ExprRef, values: Iterable[Any]) -> z3.BoolRef:
        members = [self._by_value[v] for v in values if v in self._by_value]
        return z3.Or([x == m for m in members]) if members else z3.BoolVal(False)

    def decode(self, value: z3.ExprRef) -> Any:
        return self._by_name[str(value)]

    def select(self, key: z3.ExprRef, table: dict[Any, z3.ExprRef], default: z3.ExprRef) -> z3.ExprRef:
        """If-chain `table[key]` over the members of this domain (default when absent)."""
        out = default
        for value, expr in table.items():
            if value in self._by_value:
                out = z3.If(key == self._by_value[value], expr, out)
        return out


def dom(name: str, values: Iterable[Any]) -> Dom:
    members = tuple(dict.fromkeys(values))  # stable de-duplication
    key = (name, members)
    if key not in _CACHE:
        n = _NAMES.get(name, 0)
        _NAMES[name] = n + 1
        _CACHE[key] = Dom(name, members, name if n == 0 else f"{name}{n}")
    return _CACHE[key]
