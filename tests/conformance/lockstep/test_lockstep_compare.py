"""Record-by-record snapshot comparison with remembered exact pairs (conformance/lockstep/compare.py
ExactKinds, decisions Q-64) against the comparison of whole kinds it replaced: `==` of the kinds'
lists, then their orjson texts. Same answers on any values, whatever was compared before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from qlwf.conformance.lockstep import compare as lockstep
from qlwf.conformance.lockstep.compare import ExactKinds
from qlwf.model.state import TABLES

# Values `==` confuses (1, 1.0, True; 0.0, -0.0), values orjson cannot write (beyond 64 bits, a lone
# surrogate), nesting, and key orders.
scalars = st.sampled_from([0, 1, 1.0, True, False, 0.0, -0.0, None, "a", "b", 1 << 64, "\ud800", 2])
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3), max_leaves=8)
records = st.dictionaries(st.sampled_from(["id", "version", "payload", "status"]), values, min_size=1, max_size=4)


def _twin(value: Any) -> Any:
    """A value `==` takes for `value` but JSON does not: 1 → True → 1.0 → 1, 0.0 ↔ -0.0, keys reversed."""
    if type(value) is dict:
        return {k: _twin(value[k]) for k in reversed(value)}
    if type(value) is list:
        return [_twin(v) for v in value]
    twins: dict[type, Callable[[Any], Any]] = {int: lambda v: True if v == 1 else float(v) if v in (0, 2) else v,
                                               bool: float, float: lambda v: -v if v == 0 else int(v)}
    return twins.get(type(value), lambda v: v)(value)


def _text(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def _whole_kinds(kinds: Any, model: dict[str, Any], backend: dict[str, Any]) -> tuple[bool, set[str]]:
    """The comparison before Q-64: `==` of each kind, then exact iff the kinds' texts are equal."""
    if any(model[k] != backend[k] for k in kinds):
        return False, set()
    return True, {k for k in kinds if _text(model[k]) is None or _text(model[k]) != _text(backend[k])}


@settings(max_examples=300)
@given(st.lists(records, max_size=6), st.data())
def test_record_by_record_comparison_answers_like_whole_kinds(records: list[dict[str, Any]], data: Any) -> None:
    """A trace's worth of comparisons: each step pairs records drawn from a shared pool (so pairs
    recur as the very same objects, as unchanged records do) and compares them like a lockstep step.
    The pool holds each record's twin too, equal to it for `==` and not for JSON."""
    pool = [r for record in records for r in (record, _twin(record))]
    assert all(_twin(r) == r for r in pool)
    exact = ExactKinds()
    inexact = set(TABLES)
    for _ in range(data.draw(st.integers(1, 5))):
        model, backend = {}, {}
        for kind in ("runs", "events"):
            if pool:
                picks = data.draw(st.lists(st.sampled_from(range(len(pool))), max_size=4))
                model[kind] = [pool[i] for i in picks]
                # the backend: the same records, copies of them, or others of the pool
                backend[kind] = [data.draw(st.sampled_from([pool[i], dict(pool[i]), *pool])) for i in picks]
                if data.draw(st.booleans()):
                    backend[kind] = backend[kind][:-1]
            else:
                model[kind], backend[kind] = [], []
        kinds = data.draw(st.sampled_from([("runs",), ("events",), ("runs", "events")]))
        equal, newly_inexact = _whole_kinds(kinds, model, backend)
        assert exact.compare(kinds, model, backend) is equal
        if equal:
            inexact = (inexact - set(kinds)) | newly_inexact
        assert exact.inexact == inexact


def test_a_kind_of_another_type_than_a_list_is_compared_whole() -> None:
    exact = ExactKinds()
    # A tuple where a Snapshot holds a list: deliberately outside the type, to check it is compared whole.
    assert not exact.compare(("runs",), {"runs": [{"id": 1}]}, {"runs": ({"id": 1},)})  # type: ignore[dict-item]
    assert exact.compare(("runs",), {"runs": ({"id": 1},)}, {"runs": ({"id": 1},)})  # type: ignore[dict-item]
    assert "runs" not in exact.inexact


def test_a_pair_found_exact_is_not_encoded_again(monkeypatch: Any) -> None:
    calls: list[Any] = []
    real = lockstep._exact_text

    def counting(value: Any) -> bytes | None:
        calls.append(value)
        return real(value)

    monkeypatch.setattr(lockstep, "_exact_text", counting)
    exact = ExactKinds()
    old, new = {"id": "a", "v": 1}, {"id": "b", "v": 2}
    theirs_old, theirs_new = dict(old), dict(new)
    assert exact.compare(("runs",), {"runs": [old]}, {"runs": [theirs_old]})
    assert len(calls) == 2
    assert exact.compare(("runs",), {"runs": [old, new]}, {"runs": [theirs_old, theirs_new]})
    assert len(calls) == 4  # only the new pair
    assert exact.compare(("runs",), {"runs": [old]}, {"runs": [dict(old)]})  # another object: encoded
    assert len(calls) == 6 and exact.all_exact() is False  # the other kinds were never compared
