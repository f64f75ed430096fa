"""Canonical JSON, JSON digests and identifier hashes (records.md §5)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One shared encoder: json.dumps would build a new encoder per call, which dominates for small records.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def canonical_json(value: Any) -> bytes:
    """UTF-8 canonical JSON: no whitespace, keys in the dict's (canonical) order, no ASCII escaping.

    Python's encoder escapes exactly the characters records.md §5.1 requires (`"`, `\\`, the
    short escapes and other C0 controls as lowercase `\\u00xx`) and leaves `/` and non-ASCII alone.
    """
    return _ENCODER.encode(value).encode("utf-8")


def canonical_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


def json_digest(domain: str, value: Any) -> str:
    """hex(sha256(UTF8(domain) ‖ NUL ‖ canonical_json(value)))."""
    return digest_bytes(domain, canonical_json(value))


def digest_bytes(domain: str, body: bytes) -> str:
    """json_digest over an already canonical body (lets callers reuse the bytes for size checks)."""
    return hashlib.sha256(domain.encode("utf-8") + b"\x00" + body).hexdigest()


def id_hash(domain: str, *fields: str | int) -> str:
    """hex(sha256(domain ‖ NUL ‖ f1 ‖ NUL ‖ … ‖ NUL ‖ fk)); integers are written in decimal."""
    parts = [domain.encode("utf-8")]
    for field in fields:
        if isinstance(field, bool):
            raise TypeError("booleans are not identifier fields")
        parts.append(str(field).encode("utf-8") if isinstance(field, int) else field.encode("utf-8"))
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()
