"""The state abstraction that makes the space finite, and the symmetry reduction over a shape's automorphisms.

State identity (the abstraction that makes the space finite)
-------------------------------------------------------------
The *detailed* identity of a state is
* the Run: status, cancelReason, errorCode;
* every StepRun (by id): status, version, attemptCount, resultCode, readyAtMs set or not;
* every attempt, by (StepRun, ordinal within it) -- Run-global attempt numbers only record the
  admission interleaving of independent steps: status, errorCode, startedAtMs set, exitCode (none /
  0 / non-zero), callbackSequence, whether its StepRun is still at the admitted epoch, how many task
  timeout requests were written for it, its deadline (none; pending or passed while the attempt is
  active; just "set" once it ended), and its lease as (status, leaseGeneration, releaseReason, live
  or expired while `leased`);
taken up to the automorphisms of the shape (symmetric steps are interchangeable) and, in a scope of
several Runs of one shape under the `runs` reduction, up to permutations of the Runs (`Symmetry`:
docs/explorer-reduction.md says why identical Runs are interchangeable in this model). The *explored*
identity is the detailed one with every terminal StepRun reduced to its status: nothing a terminal
StepRun or its ended attempts carry can change or influence a later command (the frontier and AGG
read statuses only, ended attempts and their leases are final), so states that differ only there
behave alike. Such merged variants are still invariant-checked (`checked_variants`), they are just
not expanded again. Forgotten altogether: timestamps (time is reduced to the bits above),
identifiers and digests (functions of the rest and of time), Run version/eventSequence and lease
versions (event and renew counts), worker identities (the two workers are symmetric: every fence
only asks "the holder or the other one").


The abstraction is exact under the time discipline of alphabet.py.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from qlwf.model import tables as T
from qlwf.model.records import Record
from qlwf.model.state import State

from .shapes import Shape, step_key

Key = tuple[Any, ...]


def _attempts_by_step(state: State) -> dict[str, list[Record]]:
    by: dict[str, list[Record]] = {}
    for a in sorted(state.attempts.values(), key=lambda a: a["attempt"]):
        by.setdefault(a["stepRunId"], []).append(a)
    return by


def _attempt_key(state: State, a: Record, step: Record, timeout_requested: Counter[str]) -> Key:
    receipt = state.receipts[a["id"]]
    lease = state.leases.get(a["id"])
    lease_key = None if lease is None else (
        lease["status"], lease["leaseGeneration"], lease.get("releaseReason"),
        lease["status"] == "leased" and lease["expiresAtMs"] > state.clock)
    deadline = a.get("deadlineAtMs")
    if deadline is not None:
        deadline = "passed" if deadline <= state.clock else "pending" if a["status"] in T.ACTIVE_ATTEMPT else "set"
    exit_code = a.get("exitCode")
    return (a["status"], a.get("errorCode"), "startedAtMs" in a, deadline,
            None if exit_code is None else exit_code == 0, a["callbackSequence"],
            (step["version"], step["stepRunDigest"]) == (receipt["stepRunVersion"], receipt["stepRunDigest"]),
            timeout_requested[a["id"]], lease_key)


def automorphisms(shape: Shape) -> list[tuple[int, ...]]:
    """Node permutations that map the shape's edge set onto itself (the identity first)."""
    n, edges = shape
    edge_set = set(edges)
    return [p for p in itertools.permutations(range(n)) if {(p[a], p[b]) for a, b in edges} == edge_set]


def _rename(key: Key, names: dict[str, str]) -> Key:
    runs, steps = key
    return runs, tuple(sorted(((names[s[0]], *s[1:]) for s in steps), key=lambda s: s[0]))


def canonical_key(key: Key, renamings: list[dict[str, str]]) -> Key:
    """The least of the key's images under the shape's automorphisms, images ordered by their StepRun
    entries as (new name, repr of the other facts), in name order: a total order on strings (facts
    mix None with str and int, which tuples cannot compare), each entry's repr built once."""
    if len(renamings) <= 1:
        return key
    return _rename(key, canonical_renaming(key, renamings))


def canonical_renaming(key: Key, renamings: list[dict[str, str]]) -> dict[str, str]:
    """The renaming `canonical_key` applies (the first of the least images): it maps the key's
    labelling onto the canonical one, which is how the reduction compares sleep sets (search.py)."""
    if len(renamings) <= 1:
        return renamings[0]
    facts = [(s[0], repr(s[1:])) for s in key[1]]
    best, best_names = None, renamings[0]
    for names in renamings:
        order = sorted((names[name], rest) for name, rest in facts)  # names are unique: rest never decides
        if best is None or order < best:
            best, best_names = order, names
    return best_names


def run_renamings(shape: Shape, run_ids: tuple[str, ...]) -> list[dict[str, str]]:
    """The StepRun renamings of `run_ids`, each Run an instance of `shape`: every combination of one
    automorphism per Run (the identity first). Runs are not swapped with each other."""
    autos = automorphisms(shape)
    return [{f"{rid}:{step_key(i)}": f"{rid}:{step_key(p[i])}" for rid, p in zip(run_ids, combo, strict=True)
             for i in range(shape[0])} for combo in itertools.product(autos, repeat=len(run_ids))]


def detailed_state(state: State) -> Key:
    """Every abstracted fact, terminal StepRuns included, before symmetry reduction."""
    timeout_requested = Counter(e.get("attemptId", "") for events in state.events.values() for e in events
                                if e["type"] == "workflow.task_timeout_requested")
    by_step = _attempts_by_step(state)
    runs = tuple((r["id"], r["status"], r.get("cancelReason"), r.get("errorCode"))
                 for r in sorted(state.runs.values(), key=lambda r: r["id"]))
    steps = tuple(
        (s["id"], s["status"], s["version"], s["attemptCount"], s["resultCode"], s["readyAtMs"] is not None,
         tuple(_attempt_key(state, a, s, timeout_requested) for a in by_step.get(s["id"], [])))
        for s in sorted(state.step_runs.values(), key=lambda s: s["id"]))
    return runs, steps


def collapse(detailed: Key) -> Key:
    """The explored identity: a terminal StepRun only by its status (nothing else of it matters later)."""
    runs, steps = detailed
    return runs, tuple(s[:2] if s[1] in T.TERMINAL_STEP else s for s in steps)


def abstract_state(state: State) -> Key:
    """The explored state's identity before symmetry reduction (see the module docstring)."""
    return collapse(detailed_state(state))



def _split(step_run_id: str) -> tuple[str, str]:
    run_id, _, key = step_run_id.partition(":")
    return run_id, key


class Symmetry:
    """The group a search reduces states by: one automorphism of the shape per Run (`run_renamings`)
    and, with `swap_runs`, every permutation of the Runs, which are instances of one shape.

    `renaming(key)` maps a key's labelling onto the canonical one: StepRun ids, and with `swap_runs`
    Run ids too. Each Run is first canonicalized on its own (the least image under its automorphisms,
    as `canonical_renaming`); the Runs then take the ids `run_ids` in the order of those per-Run
    images with their ids stripped, so Runs in the same situation are one state whichever id holds it.
    That image order is a function of the orbit, which is what makes `canonical` a canonical form."""

    def __init__(self, shape: Shape, run_ids: tuple[str, ...], swap_runs: bool) -> None:
        self.renamings = run_renamings(shape, run_ids)
        self.run_ids = run_ids
        self.swap_runs = swap_runs and len(run_ids) > 1
        self.trivial = len(self.renamings) <= 1 and not self.swap_runs

    def renaming(self, key: Key) -> dict[str, str]:
        names = canonical_renaming(key, self.renamings)
        if not self.swap_runs:
            return names
        runs, steps = key
        images: dict[str, list[Any]] = {r[0]: [repr(r[1:])] for r in runs}
        for s in sorted(steps, key=lambda s: names[s[0]]):
            run_id, step = _split(names[s[0]])
            images[run_id].append((step, repr(s[1:])))
        order = sorted(images, key=lambda r: (images[r], r))  # ties: equal images, either order is one key
        runs_to = dict(zip(order, self.run_ids, strict=False))  # while Runs are being admitted, fewer
        renamed = {}
        for old, new in names.items():
            run_id, step = _split(new)
            if run_id in runs_to:  # (the renamings also name the StepRuns of Runs not yet admitted)
                renamed[old] = f"{runs_to[run_id]}:{step}"
        return {**renamed, **runs_to}

    def rename(self, key: Key, names: dict[str, str]) -> Key:
        if not self.swap_runs:
            return _rename(key, names)
        runs, steps = key
        return (tuple(sorted(((names[r[0]], *r[1:]) for r in runs), key=lambda r: r[0])),
                tuple(sorted(((names[s[0]], *s[1:]) for s in steps), key=lambda s: s[0])))

    def canonical(self, key: Key) -> Key:
        return key if self.trivial else self.rename(key, self.renaming(key))
