"""Fast = plain: the model's speed-ups (model/speedups.py) answer exactly what the plain spec answers.

The speed-ups are not the spec: the exact-input memos of the normalizers, the answers remembered by
record identity (the model's integrity loads; the per-record parts of the invariants on frozen
admission evidence, record validity, ledger history and lease shape) and the fused validators of a
StepRun's values and of a mutation context. Each property
below runs the model twice, with the speed-ups and on the plain path (`plain_model()`: every
speed-up off), and requires the same answer, compared by `repr` (so 1, 1.0 and True differ, and so
does key order):

* a generated trace (conformance/generate/sequences.py `traces`) replayed both ways: the same outcome, rules
  and state after every step, and the same violations on every state, where the fast side reuses
  the invariants' per-record parts across the states as the explorer and the stateful machine do;
* each state corrupted (a field of one record flipped to an odd value, a digest broken, a key
  dropped or added, a JSON type swapped): the invariants, every record's normalizer and the shared
  memoized normalizers (cold, warm, trusted by identity, trusted as parsed JSON) and a StepRun
  transition under a corrupted mutation context fail exactly as the plain ones do: the same
  violations, or the same typed error with the same message;
* the oracle's resolutions on the snapshots of examples/ and corruptions of them, cold and warm
  (a memo hit), trusted by identity and as parsed JSON;
* the fused validators field by field, exhaustively: every StepRun of examples/ with each field set
  to each odd value (as it is, and resealed so that the values alone decide), and a transition under
  a mutation context with each field dropped or set to each odd value.

The switch itself: `plain_model()` turns every speed-up off within a block, `QLWF_PLAIN_MODEL=1` for
a process.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qlwf.conformance.generate.sequences import GeneratorConfig, traces
from qlwf.conformance.traces.format import Trace, model_step
from qlwf.model import speedups
from qlwf.model.errors import QlwfError
from qlwf.model.invariants import check_invariants
from qlwf.model.oracle import FUNCTIONS, consult
from qlwf.model.records import (
    STEP_RUN_KEYS,
    normalize_admission_receipt,
    normalize_plan,
    normalize_step_run,
    normalize_task_receipt,
    seal_step_run,
    shared_admission_receipt,
    shared_plan,
    shared_step_run,
    shared_task_receipt,
)
from qlwf.model.speedups import parsed_json_input, plain_model, reusing_record_checks, trusting_record_identity
from qlwf.model.state import State
from qlwf.model.steprun import CONTEXT_KEYS, transition_step_run_mutation

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = GeneratorConfig(steps=(6, 20), workflows=(1, 3), plan_steps=(1, 4))
SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Values a corruption writes: wrong types, JSON types Python calls equal (True/1, 1.0/1), bounds,
# malformed identifiers and digests, non-ASCII and control text, containers.
ODD_VALUES: list[Any] = [None, True, False, 0, 1, -1, 1.0, 2**31, 2**53, "", "x", "a" * 129, "é", "ab\x00cd",
                         " ", "A" * 64, "g" * 64, "0" * 64, "pending", "ready", "running", "succeeded", "failed",
                         "task", "leased", "released", [], {}, ["a"], {"type": "system"}]


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What a call answers, in a form two calls can be compared by: its value, or the exception it
    raised (a typed error with its class, code, reason and message; any other by its type and args)."""
    try:
        return ("value", fn(*args))
    except QlwfError as e:
        return ("raised", type(e).__name__, e.code, e.reason, e.message)
    except Exception as e:  # a crash of either path is an answer too: the other path must crash alike
        return ("raised", type(e).__name__, e.args)


def same(fast: Any, plain: Any, what: str) -> None:
    assert repr(fast) == repr(plain), f"{what}: the speed-ups answer\n{fast!r}\nbut the plain model\n{plain!r}"


def plainly(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    with plain_model():
        return outcome(fn, *args)


@contextmanager
def nothing() -> Iterator[None]:
    yield


SCOPES: tuple[Callable[[], AbstractContextManager[None]], ...] = (nothing, trusting_record_identity)


# --------------------------------------------------------------------------------------------------
# Corruptions
def paths(x: Any, depth: int = 3) -> list[tuple[Any, ...]]:
    """Every key and index path into `x` (down to `depth` levels)."""
    if depth == 0:
        return []
    items = x.items() if type(x) is dict else enumerate(x) if type(x) is list else ()
    return [p for k, v in items for p in [(k,), *((k, *q) for q in paths(v, depth - 1))]]


def corrupted(record: Any, data: st.DataObject) -> Any:
    """A copy of `record` with one change drawn by `data`."""
    out = copy.deepcopy(record)
    digests = [p for p in paths(out) if isinstance(_at(out, p), str) and len(_at(out, p)) == 64]
    how = data.draw(st.sampled_from(["value", "digest", "drop", "add", "type"] if digests
                                    else ["value", "drop", "add", "type"]), label="corruption")
    if how == "digest":  # one hex digit of a digest changed: the text stays a digest, the record lies
        p = data.draw(st.sampled_from(digests), label="digest")
        old = _at(out, p)
        _set(out, p, old[:-1] + ("0" if old[-1] != "0" else "1"))
        return out
    p = data.draw(st.sampled_from(paths(out) or [()]), label="path")
    if not p:
        return out
    parent, key = _at(out, p[:-1]), p[-1]
    if how == "drop":
        del parent[key]
    elif how == "add" and type(parent) is dict:
        parent["unexpected"] = data.draw(st.sampled_from(ODD_VALUES), label="added")
    elif how == "type":
        parent[key] = retyped(parent[key])
    else:
        parent[key] = data.draw(st.sampled_from(ODD_VALUES), label="value")
    return out


def retyped(v: Any) -> Any:
    """A value of another JSON type, equal to `v` in Python where there is one (1 and True, 1 and 1.0)."""
    if type(v) is int:
        return bool(v) if v in (0, 1) else float(v)
    if type(v) is bool:
        return int(v)
    return [v] if type(v) is str else None


def _at(x: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        x = x[k]
    return x


def _set(x: Any, path: tuple[Any, ...], value: Any) -> None:
    _at(x, path[:-1])[path[-1]] = value


# The State tables a corruption may hit, as (field, how to reach its records).
TABLES = ("runs", "step_runs", "mutations", "attempts", "receipts", "leases", "admissions", "events")


def corrupt_state(state: State, data: st.DataObject) -> State | None:
    """`state` with one record corrupted (a new record object; every other one shared), or None when
    the state holds no record."""
    tables = [t for t in TABLES if getattr(state, t)]
    if not tables:
        return None
    field = data.draw(st.sampled_from(tables), label="table")
    table = getattr(state, field)
    key = data.draw(st.sampled_from(sorted(table)), label="record")
    if field == "events":  # a Run's log: one event of it
        log = table[key]
        i = data.draw(st.integers(0, len(log) - 1), label="event")
        new: Any = (*log[:i], corrupted(log[i], data), *log[i + 1:])
    else:
        new = corrupted(table[key], data)
    changes: dict[str, Any] = {field: {**table, key: new}}  # a State field
    return replace(state, **changes)


# --------------------------------------------------------------------------------------------------
# The normalizers of a state's records, fast and plain
def normalizations(state: State) -> list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], Any]]:
    """(what, plain normalizer, shared memoized normalizer, record) for every normalized record."""
    out: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], Any]] = []
    for pd, adm in state.admissions.items():
        if type(adm) is dict:
            out.append((f"plan {pd}", normalize_plan, shared_plan, adm.get("plan")))
            out.append((f"admission receipt {pd}", normalize_admission_receipt, shared_admission_receipt,
                        adm.get("receipt")))
    out += [(f"StepRun {i}", normalize_step_run, shared_step_run, s) for i, s in state.step_runs.items()]
    out += [(f"post-image of {i}", normalize_step_run, shared_step_run, m.get("stepRun"))
            for i, m in state.mutations.items() if type(m) is dict]
    out += [(f"task receipt {i}", normalize_task_receipt, shared_task_receipt, r) for i, r in state.receipts.items()]
    return out


def check_normalizers_agree(state: State) -> None:
    for what, normalize, shared, record in normalizations(state):
        plain = plainly(normalize, record)
        same(outcome(normalize, record), plain, f"{what} normalized")
        for scope in SCOPES:
            with scope():
                same(outcome(shared, record), plain, f"{what} through the memo")
                same(outcome(shared, record), plain, f"{what} through the memo again")
        try:
            parsed = json.loads(json.dumps(record))
        except (TypeError, ValueError):  # not JSON: nobody may vouch for it as parsed JSON
            continue
        with parsed_json_input():
            same(outcome(shared, parsed), plain, f"{what} through the memo as parsed JSON")


def check_transitions_agree(state: State, data: st.DataObject) -> None:
    """One StepRun transition under a mutation context that may be corrupted (the fused context check)."""
    if not state.step_runs:
        return
    s = state.step_runs[data.draw(st.sampled_from(sorted(state.step_runs)), label="StepRun")]
    if type(s) is not dict:
        return
    to = data.draw(st.sampled_from(["ready", "running", "succeeded", "failed", "cancelled", "skipped"]), label="to")
    command: dict[str, Any] = {"expectedVersion": s.get("version"), "expectedDigest": s.get("stepRunDigest"),
                               "mutationId": "m-speedups", "to": to,
                               "atMs": s["updatedAtMs"] + 1 if type(s.get("updatedAtMs")) is int else 0}
    if to in ("failed", "cancelled", "skipped"):
        command["resultCode"] = "test_code"
    context: Any = {"expectedRunVersion": 3, "expectedRunEventSequence": 3, "eventId": "ev-speedups",
                    "dedupeKey": "ev-speedups", "actor": {"type": "reconciler"}}
    if data.draw(st.booleans(), label="corrupt the context"):
        context = corrupted(context, data)
    plain = plainly(transition_step_run_mutation, s, command, context)
    same(outcome(transition_step_run_mutation, s, command, context), plain, "StepRun transition")
    with trusting_record_identity():
        same(outcome(transition_step_run_mutation, s, command, context), plain, "StepRun transition, trusted")


# --------------------------------------------------------------------------------------------------
# The properties
def replay(trace: Trace, fast: bool) -> list[tuple[Any, ...]]:
    """(state, outcome, rules) after every step of `trace`, with the speed-ups or plainly."""
    state = State(clock=trace.initial_clock)
    out = []
    with trusting_record_identity() if fast else plain_model():
        for step in trace.steps:
            done = model_step(state, step)
            state = done.state
            out.append((state, done.outcome, done.rules))
    return out


@settings(SLOW, max_examples=60)
@given(traces(CONFIG), st.data())
def test_generated_states_answer_alike_with_and_without_the_speedups(trace: Trace, data: st.DataObject) -> None:
    fast_run, plain_run = replay(trace, fast=True), replay(trace, fast=False)
    for i, (fast, plain) in enumerate(zip(fast_run, plain_run, strict=True)):
        same(fast[1:], plain[1:], f"step {i} outcome and rules")
        same(fast[0], plain[0], f"state after step {i}")
    states = [s for s, _, _ in fast_run]
    reuse: dict[Any, Any] = {}  # one memo over the whole walk: later states share records with earlier ones
    for i, state in enumerate(states):
        with reusing_record_checks(memo=reuse):
            fast_violations = outcome(check_invariants, state)
        same(fast_violations, plainly(check_invariants, state), f"invariants of state {i}")
    state = states[data.draw(st.integers(0, len(states) - 1), label="state")] if states else State()
    check_normalizers_agree(state)
    broken = corrupt_state(state, data)
    if broken is not None:
        with reusing_record_checks(memo=reuse):  # the records it shares were checked above: reused
            fast_violations = outcome(check_invariants, broken)
        same(fast_violations, plainly(check_invariants, broken), "invariants of the corrupted state")
        check_normalizers_agree(broken)
        check_transitions_agree(broken, data)
    check_transitions_agree(state, data)


def _examples() -> dict[str, tuple[str, Any]]:
    found = {}
    for path in sorted(EXAMPLES.glob("*.json")):
        fn = next(f for f in sorted(FUNCTIONS, key=len, reverse=True) if path.stem.startswith(f))
        found[path.stem] = (fn, json.loads(path.read_text(encoding="utf-8")))
    return found


EXAMPLE_INPUTS = _examples()


def test_the_examples_cover_every_memoized_resolution() -> None:
    assert {fn for fn, _ in EXAMPLE_INPUTS.values()} >= {"frontier", "cancel", "recover", "admit-attempt",
                                                         "admit-workflow"}


@settings(SLOW, max_examples=300)
@given(st.sampled_from(sorted(EXAMPLE_INPUTS)), st.booleans(), st.data())
def test_resolutions_answer_alike_with_and_without_the_speedups(name: str, corrupt: bool,
                                                               data: st.DataObject) -> None:
    fn, example = EXAMPLE_INPUTS[name]
    inp = corrupted(example, data) if corrupt else copy.deepcopy(example)
    plain = plainly(consult, fn, inp)
    same(outcome(consult, fn, copy.deepcopy(inp)), plain, f"{fn} cold")
    same(outcome(consult, fn, copy.deepcopy(inp)), plain, f"{fn} warm (the memos may hit)")
    with trusting_record_identity():
        same(outcome(consult, fn, inp), plain, f"{fn} trusted by identity")
        same(outcome(consult, fn, inp), plain, f"{fn} trusted by identity, again")
    with parsed_json_input():
        same(outcome(consult, fn, json.loads(json.dumps(inp))), plain, f"{fn} as parsed JSON")


# The fused validators, one field at a time: every rule of a StepRun, every check of a mutation context
EXAMPLE_STEP_RUNS = [s for _, inp in EXAMPLE_INPUTS.values() if type(inp) is dict
                     for s in [*inp.get("stepRuns", []), *([inp["stepRun"]] if "stepRun" in inp else [])]]


ODD_OR_RETYPED = [*ODD_VALUES, "retyped"]


@pytest.mark.parametrize("key", STEP_RUN_KEYS)
def test_a_step_run_with_one_odd_field_is_judged_alike(key: str) -> None:
    """Every example StepRun, with `key` set to each odd value in turn, as it is and resealed (then the
    digest agrees again and the values and the record invariants alone decide)."""
    for good in EXAMPLE_STEP_RUNS:
        for value in ODD_OR_RETYPED:
            odd = {**good, key: retyped(good[key]) if value == "retyped" else value}
            for record in (odd, seal_step_run(odd)):
                plain = plainly(normalize_step_run, record)
                same(outcome(normalize_step_run, record), plain, f"StepRun with {key}={value!r}")
                shared_step_run(copy.deepcopy(good))  # the memo knows the good record: the odd one must not hit it
                same(outcome(shared_step_run, record), plain, f"StepRun with {key}={value!r} through the memo")
                with trusting_record_identity():
                    same(outcome(shared_step_run, record), plain, f"StepRun with {key}={value!r} trusted")


@pytest.mark.parametrize("key", [*CONTEXT_KEYS, "actor.type", "actor.id", "actor.extra"])
def test_a_mutation_context_with_one_odd_field_is_judged_alike(key: str) -> None:
    """A transition of every example StepRun under a context with `key` dropped or set to each odd value."""
    for current in EXAMPLE_STEP_RUNS:
        command = {"expectedVersion": current["version"], "expectedDigest": current["stepRunDigest"],
                   "mutationId": "m-speedups", "to": "cancelled", "atMs": current["updatedAtMs"], "resultCode": "x"}
        for value in [*ODD_VALUES, "drop"]:
            context: dict[str, Any] = {"expectedRunVersion": 3, "expectedRunEventSequence": 4, "eventId": "e-1",
                                       "dedupeKey": "e-1", "actor": {"type": "reconciler", "id": "runtime:x"}}
            parent, field = (context["actor"], key.split(".")[1]) if key.startswith("actor.") else (context, key)
            if value == "drop":
                parent.pop(field, None)
            else:
                parent[field] = value
            plain = plainly(transition_step_run_mutation, current, command, context)
            same(outcome(transition_step_run_mutation, current, command, context), plain, f"context {key}={value!r}")


# --------------------------------------------------------------------------------------------------
# The switch itself
def test_the_plain_path_turns_every_speedup_off() -> None:
    calls: list[Any] = []

    def counting(x: Any) -> dict[str, Any]:
        calls.append(x)
        return dict(x)

    memo = speedups.ExactMemo(counting, 4)
    record = {"id": "r"}
    memo(record)
    memo(dict(record))
    assert len(calls) == 1  # the second call was a memo hit
    with plain_model():
        assert not speedups.speedups_on()
        memo(dict(record))
        with reusing_record_checks():
            assert speedups.reused("k", (record,), lambda: "first") == "first"
            assert speedups.reused("k", (record,), lambda: "second") == "second"  # computed again
    assert len(calls) == 2 and speedups.speedups_on()
    with reusing_record_checks():
        assert speedups.reused("k", (record,), lambda: "first") == "first"
        assert speedups.reused("k", (record,), lambda: "second") == "first"  # remembered by identity


@pytest.mark.parametrize(("value", "on"), [("1", False), ("true", False), ("0", True), ("", True)])
def test_the_environment_switch_sets_a_whole_process(value: str, on: bool) -> None:
    code = "from qlwf.model import speedups; print(speedups.speedups_on())"
    env = {**os.environ, "QLWF_PLAIN_MODEL": value}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == str(on)
