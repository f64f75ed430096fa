"""A replayer of exported qlwf-trace@1 files as another project would write it: `json` and a port, nothing else.

It knows no qlwf code: the record keys come from the file (`recordKeys`), the expected state is
built from `initialState` plus each step's `changes` (or taken from `snapshot`), the time of each
command is the step's `atMs`. The port is duck-typed: `execute(name, args, now=...)` returning the
result record or raising an error with `to_json()` -> {class, code, reason}; `snapshot()`; and
`corrupt(kind, key, patch)` for drift steps. tests/conformance/traces/test_traces_replay.py pins that this module
imports nothing but `json` (and `typing` for its hints).
"""

from __future__ import annotations

import json
from typing import Any

Record = dict[str, Any]


class Mismatch(AssertionError):
    def __init__(self, index: int, what: str, expected: Any, got: Any) -> None:
        super().__init__(f"step {index}: {what} differs\n  expected: {json.dumps(expected)[:300]}\n"
                         f"  got:      {json.dumps(got)[:300]}")
        self.index, self.what, self.expected, self.got = index, what, expected, got


def _text(value: Any) -> str:
    """Exact JSON text: key order and types count, as in the file."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _by_key(snapshot: Record, keys: Record) -> dict[str, dict[str, str]]:
    return {kind: {_text([r[k] for k in keys[kind]]): _text(r) for r in records} for kind, records in snapshot.items()}


def replay(trace_text: str, port: Any) -> list[Record]:
    """Replay one exported trace against `port` (a fresh, empty store); raise Mismatch at the first difference.

    Returns one line of evidence per step: {index, op, outcome compared, records compared}."""
    trace = json.loads(trace_text)
    # version 2 adds `evidence` to admit_task_attempt steps, which a store taking the binding as given ignores
    if trace.get("format") != "qlwf-trace" or trace.get("version") not in (1, 2) or "stateForm" not in trace:
        raise ValueError("not a self-contained qlwf-trace file of version 1 or 2")
    keys, form = trace["recordKeys"], trace["stateForm"]
    expected = _by_key(trace["initialState"], keys)
    got = _by_key(port.snapshot(), keys)
    if got != expected:
        raise Mismatch(-1, "initial state", expected, got)
    evidence = []
    for i, step in enumerate(trace["steps"]):
        outcome = None
        if step["op"] == "command":
            try:
                outcome = {"ok": port.execute(step["name"], step["args"], now=step["atMs"])}
            except Exception as e:
                if not hasattr(e, "to_json"):
                    raise
                outcome = {"error": e.to_json()}
            if _text(outcome) != _text(step["outcome"]):
                raise Mismatch(i, "outcome", step["outcome"], outcome)
        elif step["op"] == "corrupt":
            port.corrupt(step["kind"], step["key"], step["patch"])
        # advance_time: nothing to send; time reaches the store only as the next command's atMs
        if form == "snapshot":
            expected = _by_key(step["state"]["snapshot"], keys)
        else:
            for change in step["state"]["changes"]:
                table = expected.setdefault(change["kind"], {})
                key = _text(change["key"])
                if change["record"] is None:
                    table.pop(key, None)
                else:
                    table[key] = _text(change["record"])
        got = _by_key(port.snapshot(), keys)
        if got != expected:
            diff = sorted(f"{kind} {k}" for kind in set(expected) | set(got)
                          for k in set(expected.get(kind, {})) | set(got.get(kind, {}))
                          if expected.get(kind, {}).get(k) != got.get(kind, {}).get(k))
            raise Mismatch(i, f"state ({len(diff)} record(s): {', '.join(diff[:5])})", expected, got)
        evidence.append({"index": i, "op": step["op"], "outcome": outcome is not None,
                         "records": sum(len(t) for t in expected.values())})
    return evidence
