"""qlwf.model: the executable specification. This facade is its public API (docs/spec.md "Public API").

Everything not in `__all__` is internal: modules may be imported by the checkers of this repository,
but only these names are kept stable. Names load on first use, so importing one table module does
not load the whole system.

The model follows ../shared/spec/ as written; where the spec leaves a choice, its reading is in
docs/spec-readings.md. Layer: model — it imports nothing of qlwf outside this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .attempts import build_task_attempt_admission
    from .attempts_ql3 import build_ql3_task_attempt_admission, derive_binding
    from .cancellation import resolve_cancellation
    from .errors import Conflict, Invalid, QlwfError, Unavailable
    from .evidence import (
        build_cluster_execution_revision,
        build_local_execution_revision,
        build_ql3_admission_input,
        build_task_reconciliation,
        evidence_binding,
    )
    from .frontier import resolve_frontier
    from .invariants import Violation, check_invariants
    from .oracle import Answer, consult
    from .records import Record
    from .recovery import build_task_recovery
    from .rules import UnknownRule
    from .state import State
    from .steprun import transition_step_run, transition_step_run_mutation
    from .system import Outcome, WorkflowSystem, advance_time, apply

_HOMES = {
    "Answer": "oracle", "consult": "oracle",
    "apply": "system", "advance_time": "system", "Outcome": "system", "WorkflowSystem": "system",
    "State": "state",
    "check_invariants": "invariants", "Violation": "invariants",
    "Record": "records",
    "QlwfError": "errors", "Invalid": "errors", "Conflict": "errors", "Unavailable": "errors",
    "UnknownRule": "rules",
    "resolve_frontier": "frontier", "resolve_cancellation": "cancellation",
    "build_task_attempt_admission": "attempts", "build_task_recovery": "recovery",
    "build_ql3_task_attempt_admission": "attempts_ql3", "derive_binding": "attempts_ql3",
    "build_task_reconciliation": "evidence", "build_local_execution_revision": "evidence",
    "build_cluster_execution_revision": "evidence", "build_ql3_admission_input": "evidence",
    "evidence_binding": "evidence",
    "transition_step_run": "steprun", "transition_step_run_mutation": "steprun",
}

__all__ = [
    "Answer",
    "Conflict",
    "Invalid",
    "Outcome",
    "QlwfError",
    "Record",
    "State",
    "Unavailable",
    "UnknownRule",
    "Violation",
    "WorkflowSystem",
    "advance_time",
    "apply",
    "build_cluster_execution_revision",
    "build_local_execution_revision",
    "build_ql3_admission_input",
    "build_ql3_task_attempt_admission",
    "build_task_attempt_admission",
    "build_task_reconciliation",
    "build_task_recovery",
    "check_invariants",
    "consult",
    "derive_binding",
    "evidence_binding",
    "resolve_cancellation",
    "resolve_frontier",
    "transition_step_run",
    "transition_step_run_mutation",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (its public API is __all__)")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
