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


def reference_canonical_json(value: Any) -> bytes:
    """UTF-8 canonical JSON: no whitespace, keys in the dict's (canonical) order, no ASCII escaping.

    Python's encoder escapes exactly the characters records.md §5.1 requires (`"`, `\\`, the
    short escapes and other C0 controls as lowercase `\\u00xx`) and leaves `/` and non-ASCII alone.
    This is the reference: exact for any value, and it raises for NaN, infinities and lone surrogates.
    """
    return _ENCODER.encode(value).encode("utf-8")


_PLAIN_SCALARS = frozenset((str, int, bool, type(None)))
# Deeper values go to the reference encoder: well below orjson's own nesting limit (255) and the
# interpreter's recursion limit, and a bound on the walk itself, so a value that contains itself
# ends in the reference's "Circular reference detected". Records nest a few levels deep.
_PLAIN_DEPTH = 64


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether `value` is built only from exact dict, list, tuple, str, int, bool and None.

    On that domain orjson writes the reference's bytes, or refuses (a non-str or str-subclass key,
    an integer beyond 64 bits, a lone surrogate): tests/model/test_canonical.py compares them. Excluded
    is every type orjson writes where the reference writes otherwise (floats: 1e16 vs 1e+16, NaN as
    null) or raises (enums, UUIDs, dataclasses, datetimes, orjson fragments), and every subclass.
    Dict keys are not looked at: orjson refuses every key but an exact str, and writes those alike."""
    kind = type(value)
    if kind is dict:
        items: Any = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return kind in _PLAIN_SCALARS
    if _PLAIN_SCALARS.issuperset(map(type, items)):  # a flat record: decided at C speed
        return True
    if depth >= _PLAIN_DEPTH:
        return False
    for item in items:  # noqa: SIM110 - a loop, not all(...): no generator frame per container
        if type(item) not in _PLAIN_SCALARS and not _plain(item, depth + 1):
            return False
    return True


def canonical_json(value: Any) -> bytes:
    """`reference_canonical_json`, byte for byte and exception for exception, for any value.

    Values of the plain JSON domain (`_plain`: about a third of the cost of the reference encoder
    to check) are written by orjson (about a tenth); anything else, and anything orjson refuses,
    by the reference encoder, which then writes it or raises exactly as before (decisions Q-66)."""
    if _orjson is not None and _plain(value):
        try:
            encoded: bytes = _orjson.dumps(value)
            return encoded
        except TypeError:  # orjson.JSONEncodeError: a non-str key, an integer beyond 64 bits, a lone surrogate
            pass
    return reference_canonical_json(value)


def canonical_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


def _refuse(obj: Any) -> Any:
    raise TypeError(f"{type(obj).__name__} is not plain JSON")


def plain_canonical_json(value: Any) -> bytes:
    """canonical_json for values built only from dict (str keys), list, str, int, bool and None.

    Uses orjson where it is installed: on that domain it writes exactly the bytes of the reference
    encoder (tests/model/test_canonical.py compares them on arbitrary such values). Anything orjson refuses
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
    return reference_canonical_json(value)


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
