"""Canonical JSON, JSON digests and identifier hashes (records.md §5)."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

_orjson: Any
try:  # optional accelerator; every use falls back to the reference encoder below
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by the fallback test through monkeypatching
    _orjson = None

# One shared encoder: json.dumps would build a new encoder per call, which dominates for small records.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# orjson must refuse (so the reference encoder decides) whatever json would encode differently:
# str/int/dict/list subclasses, dataclasses, datetimes. Floats are NOT refused (see plain_canonical_json).
_ORJSON_OPTIONS = 0 if _orjson is None else (
    _orjson.OPT_PASSTHROUGH_SUBCLASS | _orjson.OPT_PASSTHROUGH_DATACLASS | _orjson.OPT_PASSTHROUGH_DATETIME
)


def canonical_json(value: Any) -> bytes:
    """UTF-8 canonical JSON: no whitespace, keys in the dict's (canonical) order, no ASCII escaping.

    Python's encoder escapes exactly the characters records.md §5.1 requires (`"`, `\\`, the
    short escapes and other C0 controls as lowercase `\\u00xx`) and leaves `/` and non-ASCII alone.
    This is the reference: exact for any value, and it raises for NaN, infinities and lone surrogates.
    """
    return _ENCODER.encode(value).encode("utf-8")


def canonical_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


def _refuse(obj: Any) -> Any:
    raise TypeError(f"{type(obj).__name__} is not plain JSON")


def plain_canonical_json(value: Any) -> bytes:
    """canonical_json for values built only from dict (str keys), list, str, int, bool and None.

    Uses orjson where it is installed: on that domain it writes exactly the bytes of the reference
    encoder (tests/test_canonical.py compares them on arbitrary such values). Anything orjson refuses
    (a subclass, an integer beyond 64 bits, a lone surrogate, an unknown type) goes to the reference
    encoder, which then encodes it or raises as before. Callers must rule out floats, which orjson
    writes differently (1e16, NaN as null), and enums or UUIDs, which it encodes where json raises:
    validated records and answers to requests whose text had no float literal qualify.
    """
    if _orjson is not None:
        try:
            encoded: bytes = _orjson.dumps(value, default=_refuse, option=_ORJSON_OPTIONS)
            return encoded
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            pass
    return canonical_json(value)


def json_digest(domain: str, value: Any) -> str:
    """hex(sha256(UTF8(domain) ‖ NUL ‖ canonical_json(value)))."""
    return digest_bytes(domain, canonical_json(value))


@cache
def _domain_prefix(domain: str) -> bytes:
    return domain.encode("utf-8") + b"\x00"


def digest_bytes(domain: str, body: bytes) -> str:
    """json_digest over an already canonical body (lets callers reuse the bytes for size checks)."""
    return hashlib.sha256(_domain_prefix(domain) + body).hexdigest()


_EXACT_FIELD_TYPES = frozenset((str, int))


def id_hash(domain: str, *fields: str | int) -> str:
    """hex(sha256(domain ‖ NUL ‖ f1 ‖ NUL ‖ … ‖ NUL ‖ fk)); integers are written in decimal."""
    # Joined as text and encoded once: UTF-8 of a concatenation is the concatenation of the UTF-8s.
    if _EXACT_FIELD_TYPES.issuperset(map(type, fields)):  # exact str and int (not bool): str() is exact
        return hashlib.sha256("\x00".join([domain, *map(str, fields)]).encode("utf-8")).hexdigest()
    parts = [domain]
    for field in fields:
        if type(field) is str:  # the common cases first
            parts.append(field)
        elif type(field) is int:
            parts.append(str(field))
        elif isinstance(field, bool):
            raise TypeError("booleans are not identifier fields")
        else:
            parts.append(str(field) if isinstance(field, int) else field.encode("utf-8").decode("utf-8"))
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()
