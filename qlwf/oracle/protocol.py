"""The oracle's strict JSON protocol: one request in, one answer out (`qlwf oracle`, batch and campaigns).

Every input passes one strict gate before the model sees it: UTF-8, RFC 8259 JSON without
duplicate keys, non-finite or double-overflowing numbers and lone surrogates, nested at most
MAX_DEPTH deep (docs/decisions.md Q-4, Q-12). What passes is canonically encodable, so the model
only ever sees JSON it can echo, and every answer is written by an encoder that cannot raise.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from qlwf.conformance.report.visible import visible
from qlwf.model.canonical import canonical_json, plain_canonical_json
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.memo import parsed_json_input
from qlwf.model.oracle import ORACLE_REQUEST_INVALID, consult
from qlwf.model.strict_json import SURROGATE_ESCAPE, SURROGATE_ESCAPE_BYTES, reject_constant, unique_members

_orjson: Any
try:  # the strict fast path below; without orjson every line takes the reference path
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _orjson = None

EXIT_INPUT = 2  # malformed or inconsistent input (typed model error)
EXIT_INTERNAL = 70  # a bug in the oracle itself; never expected (EX_SOFTWARE)
INTERNAL_ERROR = "QLWF_ORACLE_INTERNAL_ERROR"
MAX_DEPTH = 64  # RFC 8259 §9 lets a parser limit nesting; ql3 snapshots are at most 6 deep
_JSON_WS = " \t\r\n"
_DOUBLE_DIGITS = len(str(int(sys.float_info.max)))  # an integer literal this long may exceed a double

# What a terminal or a line-oriented reader could take as a line break or a control sequence.



def one_line(text: str) -> str:
    """`text` as one encodable line: lone surrogates and control characters escaped."""
    return visible(text, keep="")


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# --------------------------------------------------------------------------------------------------
# Strict parsing
def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {_clip(text)} overflows a double")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)
    # Python integers are exact, but the literal must denote a double like any other number:
    # float() rounds as the float parser does, so 1E400 and its 401-digit spelling fail alike.
    if len(text) >= _DOUBLE_DIGITS:
        try:
            float(value)
        except OverflowError:
            raise ValueError(f"number {_clip(text)} overflows a double") from None
    return value


def _too_deep(value: Any) -> bool:
    """Nesting beyond MAX_DEPTH, level by level (the parser builds only exact dicts and lists)."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return True
        below: list[Any] = []
        for node in level:
            below += [c for c in (node.values() if type(node) is dict else node) if type(c) is dict or type(c) is list]
        level = below
    return False


def _json_invalid(message: str) -> Invalid:
    return Invalid(ORACLE_REQUEST_INVALID, "json_invalid", message)


def decode_utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _json_invalid(f"input is not valid UTF-8: {e}") from e


def _members_match(text: str, value: Any) -> bool:
    """True only if `value`, parsed from `text` into plain dicts, lost no repeated key.

    Outside strings a `:` only separates a member's name from its value, and the canonical encoder
    writes `:` unescaped and nowhere else, so without escaped colons (`\\u003a`) in the text both
    count members plus the colons inside strings alike; a dropped repeated member makes the value's
    count smaller. Any doubt (an escaped colon, a value the fast encoder refuses) answers False.
    """
    if "\\" in text and ("\\u003a" in text or "\\u003A" in text):
        return False
    try:
        return plain_canonical_json(value).count(b":") == text.count(":")
    except (ValueError, RecursionError):  # a lone surrogate, or nesting the reference encoder refuses
        return False


_NOT_FLAT = frozenset((dict, list, float))  # what a flat, float-free container holds none of


def _shallow_and_float_free(value: Any) -> bool:
    """True when `value` (as orjson parses: exact dict, list, str, int, float, bool, None) nests at
    most MAX_DEPTH deep (counted like `_too_deep`, level by level) and holds no float. A container
    of scalars only (a StepRun, a list of needs) is passed over at C speed."""
    t = type(value)
    if t is not dict and t is not list:
        return t is not float
    flat = _NOT_FLAT.isdisjoint
    level = [value]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return False
        below: list[Any] = []
        push = below.append
        for node in level:
            values = node.values() if type(node) is dict else node
            if flat(map(type, values)):
                continue
            for v in values:
                tv = type(v)
                if tv is dict or tv is list:
                    push(v)
                elif tv is float:
                    return False
        level = below
    return True


def _strict_orjson(data: bytes | str) -> tuple[Any] | None:
    """The whole strict gate at C speed, for lines it can decide alone: (value,) or None ("not
    sure": the reference path then decides, and words any error).

    orjson itself refuses what RFC 8259 refuses (NaN, Infinity, invalid UTF-8, lone surrogate
    escapes, control characters in strings, trailing commas, a BOM) and parses integers beyond
    64 bits and every number with a fraction or exponent as floats, so a float anywhere in the value
    sends the line to the reference path (which reports float literals and overflow exactly). What
    orjson accepts silently is checked here: nesting depth, and repeated keys, of which it keeps
    the last. A dropped member is found in one of two ways:
    * length: orjson's encoding of the value is the shortest text of it (it escapes only what
      RFC 8259 §7 requires, with the short escapes, and writes integers in shortest form;
      tests/model/test_canonical.py pins it to that encoder), and a text with a repeated key also encodes
      the dropped members, so a text exactly as long as the encoding dropped none (compact lines,
      as JSON.stringify and canonical writers produce them, are decided by this alone);
    * colons, as `_members_match` does: outside strings `:` only ends a member's name, so both texts
      count members plus the colons inside strings; an escaped colon or a surrogate escape (whose
      wording the reference owns) is "not sure".
    """
    if _orjson is None:
        return None
    try:
        value = _orjson.loads(data)
    except (ValueError, RecursionError):  # orjson.JSONDecodeError is a ValueError
        return None
    if not _shallow_and_float_free(value):
        return None
    encoded: bytes = _orjson.dumps(value)
    raw = data if isinstance(data, bytes) else data.encode("utf-8")  # orjson accepted it: no lone surrogate
    size = len(raw) - (raw.endswith(b"\n") + raw.endswith(b"\r\n"))
    if size == len(encoded):
        return (value,)
    if b"\\" in raw and (b"\\u003a" in raw or b"\\u003A" in raw or SURROGATE_ESCAPE_BYTES.search(raw)):
        return None
    if raw.count(b":") != encoded.count(b":"):
        return None  # a repeated key was dropped
    return (value,)


def _fast_parse(text: str, floats: list[str]) -> Any | None:
    """The common case at C speed (plain dicts, no pairs hook): None means "not sure" (a repeated
    key may have been dropped, or the text is invalid); the checking decoder then decides, and words
    the error. Integer literals still go through `_bounded_int` (cheaper than scanning the text)."""

    def parse_float(literal: str) -> float:
        floats.append(literal)
        return _finite_float(literal)

    try:
        value = json.loads(text, parse_constant=reject_constant, parse_float=parse_float, parse_int=_bounded_int)
    except (ValueError, RecursionError):
        return None
    return value if _members_match(text, value) else None


def parse_json_floats(text: str) -> tuple[Any, bool]:
    """parse_json, and whether the text had a float literal (the answer may then hold a float,
    which only the reference encoder writes canonically)."""
    sure = _strict_orjson(text)
    return (sure[0], False) if sure is not None else _reference_parse(text)


def _reference_parse(text: str) -> tuple[Any, bool]:
    """parse_json_floats without the orjson fast path: the stdlib decoder and its hooks decide."""
    floats: list[str] = []
    value = _fast_parse(text, floats)
    if value is None:
        floats.clear()

        def parse_float(literal: str) -> float:
            floats.append(literal)
            return _finite_float(literal)

        if text.startswith("\ufeff"):  # the decoder's own word for it would be "Expecting value"
            raise _json_invalid("input starts with a byte order mark (U+FEFF), which strict JSON text does not "
                                "have (RFC 8259 §8.1): save the file as UTF-8 without a BOM")
        decoder = json.JSONDecoder(object_pairs_hook=unique_members, parse_constant=reject_constant,
                                   parse_float=parse_float, parse_int=_bounded_int)
        try:
            value = decoder.decode(text)
        except (ValueError, RecursionError) as e:
            raise _json_invalid(f"input is not valid JSON: {e}") from e
    if _too_deep(value):
        raise _json_invalid(f"input nests deeper than {MAX_DEPTH} arrays/objects")
    if SURROGATE_ESCAPE.search(text) is not None:  # decoded UTF-8 holds none: only an escape makes one
        try:
            canonical_json(value)  # a \ud800 escape parses to a lone surrogate, which has no UTF-8 form
        except UnicodeEncodeError as e:
            raise _json_invalid(f"input has a lone surrogate {ascii(e.object[e.start:e.end])[1:-1]}") from e
        except ValueError as e:
            raise _json_invalid(f"input is not valid JSON: {e}") from e
    return value, bool(floats)


def parse_json(text: str) -> Any:
    """Strict RFC 8259 JSON whose value the canonical encoder accepts (records.md §5.1)."""
    return parse_json_floats(text)[0]


# --------------------------------------------------------------------------------------------------
# Answers
def describe(e: BaseException) -> str:
    try:
        return f"{type(e).__name__}: {e}"
    except Exception:  # an exception whose str() fails must still be reportable
        return type(e).__name__


def _error(e: QlwfError) -> dict[str, Any]:
    return {"error": {"class": e.error_class, "code": e.code, "message": one_line(f"{e.reason}: {e.message}")}}


def _internal(reason: str, e: BaseException) -> dict[str, Any]:
    return {"error": {"class": "Unavailable", "code": INTERNAL_ERROR, "message": one_line(f"{reason}: {describe(e)}")}}


def encode(answer: Any, pretty: bool = False, floats: bool = True) -> bytes:
    """`floats`: the answer may hold a float. Without one (the request text had no float literal and
    the model makes none) the fast encoder writes exactly the canonical bytes."""
    if pretty:
        return json.dumps(answer, ensure_ascii=False, indent=2, allow_nan=False).encode("utf-8") + b"\n"
    return (canonical_json(answer) if floats else plain_canonical_json(answer)) + b"\n"


def encode_answer(answer: Any, floats: bool = True) -> bytes:
    """One batch answer as a UTF-8 line; output the encoder refuses becomes an internal-error answer."""
    try:
        return encode(answer, floats=floats)
    except Exception as e:  # a model bug (its output is not JSON); the answer must still be one valid line
        return encode(_internal("answer_unencodable", e))


def parse_request(text: str) -> tuple[str, Any, bool]:
    """A batch line → (fn, input, had a float literal); every malformed line is Invalid."""
    if not text.strip(_JSON_WS):
        raise Invalid(ORACLE_REQUEST_INVALID, "request_invalid", 'blank line: a request is exactly {"fn", "input"}')
    return _request_parts(*parse_json_floats(text))


def _reference_request(text: str) -> tuple[str, Any, bool]:
    """parse_request for a line the strict fast path could not decide."""
    if not text.strip(_JSON_WS):
        raise Invalid(ORACLE_REQUEST_INVALID, "request_invalid", 'blank line: a request is exactly {"fn", "input"}')
    return _request_parts(*_reference_parse(text))


def _request_parts(request: Any, floats: bool) -> tuple[str, Any, bool]:
    if not isinstance(request, dict) or set(request) != {"fn", "input"}:
        raise Invalid(ORACLE_REQUEST_INVALID, "request_invalid", 'a request is exactly {"fn", "input"}')
    fn = request["fn"]
    if not isinstance(fn, str):
        raise Invalid(ORACLE_REQUEST_INVALID, "request_invalid", f"fn must be a string, not {type(fn).__name__}")
    return fn, request["input"], floats


def _answer(line: str | bytes) -> tuple[dict[str, Any], bool]:
    """answer_line, and whether the answer may hold a float (only when the request text had one).
    A raw line (bytes) is decided by the strict fast path when it can, else decoded and parsed by
    the reference path, which also words every error."""
    try:
        sure = _strict_orjson(line) if isinstance(line, bytes) else None
        if sure is not None:
            fn, inp, floats = _request_parts(sure[0], False)
        else:
            fn, inp, floats = parse_request(line) if isinstance(line, str) else _reference_request(decode_utf8(line))
        with parsed_json_input():  # the strict gate built `inp`: exact JSON types only
            return {"ok": consult(fn, inp).resolution}, floats
    except QlwfError as e:
        return _error(e), False
    except Exception as e:  # a bug in the model; answered, so that it cannot cost the other lines
        return _internal("internal_error", e), False


def answer_line(line: str) -> dict[str, Any]:
    """One batch request → {"ok": resolution} or {"error": {class, code, message}}."""
    return _answer(line)[0]


def answer_bytes(raw: bytes) -> bytes:
    """One raw batch line (with or without its newline) → one encoded answer line."""
    return encode_answer(*_answer(raw))


