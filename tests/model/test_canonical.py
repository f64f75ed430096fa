"""The fast canonical encoder (orjson) writes exactly the reference bytes of records.md §5.1.

plain_canonical_json may only replace canonical_json if the two agree byte for byte on every value
its callers can pass it (dicts with str keys, lists, str, int, bool, None; no floats), and if
whatever orjson refuses still gets the reference's bytes or exception.
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qlwf.model import canonical, strict_json
from qlwf.model.canonical import canonical_json, plain_canonical_json
from qlwf.model.errors import Invalid

from qlwf.oracle import protocol

# Every code point class that §5.1 treats specially: C0 controls, `"`, `\`, `/`, DEL, the
# JSON-hostile separators U+2028/9, BMP and astral non-ASCII.
_SPECIAL = "".join(chr(c) for c in range(0x20)) + '"\\/\x7f\u2028\u2029é中😀\U0010ffff'
text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(_SPECIAL), max_size=40)
integers = st.integers(min_value=-(2**64), max_value=2**65) | st.sampled_from([0, -1, 2**53 - 1, 2**63, 2**64 - 1])
plain_json = st.recursive(
    st.none() | st.booleans() | integers | text,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(text, inner, max_size=6),
    max_leaves=40,
)


def reference(value: Any) -> bytes:
    """records.md §5.1 literally: the Python equivalent the spec names."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@given(plain_json)
def test_fast_encoder_writes_the_reference_bytes(value: Any) -> None:
    assert plain_canonical_json(value) == canonical_json(value) == reference(value)


def test_orjson_is_in_use_where_installed() -> None:
    pytest.importorskip("orjson")
    assert canonical._orjson is not None  # otherwise the byte comparison above proves nothing about it


@given(plain_json)
def test_pure_fallback_without_orjson(value: Any) -> None:
    saved = canonical._orjson
    canonical._orjson = None
    try:
        assert plain_canonical_json(value) == reference(value)
    finally:
        canonical._orjson = saved


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


class Text(str):
    pass


class Number(int):
    pass


@pytest.mark.parametrize("value", [
    {"k": Text("sub")}, [Number(7)], {"big": 2**64}, {"neg": -(2**63) - 1}, (1, "two"), {1: "int key"},
    {"deep": _nested(300)},  # deeper than orjson's recursion limit
])
def test_values_orjson_refuses_get_the_reference_bytes(value: Any) -> None:
    assert plain_canonical_json(value) == canonical_json(value)


@pytest.mark.parametrize("value", ["\ud800", {"k": ["\udfff"]}])
def test_lone_surrogates_still_raise_like_the_reference(value: Any) -> None:
    with pytest.raises(UnicodeEncodeError):
        canonical_json(value)
    with pytest.raises(UnicodeEncodeError):
        plain_canonical_json(value)


@pytest.mark.parametrize("literal, has_float", [
    ("1", False), ("-0", False), ("123456789012345678901234567890", False), ('"1.5e3"', False),
    ("1.5", True), ("-0.0", True), ("1e16", True), ("2e-3", True),
])
def test_batch_answers_with_a_float_literal_use_the_reference_encoder(literal: str, has_float: bool) -> None:
    """Floats are the one plain value orjson writes differently (1e16 vs 1e+16): the batch encoder
    must see every float literal of a request, wherever it sits."""
    value, floats = protocol.parse_json_floats('{"a":[{"b":' + literal + "}]}")
    assert floats is has_float
    assert value == json.loads('{"a":[{"b":' + literal + "}]}")


def test_a_float_beyond_a_double_is_invalid_not_infinity() -> None:
    with pytest.raises(Exception, match="overflows a double"):
        protocol.parse_json_floats('{"a":[{"b":1E400}]}')


def test_duplicate_keys_are_named_like_before() -> None:
    with pytest.raises(Exception, match=r"duplicate key 'b'"):
        protocol.parse_json('{"a":1,"b":2,"c":{"b":1},"b":3,"a":4}')


@pytest.mark.parametrize("text", [
    '{"a":1,"a":2}', '{"x":{"k":"v:w","k":"z"}}', '[{"a":{"b":1}},{"c":2,"c":{"d":3}}]',
    '{"a":"\\u003a","b":1,"b":2}', '{"a":"\\u003A:","a":1}', '{"a":1,"a":2} x', '{"a":1,"a":2,"n":NaN}',
    '{"a":[1,2,3],"b":"::","a":[1,2,3]}',
])
def test_repeated_keys_are_found_wherever_they_are(text: str) -> None:
    """The fast path parses into plain dicts and must still see every repeated key, and report
    exactly the error the checking hook reports."""
    with pytest.raises(Invalid) as fast:
        protocol.parse_json(text)
    try:
        json.loads(text, object_pairs_hook=strict_json.unique_members, parse_constant=strict_json.reject_constant)
    except ValueError as e:
        assert fast.value.message == f"input is not valid JSON: {e}"
    else:
        pytest.fail("the reference parse accepted it")


json_text = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5),
    max_leaves=30,
)


@given(json_text, st.booleans())
def test_parse_matches_the_checking_parser(value: Any, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only)
    got, floats = protocol.parse_json_floats(raw)
    want = json.loads(raw, object_pairs_hook=strict_json.unique_members)
    assert got == want and list(_walk_keys(got)) == list(_walk_keys(want))
    assert floats is _has_float(value)


def _has_float(x: Any) -> bool:
    if type(x) is float:
        return True
    if type(x) is dict:
        return any(_has_float(v) for v in x.values())
    return type(x) is list and any(_has_float(v) for v in x)


def _walk_keys(x: Any) -> Any:
    if type(x) is dict:
        for k, v in x.items():
            yield k
            yield from _walk_keys(v)
    elif type(x) is list:
        for v in x:
            yield from _walk_keys(v)


# canonical_json takes orjson's path only on the plain domain (_plain); everything else must give the
# reference's bytes or its exception, whatever it contains.
class Colour(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


class Mapping(dict):  # type: ignore[type-arg]
    pass


@dataclasses.dataclass
class Point:
    x: int


anything = st.recursive(
    st.none() | st.booleans() | integers | text | st.floats() | st.sampled_from(
        [Text("s"), Number(5), Colour.RED, Level.HIGH, uuid.UUID(int=7), Point(1), b"raw", 1.0, -0.0, 1e16, 2e-5,
         float("nan"), float("inf"), decimal.Decimal("1.5"), {1, 2}]),
    lambda inner: (st.lists(inner, max_size=5) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(text | st.sampled_from([1, 2.5, True, None, Text("sk")]), inner, max_size=5)
                   | st.dictionaries(text, inner, max_size=3).map(Mapping)),
    max_leaves=30,
)


def _outcome(encode: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", encode(value)
    except Exception as e:  # the exception's type and text are what is compared
        return type(e).__name__, str(e)


@given(anything)
def test_canonical_json_is_the_reference_on_any_value(value: Any) -> None:
    assert _outcome(canonical_json, value) == _outcome(canonical.reference_canonical_json, value)


@given(plain_json)
def test_canonical_json_takes_the_fast_path_on_plain_values(value: Any) -> None:
    assert canonical._plain(value)  # otherwise the comparison above never exercised orjson


@pytest.mark.parametrize("value", [
    1.0, [1, [2.5]], {"a": {"b": [float("nan")]}}, Colour.RED, {"u": uuid.UUID(int=1)}, [Point(2)], Text("x"),
    {"m": Mapping(a=1)}, [Number(3)], {"d": decimal.Decimal(1)}, _nested(100),
])
def test_values_outside_the_plain_domain_are_not_plain(value: Any) -> None:
    assert not canonical._plain(value)


def test_values_that_contain_themselves_raise_like_the_reference() -> None:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    assert _outcome(canonical_json, loop) == _outcome(canonical.reference_canonical_json, loop)
    assert _outcome(canonical_json, loop)[0] == "ValueError"


@pytest.mark.parametrize("value", [{"big": 2**64}, {Text("k"): 1}, {1: "int key"}, ["\ud800"], _nested(63)])
def test_plain_values_orjson_refuses_fall_back_to_the_reference(value: Any) -> None:
    assert canonical._plain(value)
    assert _outcome(canonical_json, value) == _outcome(canonical.reference_canonical_json, value)
