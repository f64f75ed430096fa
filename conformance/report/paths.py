"""Where two outcomes differ: the first differing path with both values, for reports that must show
the field a reviewer has to see in full rather than two outcomes clipped at the same length."""

from __future__ import annotations

from typing import Any

from qlwf.model.canonical import canonical_json

_MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


def first_difference_path(model: Any, backend: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first path (`ok.next.runId`, `ok.outcomes[0].status`, `error.code`) where two JSON values
    differ by canonical JSON, with the two values there (a key one side lacks: None on that side)."""
    if model is _MISSING or backend is _MISSING:
        return path, None if model is _MISSING else model, None if backend is _MISSING else backend
    if canonical_json(model) == canonical_json(backend):
        return None
    if isinstance(model, dict) and isinstance(backend, dict):
        for key in [*model, *(k for k in backend if k not in model)]:
            found = first_difference_path(model.get(key, _MISSING), backend.get(key, _MISSING),
                                          f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(model, list) and isinstance(backend, list) and len(model) == len(backend):
        for i, (m, b) in enumerate(zip(model, backend, strict=True)):
            found = first_difference_path(m, b, f"{path}[{i}]")
            if found is not None:
                return found
    return path, None if model is _MISSING else model, None if backend is _MISSING else backend
