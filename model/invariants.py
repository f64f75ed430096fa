"""INV-1..INV-31 (state-machines.md §9) as named predicates over a durable State.

Each invariant is a function `(view) -> list[str]` of violation messages, registered with the ADR
clause it comes from. `check_invariants(state)` evaluates all of them and returns explained
violations; an empty list means the state satisfies the whole specification.

The predicates live by the sections of §9, all of them exported here:

| module | invariants |
| --- | --- |
| `inv_view.py` | the views every predicate reads (`SystemView`, `RunView`), the registry, `Violation` |
| `inv_log.py` | counters and log: INV-1…INV-5 |
| `inv_records.py` | records: INV-6…INV-9 |
| `inv_runs.py` | Run status, cancel intent, dependencies: INV-10…INV-18 |
| `inv_attempts.py` | attempts and leases: INV-19…INV-26 |
| `inv_candidates.py` | bounds, candidates and codes: INV-27…INV-31, `consistent_binding` |

Incremental evaluation (`reusing_record_checks`: the per-record parts of INV-5/6/8/26 remembered by
the identity of the records they read) is a speed-up, model/speedups.py; outside it, or with the
speed-ups off, every part is evaluated in full.
"""

from __future__ import annotations

from .inv_attempts import inv19, inv20, inv21, inv22, inv23, inv24, inv25, inv26
from .inv_candidates import consistent_binding, inv27, inv28, inv29, inv30, inv31
from .inv_log import inv1, inv2, inv3, inv4, inv5
from .inv_records import inv6, inv7, inv8, inv9, rebuild_mutation
from .inv_runs import NEW_WORK_TYPES, inv10, inv11, inv12, inv13, inv14, inv15, inv16, inv17, inv18
from .inv_view import REGISTRY, TERMINAL_EVENT_TYPES, Check, RunView, SystemView, Violation, invariant, per_run
from .speedups import REUSE_BOUND, reusing_record_checks
from .state import State

__all__ = [
    "INVARIANTS",
    "NEW_WORK_TYPES",
    "REGISTRY",
    "REUSE_BOUND",
    "TERMINAL_EVENT_TYPES",
    "Check",
    "RunView",
    "SystemView",
    "Violation",
    "check_invariants",
    "consistent_binding",
    "inv1",
    "inv2",
    "inv3",
    "inv4",
    "inv5",
    "inv6",
    "inv7",
    "inv8",
    "inv9",
    "inv10",
    "inv11",
    "inv12",
    "inv13",
    "inv14",
    "inv15",
    "inv16",
    "inv17",
    "inv18",
    "inv19",
    "inv20",
    "inv21",
    "inv22",
    "inv23",
    "inv24",
    "inv25",
    "inv26",
    "inv27",
    "inv28",
    "inv29",
    "inv30",
    "inv31",
    "invariant",
    "per_run",
    "rebuild_mutation",
    "reusing_record_checks",
]

# INV-1…INV-31 in the order of §9 (the order the modules registered them in may differ).
INVARIANTS: dict[str, tuple[str, str, Check]] = {
    inv: (name, clause, fn) for inv, name, clause, fn in sorted(REGISTRY, key=lambda row: int(row[0].split("-")[1]))}


def check_invariants(state: State, only: tuple[str, ...] | None = None) -> list[Violation]:
    """Evaluate every INV-n (or `only` those) on `state`; [] means all hold."""
    view = SystemView(state)
    out: list[Violation] = []
    for inv, (name, clause, fn) in INVARIANTS.items():
        if only is not None and inv not in only:
            continue
        out += [Violation(inv, name, clause, m) for m in fn(view)]
    return out
