"""The JSON Schemas of qlwf-backend@1 (conformance/exec/schema/, one per message) and a validator over them.

The harness checks responses with its own structural checks (conformance/exec/port.py: cheap
enough for every step); these schemas are the normative shapes, used by the tests and the
worked example of docs/protocol.md to validate whole transcripts. The same directory holds the
qlwf-trace@1 schema (`trace.json`), which `qlwf traces check` applies to every file, so
`jsonschema` is a main dependency (decisions Q-21).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).with_name("schema")


@functools.cache
def _validators() -> dict[str, Any]:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schemas = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(SCHEMA_DIR.glob("*.json"))}
    registry: Registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in schemas.values())
    out = {}
    for name, schema in schemas.items():
        Draft202012Validator.check_schema(schema)
        out[name.removesuffix(".json")] = Draft202012Validator(schema, registry=registry)
    return out


def problems(direction: str, message_type: str, message: Any) -> list[str]:
    """Why `message` (a `request` or `response` of `message_type`) breaks its schema; [] if it does not."""
    return document_problems(f"{message_type}.{direction}", message)


def document_problems(schema: str, document: Any, root: str = "(message)") -> list[str]:
    """Why `document` breaks schema `schema` (a file name under conformance/exec/schema/ without .json)."""
    return [f"{'/'.join(str(p) for p in e.absolute_path) or root}: {e.message}"
            for e in _validators()[schema].iter_errors(document)]
