"""The exact-input memo (model/speedups.py, decisions Q-7): thread-safe, bounded, exact, never raising.

The memo is process-global and used from the PostgreSQL adapter's worker threads; an input it
cannot key (NaN, infinity, a lone surrogate) must reach the normalizer, which reports its typed
Invalid error, instead of escaping as another exception.
"""

from __future__ import annotations

import copy
import random
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from model_fixtures import (
    CANCELLATION,
    FRONTIER,
    PLAN_INVALID,
    STEP_RUN_INVALID,
    Record,
    cancelling_run,
    make_plan,
    make_run,
    reversed_keys,
    step_run_for,
)
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.oracle import consult
from qlwf.model.records import normalize_step_run
from qlwf.model.speedups import ExactMemo, IdentityMemo, flat_key, text_key, trusting_record_identity

SEED = 20261201
PLAN = make_plan({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
OBS = 9000


@pytest.fixture
def tight_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so races show up in a short test."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def outcome(fn: Callable[[Any], Record], x: Any) -> Any:
    """The normalized record, or the identity and message of the typed error."""
    try:
        return fn(x)
    except QlwfError as e:
        return ("error", type(e).__name__, e.code, e.reason, e.message)


def step_run_inputs() -> list[Any]:
    """Valid StepRuns in several states and key orders, and a few invalid ones (not cached)."""
    out: list[Any] = []
    for key in ("a", "b", "c", "d"):
        for t, status in enumerate(("pending", "ready", "running", "succeeded", "failed")):
            s = step_run_for(PLAN, key, status, t=2000 + t)
            out += [s, reversed_keys(s)]
    bad = copy.deepcopy(out[0])
    bad["stepRunDigest"] = "0" * 64
    out += [bad, {**out[1], "version": True}, {**out[2], "createdAtMs": 1.0}]
    return out


@pytest.mark.parametrize("key", [flat_key, text_key])
def test_memo_hammered_from_threads_stays_exact_and_bounded(key: Any, tight_switching: None) -> None:
    inputs = step_run_inputs()
    expected = [outcome(normalize_step_run, x) for x in inputs]
    size = 8  # far fewer entries than distinct inputs: constant eviction under contention
    memo = ExactMemo(normalize_step_run, size, key=key)
    failures: list[str] = []
    n_threads, calls = 8, 3000

    def worker(i: int) -> None:
        rng = random.Random(SEED + i)
        for _ in range(calls):
            j = rng.randrange(len(inputs))
            try:
                got = outcome(memo, inputs[j])
            except Exception as e:  # anything but a typed error is a memo failure
                failures.append(f"input {j}: {type(e).__name__}: {e}")
                return
            if got != expected[j]:
                failures.append(f"input {j}: {got!r} != {expected[j]!r}")
                return
            if len(memo) > size:
                failures.append(f"memo holds {len(memo)} > {size} entries")
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert 0 < len(memo) <= size


def test_memo_hit_returns_the_cached_record_and_keys_are_exact() -> None:
    memo = ExactMemo(normalize_step_run, 4, key=flat_key)
    s = step_run_for(PLAN, "a", "ready")
    first = memo(s)
    assert memo(copy.deepcopy(s)) is first  # a hit
    assert memo(reversed_keys(s)) is not first  # another key order is another input
    with pytest.raises(Invalid):
        memo({**s, "version": True})  # True == 1, but it is not the same JSON value
    with pytest.raises(Invalid):
        memo({**s, "attemptCount": 0.0})


class CountingKey:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: Any) -> Any:
        self.calls += 1
        return flat_key(x)


def test_trusted_identity_answers_the_same_object_without_keying_it() -> None:
    key = CountingKey()
    memo = ExactMemo(normalize_step_run, 4, key=key)
    s = step_run_for(PLAN, "a", "ready")
    with trusting_record_identity():
        first = memo(s)
        assert memo(s) is first and key.calls == 1  # the very same object: no key built
        assert memo(copy.deepcopy(s)) is first and key.calls == 2  # an equal copy: keyed, a text hit


def test_outside_trust_a_record_changed_in_place_is_normalized_again() -> None:
    memo = ExactMemo(normalize_step_run, 4, key=flat_key)
    s = step_run_for(PLAN, "a", "ready")
    with trusting_record_identity():
        memo(s)
    s["version"] = True  # what only a caller breaking the scope's promise does
    with trusting_record_identity(False), pytest.raises(Invalid):
        memo(s)
    with pytest.raises(Invalid):
        memo(s)


def test_trusted_identity_never_remembers_a_failure_and_stays_bounded() -> None:
    memo = ExactMemo(normalize_step_run, 3, key=flat_key)
    bad = {**step_run_for(PLAN, "a", "ready"), "stepRunDigest": "0" * 64}
    records = [step_run_for(PLAN, k, "pending") for k in "abcd"] * 2
    with trusting_record_identity():
        for _ in range(2):
            with pytest.raises(Invalid):
                memo(bad)
        for r in records:
            assert memo(r) == normalize_step_run(r)
    assert len(memo._by_identity) <= 3


def test_memo_evicts_least_recently_used() -> None:
    memo = ExactMemo(normalize_step_run, 2, key=flat_key)
    a, b, c = (step_run_for(PLAN, k, "pending") for k in ("a", "b", "c"))
    ra = memo(a)
    memo(b)
    memo(a)  # a is now the most recent
    memo(c)  # evicts b
    assert len(memo) == 2
    assert memo(a) is ra
    assert flat_key(b) not in memo.entries


UNKEYABLE = [float("inf"), float("-inf"), float("nan"), "\ud800", "x\udfff"]


@pytest.mark.parametrize("bad", UNKEYABLE, ids=repr)
@pytest.mark.parametrize("key", [flat_key, text_key])
def test_unkeyable_input_reaches_the_normalizer(bad: Any, key: Any) -> None:
    memo = ExactMemo(normalize_step_run, 4, key=key)
    s = step_run_for(PLAN, "a", "ready")
    for field in ("id", "createdAtMs", "errorSummary"):
        with pytest.raises(Invalid) as e:
            memo({**s, field: bad})
        assert e.value.code == STEP_RUN_INVALID
    assert len(memo) == 0


def _frontier_cases(bad: Any) -> Iterator[tuple[str, Any, set[str]]]:
    steps = [step_run_for(PLAN, k, "succeeded" if k == "a" else "pending", t=2000) for k in ("a", "b", "c", "d")]
    base: Record = {"plan": PLAN, "run": make_run(PLAN, version=20), "stepRuns": steps, "observedAtMs": OBS}
    codes = {FRONTIER[0], PLAN_INVALID}
    for field in ("createdAtMs", "id", "errorSummary", "stepRunDigest"):
        snap = copy.deepcopy(base)
        snap["stepRuns"][1][field] = bad
        yield "frontier", snap, codes
    for path in (("plannedAtMs",), ("planId",), ("target", "projectId"), ("target", "generation")):
        snap = copy.deepcopy(base)
        node = snap["plan"]
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = bad
        yield "frontier", snap, codes
    snap = copy.deepcopy(base)
    snap["plan"]["steps"][1]["needs"] = [bad]
    yield "frontier", snap, codes


def _cancel_cases(bad: Any) -> Iterator[tuple[str, Any, set[str]]]:
    steps = [step_run_for(PLAN, k, "pending", t=2000) for k in ("a", "b", "c", "d")]
    base: Record = {"run": cancelling_run(PLAN, "user", 5000, version=10), "stepRuns": steps,
                    "activeTaskAttempts": [], "observedAtMs": OBS}
    for field in ("updatedAtMs", "runId", "definitionRef", "version"):
        snap = copy.deepcopy(base)
        snap["stepRuns"][2][field] = bad
        yield "cancel", snap, {CANCELLATION[0]}
    snap = copy.deepcopy(base)
    snap["run"]["version"] = bad
    yield "cancel", snap, {CANCELLATION[0]}


def _transition_cases(bad: Any) -> Iterator[tuple[str, Any, set[str]]]:
    s = step_run_for(PLAN, "a", "ready", t=2000)
    base = {"current": s,
            "command": {"expectedVersion": s["version"], "expectedDigest": s["stepRunDigest"], "mutationId": "m-1",
                        "to": "running", "atMs": 3000},
            "context": {"expectedRunVersion": 7, "expectedRunEventSequence": 7, "eventId": "e-1", "dedupeKey": "e-1",
                        "actor": {"type": "worker", "id": "w1"}}}
    for part, field in (("current", "readyAtMs"), ("current", "lastMutationId"), ("command", "atMs"),
                        ("command", "mutationId"), ("context", "expectedRunVersion"), ("context", "eventId")):
        inp = copy.deepcopy(base)
        inp[part][field] = bad
        yield "step-transition", inp, {STEP_RUN_INVALID}


@pytest.mark.parametrize("bad", UNKEYABLE, ids=repr)
def test_non_json_values_give_the_typed_invalid_error_from_the_oracle(bad: Any) -> None:
    cases = [*_frontier_cases(bad), *_cancel_cases(bad), *_transition_cases(bad)]
    for fn, inp, codes in cases:
        for attempt in ("cold", "again"):  # the second call would hit a wrongly filled memo
            try:
                consult(fn, inp)
            except Invalid as e:
                assert e.code in codes, (fn, attempt, e)
                continue
            except Exception as e:
                pytest.fail(f"{fn} ({attempt}) raised {type(e).__name__}: {e}, not a typed Invalid error")
            pytest.fail(f"{fn} ({attempt}) accepted a non-JSON value {bad!r}")


def test_identity_memo_answers_the_same_objects_only_within_trusted_identity() -> None:
    calls: list[tuple[Any, ...]] = []

    def problem(a: dict[str, Any], b: dict[str, Any] | None) -> str | None:
        calls.append((a, b))
        return None if b is None or a["id"] == b["id"] else f"{a['id']} != {b['id']}"

    memo = IdentityMemo(size=3)
    a, b = {"id": "x"}, {"id": "y"}
    assert memo(problem, a, b) == "x != y" and memo(problem, a, b) == "x != y"
    assert len(calls) == 2  # outside the scope every call computes
    with trusting_record_identity():
        assert memo(problem, a, None) is None and memo(problem, a, None) is None  # a None answer is kept too
        assert memo(problem, a, b) == "x != y" and memo(problem, a, b) == "x != y"
        assert len(calls) == 4
        assert memo(problem, a, {"id": "y"}) == "x != y"  # an equal but new object is asked afresh
        assert len(calls) == 5
        for i in range(4):  # past its size the memo starts afresh, and answers stay right
            assert memo(problem, {"id": str(i)}, None) is None
        assert memo(problem, a, b) == "x != y" and len(calls) == 10
    with trusting_record_identity(False):
        assert memo(problem, a, b) == "x != y" and len(calls) == 11
