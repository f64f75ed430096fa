"""model/strict_json.py (decisions Q-115): what qlwf reads from outside is strict JSON text.

Traces, driver responses and driver requests used to go through `json.loads`, which keeps the last
of two members with one name and decodes an escaped lone surrogate; the oracle already refused both
(Q-12). One reader now refuses them everywhere, and loses nothing `json.dumps` writes."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qlwf.impl.driver_protocol import serve
from qlwf.impl.sqlite.driver import MemoryStores
from qlwf.model import strict_json

# Every JSON value whose strings are Unicode scalar values (what UTF-8 can carry).
SCALARS = st.characters(exclude_categories=["Cs"])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(SCALARS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(SCALARS, max_size=6), inner, max_size=4),
    max_leaves=20)


@given(JSON_VALUES, st.booleans())
def test_whatever_json_dumps_writes_reads_back_unchanged(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert strict_json.loads(text) == value
    assert strict_json.loads(text.encode()) == value


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('[{"x": {"b": 1, "c": 2, "b": 3}}]', "duplicate key 'b'"),
    ('{"a": "\\ud800"}', "lone surrogate \\ud800"),
    ('{"\\udc00": 1}', "lone surrogate \\udc00"),  # in a name, too
    ('["\\ude00\\ud83d"]', "lone surrogate \\ude00"),  # a pair in the wrong order is two lone halves
    ("[NaN]", "non-finite number NaN"),
    ('{"a": -Infinity}', "non-finite number -Infinity"),
    ("[" * 100_000 + "]" * 100_000, "nests deeper than the JSON decoder's limit"),
    ("[1,]", "Expecting value"),
])
def test_what_json_loads_would_let_two_readers_see_differently_is_refused(text: str, message: str) -> None:
    for data in (text, text.encode()):
        with pytest.raises(ValueError) as raised:
            strict_json.loads(data)
        assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_surrogate_pair_is_one_character_not_a_lone_surrogate() -> None:
    assert strict_json.loads('["\\ud83d\\ude00"]') == ["\U0001F600"]


def test_the_reference_driver_answers_an_ambiguous_request_with_a_failure_and_keeps_serving() -> None:
    requests = b"".join(line + b"\n" for line in (
        b'{"id": 1, "type": "hello", "protocol": "qlwf-backend@1", "id": 2}',
        b'{"id": 1, "type": "reset", "x": "\\udfff"}',
        b'{"id": 1, "type": "hello", "protocol": "qlwf-backend@1"}',
        b'{"id": 2, "type": "close"}'))
    out = io.BytesIO()
    assert serve(MemoryStores(), name="t", version="0", stdin=io.BytesIO(requests), stdout=out) == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a["type"] for a in answers] == ["failure", "failure", "hello", "close"]
    assert "duplicate key 'id'" in answers[0]["failure"]["message"]
    assert "lone surrogate \\udfff" in answers[1]["failure"]["message"]
