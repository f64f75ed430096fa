"""The cold-resolution fast paths (issue 9 §4) agree with the reference paths they stand in for.

Each fast path may only decide what its reference decides, with the same value: the strict orjson
gate of `qlwf oracle` against the stdlib decoder with its hooks, on adversarial JSON texts
(repeated keys at depth, nesting at the limit, huge integers, unusual escapes, floats, non-JSON);
the batch answer bytes against the reference path's; the memo's trusted keys and its cold-streak
sampling against plain normalization; the inlined record and context checks against the rule
loops; the identifier hash against its layout (records.md §5.3).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from model_fixtures import make_plan, step_run_for
from qlwf.model import record_step_run as RS
from qlwf.model import records as R
from qlwf.model import speedups
from qlwf.model import steprun as S
from qlwf.model.canonical import canonical_json, id_hash, plain_canonical_json
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.oracle import consult
from qlwf.model.speedups import ExactMemo, flat_key, parsed_json_input, text_key

from qlwf.oracle import protocol

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MAX_DEPTH = protocol.MAX_DEPTH


# --------------------------------------------------------------------------------------------------
# Adversarial JSON texts, written character by character (so they can repeat keys and escape freely)
def _escape_char(c: str, how: int) -> str:
    """One character as JSON string content: raw where allowed, or a short or \\u escape (either case)."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "/": "\\/"}
    code = ord(c)
    if code > 0xFFFF:  # astral: raw, or as an escaped surrogate pair
        if how % 2 == 0:
            return c
        hi, lo = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        return f"\\u{hi:04x}\\u{lo:04X}"
    if how == 1 and c in short:
        return short[c]
    if how == 2 or code < 0x20 or c in '"\\':
        return f"\\u{code:04x}" if how != 3 else f"\\u{code:04X}"
    return c


_chars = st.characters(codec="utf-8") | st.sampled_from([*list(':"\\/\x00\x1f\x7f\u2028é😀'), "\U0010ffff"])


@st.composite
def json_strings(draw: st.DrawFn) -> str:
    chars = draw(st.lists(_chars, max_size=8))
    body = "".join(_escape_char(c, draw(st.integers(0, 3))) for c in chars)
    # Escapes the reference treats specially: lone surrogates (invalid) and an escaped colon.
    body += draw(st.sampled_from(["", "", "", "\\ud800", "\\udc00x", "\\u003a", "\\u003A", "\\ud83d\\ude00"]))
    return '"' + body + '"'


numbers = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "-0", "18446744073709551615", "18446744073709551616", "-9223372036854775809",
                     "1" + "0" * 308, "1" + "0" * 309, "1.5", "-0.0", "1e16", "1E400", "2e-3", "1E5"]),
)
scalars = st.one_of(numbers, st.sampled_from(["true", "false", "null"]), json_strings(),
                    st.sampled_from(["NaN", "Infinity", "-Infinity", "01", "1.", "tru", "'x'"]))
keys = st.sampled_from(['"a"', '"b"', '"a:"', '":"', '"\\u0061"', '"k"']) | json_strings()
space = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n", "\x0c", "\u00a0"])


@st.composite
def _container(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    items = draw(st.lists(inner, max_size=4))
    sep, colon = draw(space), draw(st.sampled_from([":", ": ", " :"]))
    if draw(st.booleans()):
        return "[" + ("," + sep).join(items) + "]"
    members = [draw(keys) + colon + item for item in items]
    return "{" + sep + ("," + sep).join(members) + "}"


json_texts = st.recursive(scalars, lambda inner: _container(inner), max_leaves=12)


@st.composite
def deep_texts(draw: st.DrawFn) -> str:
    """Nesting around the limit, with the interesting part (a repeated key, a float) innermost."""
    depth = draw(st.integers(MAX_DEPTH - 2, MAX_DEPTH + 2))
    core = draw(st.sampled_from(["1", '{"a":1,"a":2}', '{"a":1}', "[1.5]", '"x"', "[]"]))
    text = core
    for _ in range(depth - (core[0] in "[{")):
        text = draw(st.sampled_from(["[{}]", '{{"k":{}}}', '{{"k":0,"k2":{}}}'])).format(text)
    return text


def reference(text: str) -> tuple[Literal["ok"], Any, bool] | tuple[Literal["invalid"], str]:
    try:
        value, floats = protocol._reference_parse(text)
    except Invalid as e:
        return ("invalid", e.message)
    return ("ok", value, floats)


def exactly(a: Any, b: Any) -> bool:
    """Equal as JSON values AND as Python values: same types (1, 1.0 and True differ), same key order."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(exactly(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(exactly(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def check_agreement(text: str) -> None:
    fast = protocol._strict_orjson(text.encode("utf-8"))
    want = reference(text)
    if fast is not None:  # the fast path decided: the reference accepts the same value, with no float
        assert want[0] == "ok", (text, want)
        assert want[2] is False and exactly(fast[0], want[1]), text
    # And the public parser (fast path first) answers exactly like the reference, errors included.
    try:
        got: Any = ("ok", *protocol.parse_json_floats(text))
    except Invalid as e:
        got = ("invalid", e.message)
    assert got[0] == want[0] and (exactly(got[1], want[1]) if got[0] == "ok" else got[1] == want[1]), text
    if want[0] == "ok":  # and so is got[0]
        assert got[2] == want[2]


@given(json_texts, space, space)
def test_strict_fast_parser_agrees_with_the_reference(text: str, before: str, after: str) -> None:
    check_agreement(before + text + after)


@given(deep_texts())
def test_strict_fast_parser_agrees_at_the_depth_limit(text: str) -> None:
    check_agreement(text)


@pytest.mark.parametrize("text", [
    '{"a":{"b":{"c":1,"c":2}}}', '[{"x":[{"k":"v","k":"v"}]}]', '{"a":1,"b":{"a":1},"a":1}',
    '{"k":"a:b","k":"a:b"}', '{"\\u003a":1,":":2}', '{"a":"\\u003a","a":":"}', '{"a":1, "a":1}',
    "[" * MAX_DEPTH + "]" * MAX_DEPTH, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    "[" * 2000 + "]" * 2000, '{"n":' + "9" * 400 + "}", '{"n":' + "9" * 30 + "}", '{"n":1E400}',
    '{"s":"\\ud800"}', '{"s":"\\udfff\\ud800"}', '{"s":"\\ud83d\\ude00"}', '{"s":"\\u0000\\/\\u2028"}',
    '\ufeff{"a":1}', '{"a":1}\n', '{"a":1}\r\n', ' {"a":1} ', '{"a":NaN}', '{"a":-Infinity}', "",
])
def test_adversarial_examples_agree(text: str) -> None:
    check_agreement(text)


def test_repeated_keys_the_length_proof_would_miss_are_still_found() -> None:
    """A repeated key in a text that is not the shortest encoding (spaces, escapes) goes to the
    colon count; where that cannot be trusted (an escaped colon) to the reference."""
    for text in ('{"a": 1, "a": 1}', '{"a":"\\u0041","a":"A"}', '{"a:":1,"a:":1, "b":2}', '{"\\u003a":1,"\\u003a":1}'):
        assert protocol._strict_orjson(text.encode()) is None
        with pytest.raises(Invalid, match="duplicate key"):
            protocol.parse_json(text)


# --------------------------------------------------------------------------------------------------
# Batch answers: the fast path writes exactly the reference path's bytes
def example_requests() -> list[tuple[str, Any]]:
    lines = (EXAMPLES / "batch.jsonl").read_text(encoding="utf-8").splitlines()
    return [(r["fn"], r["input"]) for r in map(json.loads, lines)]


@pytest.mark.parametrize("compact", [True, False])
def test_batch_answers_are_the_reference_bytes(compact: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    separators = (",", ":") if compact else None
    for fn, inp in example_requests():
        raw = (json.dumps({"fn": fn, "input": inp}, ensure_ascii=False, separators=separators) + "\n").encode()
        if compact:  # canonical-style lines are decided by the fast path alone (the length proof)
            assert protocol._strict_orjson(raw) is not None
        fast = protocol.answer_bytes(raw)
        try:  # the model itself on the parsed input, without the oracle's trust in it
            expected = canonical_json({"ok": consult(fn, json.loads(raw)["input"]).resolution}) + b"\n"
        except QlwfError as e:
            expected = canonical_json(protocol._error(e)) + b"\n"
        with monkeypatch.context() as m:
            m.setattr(protocol, "_orjson", None)  # every line through the stdlib reference path
            slow = protocol.answer_bytes(raw)
        assert fast == slow == expected


# --------------------------------------------------------------------------------------------------
# The memo: trusted keys and cold-streak sampling change no answer
PLAN = make_plan({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
plain_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


@given(plain_values)
def test_trusted_keys_equal_the_checked_keys_on_parsed_values(value: Any) -> None:
    value = json.loads(json.dumps(value))  # built by a JSON parser, as the oracle's inputs are
    with parsed_json_input():
        trusted = (text_key(value), flat_key(value) if type(value) is dict else None)
    assert trusted[0] == text_key(value)
    if trusted[1] is not None and flat_key(value) is not None:
        assert trusted[1] == flat_key(value)


def test_trust_is_scoped_to_the_block_and_the_thread() -> None:
    with parsed_json_input():
        pass
    assert text_key((1, 2)) is None  # outside the block a tuple is not plain JSON again


def distinct_step_runs(n: int) -> list[Any]:
    base = step_run_for(PLAN, "a", "ready", t=2000)
    out = []
    for i in range(n):
        s = {**base, "lastMutationId": f"m-{i}"}
        s["stepRunDigest"] = R.step_run_digest(s)
        out.append(s)
    return out


def test_a_cold_memo_samples_and_resumes_keying_on_a_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speedups, "COLD_STREAK", 8)
    calls: list[Any] = []

    def counting(x: Any) -> dict[str, Any]:
        calls.append(x)
        return R.normalize_step_run(x)

    memo = ExactMemo(counting, 64, key=flat_key)
    inputs = distinct_step_runs(12)
    for x in inputs[:8]:  # eight misses in a row: the memo is cold
        assert memo(x) == R.normalize_step_run(x)
    assert memo.misses_in_a_row == 8 and len(memo) == 8
    stored = inputs[0]
    results = [memo(copy.deepcopy(stored)) for _ in range(speedups.SAMPLE_EVERY)]
    assert all(r == R.normalize_step_run(stored) for r in results)  # bypassed or hit: the same record
    assert memo.misses_in_a_row == 0  # the sampled call hit, so every call is keyed again
    before = len(calls)
    first = memo(stored)
    assert memo(copy.deepcopy(stored)) is first and len(calls) == before


def test_bypassed_calls_still_fail_with_the_normalizers_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speedups, "COLD_STREAK", 2)
    memo = ExactMemo(R.normalize_step_run, 64, key=flat_key)
    for x in distinct_step_runs(3):
        memo(x)
    bad = {**distinct_step_runs(1)[0], "version": True}
    for _ in range(2 * speedups.SAMPLE_EVERY):
        with pytest.raises(Invalid) as e:
            memo(bad)
        assert e.value.message == "StepRun version is invalid"


# --------------------------------------------------------------------------------------------------
# Inlined record and context checks decide exactly like the rule loops
ODD_VALUES: list[object] = [None, True, False, 0, 1, -1, 2**31, 2**53, 1.0, "", "x", "a" * 129, "é", "ab\x00cd", " ",
              "a" * 64, "0" * 64, "A" * 64, "g" * 64, "pending", "task", "qinglong/step-run@v1", [], {}]


@given(st.sampled_from(R.STEP_RUN_KEYS), st.sampled_from(ODD_VALUES),
       st.sampled_from(["pending", "ready", "running", "succeeded", "failed"]))
def test_step_values_check_equals_the_rule_loop(key: str, value: Any, status: str) -> None:
    s = {**step_run_for(PLAN, "b", status, t=2100), key: value}
    rules = all(rule(s[k]) for k, rule in RS._STEP_RULES)
    assert speedups.step_values_ok(RS._STEP_VALUES(s)) is rules


@given(st.sampled_from((*S.CONTEXT_KEYS, "actor.type", "actor.id", "actor.extra")), st.sampled_from(ODD_VALUES))
def test_context_check_equals_the_checking_path(key: str, value: Any) -> None:
    c: dict[str, Any] = {"expectedRunVersion": 3, "expectedRunEventSequence": 4, "eventId": "e-1", "dedupeKey": "e-1",
                         "actor": {"type": "reconciler"}}
    if key.startswith("actor."):
        c["actor"] = {**c["actor"], key.split(".")[1]: value}
    else:
        c[key] = value
    try:
        with speedups.plain_model():
            S._check_context(c)
        passes = True
    except Invalid:
        passes = False
    fused = type(c) is dict and c.keys() == S._CONTEXT_KEYSET and speedups.context_values_ok(S._CONTEXT_VALUES(c))
    assert fused is passes


def test_invariants_of_a_terminal_step_run_without_finished_at_are_still_reported() -> None:
    s = step_run_for(PLAN, "b", "succeeded", t=2100)
    assert R.step_run_invariant_violation({**s, "finishedAtMs": None}) == "succeeded StepRun must have finishedAtMs"


@given(st.lists(st.text(max_size=5) | st.integers(-(2**70), 2**70), max_size=6), st.text(max_size=8))
def test_id_hash_keeps_its_layout(fields: list[Any], domain: str) -> None:
    try:
        layout = b"\x00".join([domain.encode(), *(str(f).encode() for f in fields)])
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            id_hash(domain, *fields)
        return
    assert id_hash(domain, *fields) == hashlib.sha256(layout).hexdigest()
    with pytest.raises(TypeError):
        id_hash(domain, *fields, True)


def test_plain_encoder_still_the_canonical_one_for_step_runs() -> None:
    s = step_run_for(PLAN, "c", "running", t=2200)
    assert plain_canonical_json(s) == canonical_json(s)
