"""Two-state properties: the relation conforms to the spec's transition tables.

Each is a predicate over (pre, post, command): every StepRun / attempt / lease / Run change a command
makes is a row of STEP_PERFORMERS / ATTEMPT_TRANSITIONS / LEASE_TRANSITIONS / RUN_TRANSITIONS for that
command, and every event moves version and eventSequence by exactly one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from .encoding import B, Sys
from .invariants import _all
from .transitions import COMMANDS, Semantics


@dataclass(frozen=True)
class StepProperty:
    name: str
    doc: str
    fn: Callable[[Semantics, Sys, Sys, str], B]


def _pairs_for(rows: list[tuple[str | None, str]]) -> set[tuple[str | None, str]]:
    """Rows plus their composition within one command (e.g. running → lost → failed)."""
    out = set(rows)
    out |= {(a, c) for a, b in rows for b2, c in rows if b == b2}
    return out


def step_moves(sem: Semantics, pre: Sys, post: Sys, command: str) -> B:
    """Every StepRun status change of a command is a STEP_PERFORMERS row of that command."""
    d = sem.d
    pairs = _pairs_for([(p.source, p.target) for p in sem.t.STEP_PERFORMERS if p.command == command])
    out = []
    for a, b in zip(pre.steps, post.steps, strict=True):
        ok = [z3.And(a.st == d.step_status(x), b.st == d.step_status(y)) for x, y in pairs
              if x in d.step_status and y in d.step_status]
        out.append(z3.Or(z3.And(a.st == b.st, a.sv == b.sv), *ok))
    return _all(out)


def attempt_moves(sem: Semantics, pre: Sys, post: Sys, command: str) -> B:
    """Every attempt status change (or new attempt) is an ATTEMPT_TRANSITIONS row of that command."""
    d = sem.d
    rows = [(r.source, r.target) for r in sem.t.ATTEMPT_TRANSITIONS if r.command == command]
    out = []
    for a, b in zip(pre.steps, post.steps, strict=True):
        replaced = z3.Or(b.rv != a.rv, z3.And(a.at == d.attempt_status("none"), b.at != a.at))
        ok = []
        for x, y in rows:
            if x is None:
                ok.append(z3.And(replaced, b.at == d.attempt_status(y)))
            else:
                ok.append(z3.And(z3.Not(replaced), a.at == d.attempt_status(x), b.at == d.attempt_status(y)))
        out.append(z3.Or(z3.And(a.at == b.at, z3.Not(replaced)), *ok))
    return _all(out)


def lease_moves(sem: Semantics, pre: Sys, post: Sys, command: str) -> B:
    """Every lease change is a LEASE_TRANSITIONS row of the command; time only expires live leases."""
    e = sem.enc
    rows = [(r.source, r.target) for r in sem.t.LEASE_TRANSITIONS if r.command == command]
    out = []
    for a, b in zip(pre.steps, post.steps, strict=True):
        changed = z3.Or(a.ls != b.ls, a.lver != b.lver, a.lgen != b.lgen)
        row_ok = z3.Or([z3.And(e.lease_kind_is(a, x), e.lease_kind_is(b, y)) for x, y in rows] or [z3.BoolVal(False)])
        ok = [row_ok]
        if command == "advance_time":
            ok.append(z3.And(e.lease_is(a, "live"), e.lease_is(b, "expired"), a.lver == b.lver, a.lgen == b.lgen))
        if command == "admit_task_attempt":  # the old attempt's lease leaves the slot with it
            ok.append(z3.And(b.rv != a.rv, e.lease_is(b, "absent")))
        out.append(z3.Implies(changed, z3.Or(ok)))
    return _all(out)


def run_moves(sem: Semantics, pre: Sys, post: Sys, command: str) -> B:
    """Run status changes and intent changes are RUN_TRANSITIONS rows of that command."""
    d, e = sem.d, sem.enc
    rows = [(r.source, r.target) for r in sem.t.RUN_TRANSITIONS if r.command == command]
    a, b = pre.run, post.run
    status_ok = z3.Or(a.rs == b.rs, *[z3.And(a.rs == d.run_status(x), b.rs == d.run_status(y))
                                      for x, y in rows if x is not None])
    records_intent = command == "request_cancel" and ("running", "running") in rows
    intent_ok = z3.Or(a.reason == b.reason, z3.And(z3.BoolVal(records_intent), z3.Not(e.intent(a)),
                                                   a.rs == d.run_status("running")))
    stable = z3.Implies(e.intent(a), b.reason == a.reason)  # once present, the intent never changes
    return z3.And(status_ok, intent_ok, stable)


def counter_moves(sem: Semantics, pre: Sys, post: Sys, command: str) -> B:
    """Counters never decrease; every event consumes exactly +1 version and +1 sequence."""
    a, b = pre.run, post.run
    return z3.And(b.ver - a.ver == b.nev - a.nev, b.seq - a.seq == b.nev - a.nev, b.nev >= a.nev, b.natt >= a.natt,
                  _all([z3.And(y.sv >= x.sv, y.nse >= x.nse,
                               z3.Implies(y.rv == x.rv, z3.And(y.lgen >= x.lgen, y.lver >= x.lver)))
                        for x, y in zip(pre.steps, post.steps, strict=True)]))


STEP_PROPERTIES: tuple[StepProperty, ...] = (
    StepProperty("TBL-step-moves", "StepRun moves are STEP_PERFORMERS rows of the command", step_moves),
    StepProperty("TBL-attempt-moves", "attempt moves are ATTEMPT_TRANSITIONS rows of the command", attempt_moves),
    StepProperty("TBL-lease-moves", "lease moves are LEASE_TRANSITIONS rows of the command", lease_moves),
    StepProperty("TBL-run-moves", "Run moves are RUN_TRANSITIONS rows; intent is recorded once, never changed",
                 run_moves),
    StepProperty("CNT-monotone", "every event is +1 version and +1 sequence; counters never decrease",
                 counter_moves),
)

assert all(c in COMMANDS for c in ("advance_frontier", "advance_time"))

assert {"advance_frontier", "advance_time"} <= set(COMMANDS)
