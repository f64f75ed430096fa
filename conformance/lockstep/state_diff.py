"""Readable record-level differences between two canonical snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qlwf.conformance.traces.format import index
from qlwf.model.records import KIND_KEYS

Record = dict[str, Any]
MISSING = "<absent>"


@dataclass(frozen=True)
class FieldDiff:
    path: str
    model: Any
    backend: Any


@dataclass(frozen=True)
class RecordDiff:
    kind: str
    key: tuple[Any, ...]
    status: str  # "only_in_model" | "only_in_backend" | "differs"
    fields: tuple[FieldDiff, ...] = ()

    def render(self) -> str:
        head = f"{self.kind} {'/'.join(str(k) for k in self.key)}"
        if self.status != "differs":
            return f"{head}: {self.status.replace('_', ' ')}"
        lines = [f"{head}:"]
        lines += [f"    {f.path}: model={_short(f.model)} backend={_short(f.backend)}" for f in self.fields]
        return "\n".join(lines)

    def to_json(self) -> Record:
        return {"kind": self.kind, "key": list(self.key), "status": self.status,
                "fields": [{"path": f.path, "model": f.model, "backend": f.backend} for f in self.fields]}


def _short(value: Any, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def value_diff(model: Any, backend: Any, path: str = "") -> list[FieldDiff]:
    """Field-by-field differences, recursing into objects and arrays; key order counts for objects."""
    if isinstance(model, dict) and isinstance(backend, dict):
        out: list[FieldDiff] = []
        for k in list(model) + [k for k in backend if k not in model]:
            sub = f"{path}.{k}" if path else k
            if k not in backend:
                out.append(FieldDiff(sub, model[k], MISSING))
            elif k not in model:
                out.append(FieldDiff(sub, MISSING, backend[k]))
            else:
                out += value_diff(model[k], backend[k], sub)
        if not out and list(model) != list(backend):
            out.append(FieldDiff(f"{path or '<record>'} (key order)", list(model), list(backend)))
        return out
    if isinstance(model, list) and isinstance(backend, list) and len(model) == len(backend):
        out = []
        for i, (m, b) in enumerate(zip(model, backend, strict=True)):
            out += value_diff(m, b, f"{path}[{i}]")
        return out
    if type(model) is not type(backend) or model != backend:
        return [FieldDiff(path or "<value>", model, backend)]
    return []


def snapshot_diff(model: dict[str, list[Record]], backend: dict[str, list[Record]]) -> list[RecordDiff]:
    out: list[RecordDiff] = []
    mi, bi = index(model), index(backend)
    for kind in KIND_KEYS:
        m, b = mi.get(kind, {}), bi.get(kind, {})
        found: list[RecordDiff] = []
        for key in sorted(set(m) | set(b), key=lambda k: tuple(str(x) for x in k)):
            if key not in b:
                found.append(RecordDiff(kind, key, "only_in_model"))
            elif key not in m:
                found.append(RecordDiff(kind, key, "only_in_backend"))
            else:
                fields = value_diff(m[key], b[key])
                if fields:
                    found.append(RecordDiff(kind, key, "differs", tuple(fields)))
        if not found and model.get(kind, []) != backend.get(kind, []):
            found.append(RecordDiff(kind, (), "differs", (FieldDiff("(record order)", "sorted by key", "other"),)))
        out += found
    for kind in sorted(set(model) ^ set(backend)):
        out.append(RecordDiff(kind, (), "only_in_model" if kind in model else "only_in_backend"))
    return out
