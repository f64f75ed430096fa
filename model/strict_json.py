"""Strict JSON text (RFC 8259) for what qlwf reads from outside: traces, driver responses, requests.

`json.loads` accepts three things RFC 8259 leaves to the parser, and each lets two readers of the
same bytes disagree, which a verification gate must not allow:
* NaN and the infinities (not JSON at all);
* a name repeated within one object (§4: names SHOULD be unique; Python keeps the last member,
  other parsers keep the first or refuse), so a trace or a response could mean two things;
* an escaped lone surrogate such as `\\ud800` (§8.2), which no UTF-8 text can hold, so the value
  could not be written back out (records.md §5.1 requires them rejected before canonical JSON).
`loads` refuses all three, and nesting past the decoder's recursion limit, as ValueError with a
one-line message. The oracle's own reader (qlwf/cli/oracle.py) adds its limits on numbers and
depth on top of the same member and constant checks.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

# A `\\uD8xx`..`\\uDFxx` escape (lone, or half of a pair): only an escape puts a surrogate into decoded text.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def reject_constant(name: str) -> NoReturn:
    """parse_constant hook: NaN, Infinity and -Infinity are not JSON."""
    raise ValueError(f"non-finite number {name} is not JSON (RFC 8259)")


def unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: an object whose names are unique, else ValueError naming the repeated one."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {_clip(key)!r}")
            seen.add(key)
    return obj


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string of `value` (keys included), escaped, or None."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return ascii(e.object[e.start:e.end])[1:-1]
    return None


def loads(data: str | bytes) -> Any:
    """The value of strict JSON text; ValueError (one line) for anything `json.loads` refuses and for
    NaN/Infinity, a repeated name in an object, an escaped lone surrogate, or nesting past the
    decoder's recursion limit."""
    try:
        value = json.loads(data, object_pairs_hook=unique_members, parse_constant=reject_constant)
    except RecursionError:
        raise ValueError("the text nests deeper than the JSON decoder's limit") from None
    escaped = (SURROGATE_ESCAPE_BYTES.search(data) if isinstance(data, bytes | bytearray)
               else SURROGATE_ESCAPE.search(data))
    if escaped is not None and (found := lone_surrogate(value)) is not None:
        raise ValueError(f"a string holds the lone surrogate {found}, which no UTF-8 text can carry")
    return value
