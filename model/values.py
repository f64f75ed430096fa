"""Value patterns and type predicates (records.md §1, §3).

Predicates return booleans; normalizers turn a False into their own typed Invalid error.
"""

from __future__ import annotations

import re
from typing import Any

SAFE_INT_MAX = 2**53 - 1
INT31_MAX = 2147483647

_IDENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*", re.ASCII)
_RESOURCE_RE = re.compile(r"[a-z][a-z0-9-]{0,62}", re.ASCII)
_PACKAGE_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)
_DIGEST_RE = re.compile(r"[0-9a-f]{64}", re.ASCII)
_RESULT_CODE_RE = re.compile(r"[a-z][a-z0-9_]{0,63}", re.ASCII)
_TASK_REVISION_RE = re.compile(r"qltd:v1:([1-9][0-9]{0,9}):([0-9a-f]{64})", re.ASCII)
_RUNTIME_TASK_RE = re.compile(r"pkg:([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?):([a-z][a-z0-9-]{0,62})", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def is_int(x: Any) -> bool:
    """A JSON integer inside the JavaScript safe range; booleans are not integers."""
    return type(x) is int and -SAFE_INT_MAX <= x <= SAFE_INT_MAX


def is_int_in(x: Any, lo: int, hi: int) -> bool:
    return type(x) is int and lo <= x <= hi


def is_int31(x: Any) -> bool:
    return is_int_in(x, 0, INT31_MAX)


def is_timestamp(x: Any) -> bool:
    return is_int_in(x, 0, SAFE_INT_MAX)


def same(x: Any, y: Any) -> bool:
    """JSON equality of an unchecked input value with a checked one: 1.0 and true never equal 1."""
    return type(x) is type(y) and x == y


def is_bool(x: Any) -> bool:
    return type(x) is bool


def is_str(x: Any) -> bool:
    return type(x) is str


def is_object(x: Any) -> bool:
    return type(x) is dict


def is_array(x: Any) -> bool:
    return type(x) is list


def is_identifier(x: Any) -> bool:
    return type(x) is str and 1 <= len(x) <= 128 and _IDENT_RE.fullmatch(x) is not None


def is_portable_id(x: Any) -> bool:
    return type(x) is str and 1 <= len(x) <= 36 and _IDENT_RE.fullmatch(x) is not None


def is_resource_id(x: Any) -> bool:
    return type(x) is str and _RESOURCE_RE.fullmatch(x) is not None


def is_package_name(x: Any) -> bool:
    return type(x) is str and _PACKAGE_RE.fullmatch(x) is not None


def is_digest(x: Any) -> bool:
    return type(x) is str and _DIGEST_RE.fullmatch(x) is not None


def is_result_code(x: Any) -> bool:
    return type(x) is str and _RESULT_CODE_RE.fullmatch(x) is not None


def _utf8_len(x: str) -> int | None:
    try:
        return len(x.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogate
        return None


def _is_text(x: Any, max_bytes: int) -> bool:
    if type(x) is not str or not x or _CONTROL_RE.search(x):
        return False
    n = _utf8_len(x)
    return n is not None and n <= max_bytes


def is_reference_text(x: Any) -> bool:
    return _is_text(x, 512)


def is_summary_text(x: Any) -> bool:
    return _is_text(x, 2048)


def is_bounded_string(x: Any, max_len: int) -> bool:
    """A string of at most max_len characters with no lone surrogate (attempt error fields)."""
    return type(x) is str and len(x) <= max_len and _utf8_len(x) is not None


def task_revision_digest(x: Any) -> str | None:
    """The trailing DIGEST of a TASK_REVISION, or None when x is not TASK_REVISION-shaped."""
    if type(x) is not str:
        return None
    m = _TASK_REVISION_RE.fullmatch(x)
    if m is None or int(m.group(1)) > INT31_MAX:
        return None
    return m.group(2)


def is_runtime_task_id(x: Any) -> bool:
    return is_identifier(x) and _RUNTIME_TASK_RE.fullmatch(x) is not None

