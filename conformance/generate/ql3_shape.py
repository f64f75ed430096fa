"""Model-shaped oracle inputs reshaped the way ql3 stores them (records.md §6.7, issue 9 §1).

ql3 keeps the generic RunAttempt record: keys outside the model subset (`workerSessionId`, `pid`,
`executorHandle`, ...), a remote-worker claim without `leaseVersion`, and any key order. The
oracle must answer such a snapshot exactly as the model-shaped one, except that its copies keep the
input's keys in place. These helpers build the ql3 twin of a model-shaped input.
"""

from __future__ import annotations

import copy
from typing import Any

Record = dict[str, Any]


def reversed_keys(x: Record) -> Record:
    """The same object with its keys in reverse order (a non-canonical order)."""
    return dict(reversed(list(x.items())))


def ql3_attempt(a: Record) -> Record:
    """`a` as ql3 stores it: generic keys added, no leaseVersion, keys in reverse order."""
    out = {k: v for k, v in a.items() if k != "leaseVersion"}
    out["workerSessionId"] = "wss-1"
    out["pid"] = 4242
    out["executorHandle"] = {"kind": "remote", "node": "n-7"}  # out of scope, any value (records.md §6.7)
    return reversed_keys(out)


def ql3_input(fn: str, inp: Any) -> Any:
    """The ql3-shaped twin of a model-shaped oracle input of function `fn`."""
    out = copy.deepcopy(inp)
    if fn == "cancel":
        out["run"] = reversed_keys(out["run"])
        out["stepRuns"] = [reversed_keys(s) for s in reversed(out["stepRuns"])]
        out["activeTaskAttempts"] = [
            {"leaseStatus": e["leaseStatus"], "attempt": ql3_attempt(e["attempt"]),
             "admission": reversed_keys(e["admission"])}
            for e in reversed(out["activeTaskAttempts"])
        ]
        return out
    if fn == "recover":
        out = reversed_keys(out)
        out["attempt"] = ql3_attempt(out["attempt"])
        out["run"] = reversed_keys(out["run"])
        return out
    if fn == "frontier":
        out["stepRuns"] = [reversed_keys(s) for s in reversed(out["stepRuns"])]
        return reversed_keys({k: reversed_keys(v) if isinstance(v, dict) else v for k, v in out.items()})
    if fn == "admit-attempt":
        return reversed_keys({k: reversed_keys(v) if isinstance(v, dict) else v for k, v in out.items()})
    if fn == "admit-workflow":
        return reversed_keys(out)
    raise ValueError(f"no ql3 shape for {fn!r}")


def copy_problem(input_record: Record, output: Record, changed: tuple[str, ...]) -> str | None:
    """records.md §6.2/§6.7 copies: every input key in place with its value except `changed`; new keys
    (only from `changed`) appended at the end. None when `output` is such a copy."""
    keys = list(output)
    if keys[: len(input_record)] != list(input_record):
        return "input keys moved or were removed"
    for k, v in input_record.items():
        if k not in changed and output[k] != v:
            return f"{k} changed"
    extra = set(keys[len(input_record):]) - set(changed)
    return f"unexpected keys appended: {sorted(extra)}" if extra else None
