"""Row-by-row comparison of two models' rule tables (model/tables.py).

`table_rows(module)` turns every public upper-case constant of the tables module into rows of
plain JSON (it runs inside a mapped-model process); `diff_tables` compares two such dumps. A
sequence is ordered (first match wins in several tables), so a pure reordering is reported; a
mapping or a set is not. A row of a sequence is named by its `id` field, else its `rule` field,
else its whole content (so an edit of such a row shows as one removed and one added row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import ModuleType
from typing import Any

Rows = dict[str, Any]  # {"ordered": bool, "rows": [[key, value], ...]}
CONSTANTS = "constants"


def plain(value: Any) -> Any:
    """A JSON value for a table cell: named tuples as objects, sets sorted, mapping keys as text."""
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {key_text(k): plain(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted((plain(v) for v in value), key=_text)
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def key_text(key: Any) -> str:
    return key if isinstance(key, str) else _text(plain(key))


def _row_name(value: Any) -> str:
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        fields = value._asdict()
        for name in ("id", "rule"):
            if isinstance(fields.get(name), str):
                return str(fields[name])
    return _text(plain(value))


def _unique(keys: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for k in keys:
        seen[k] = seen.get(k, 0) + 1
        out.append(k if seen[k] == 1 else f"{k}#{seen[k]}")
    return out


def table_rows(module: ModuleType) -> dict[str, Rows]:
    """Every public constant of `module` (names in upper case) as rows."""
    tables: dict[str, Rows] = {}
    constants: list[list[Any]] = []
    for name in sorted(vars(module)):
        value = getattr(module, name)
        if not name[:1].isalpha() or name.upper() != name or isinstance(value, type) or callable(value):
            continue
        if isinstance(value, dict):
            tables[name] = {"ordered": False, "rows": [[key_text(k), plain(v)] for k, v in value.items()]}
        elif isinstance(value, (frozenset, set)):
            members = sorted((plain(v) for v in value), key=_text)
            tables[name] = {"ordered": False, "rows": [[_text(m), m] for m in members]}
        elif isinstance(value, (tuple, list)):
            keys = _unique([_row_name(v) for v in value])
            tables[name] = {"ordered": True, "rows": [[k, plain(v)] for k, v in zip(keys, value, strict=True)]}
        else:
            constants.append([name, plain(value)])
    tables[CONSTANTS] = {"ordered": False, "rows": constants}
    return tables


@dataclass(frozen=True)
class RowChange:
    table: str
    key: str
    change: str  # "added" | "removed" | "changed" | "reordered"
    base: Any = None
    head: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "row": self.key, "change": self.change, "base": self.base, "head": self.head}


def diff_tables(base: dict[str, Rows], head: dict[str, Rows]) -> list[RowChange]:
    out: list[RowChange] = []
    for table in sorted(set(base) | set(head)):
        b_rows = dict((k, v) for k, v in base.get(table, {"rows": []})["rows"])
        h_rows = dict((k, v) for k, v in head.get(table, {"rows": []})["rows"])
        found = []
        for key in [k for k in b_rows if k not in h_rows]:
            found.append(RowChange(table, key, "removed", b_rows[key], None))
        for key in h_rows:
            if key not in b_rows:
                found.append(RowChange(table, key, "added", None, h_rows[key]))
            elif _text(b_rows[key]) != _text(h_rows[key]):
                found.append(RowChange(table, key, "changed", b_rows[key], h_rows[key]))
        ordered = base.get(table, {}).get("ordered") and head.get(table, {}).get("ordered")
        common_b = [k for k in b_rows if k in h_rows]
        common_h = [k for k in h_rows if k in b_rows]
        if ordered and common_b != common_h:
            found.append(RowChange(table, "(row order)", "reordered", common_b, common_h))
        out += found
    return out
