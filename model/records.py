"""Exact-key normalizers of the ql3 records (records.md §4, §6).

Every normalizer requires a JSON object with the exact key set, checks each value in table order,
checks the record invariants, recomputes the digest (if any) and returns a NEW dict in canonical
key order. Failures raise the normalizer's typed Invalid error.

Each record lives in a module of its own, all of them exported here (`from .records import X`):

| module | record |
| --- | --- |
| `record_common.py` | the Record type, snapshot record keys, typed failures, exact keys, canonical order |
| `record_plan.py` | ExecutionPlan (§6.1) |
| `record_run.py` | Run (§6.2) |
| `record_step_run.py` | StepRun (§6.3) |
| `record_event.py` | RunEvent and its actor (§6.4) |
| `record_attempt.py` | RunAttempt (§6.7) |
| `record_lease.py` | DispatchLease (§6.8) |
| `record_admission_receipt.py` | workflow admission receipt (§6.9) |
| `record_task_receipt.py` | execution binding and task attempt receipt (§6.10) |

The memoized normalizers below are speed-ups (model/speedups.py): the pure resolutions read
records through them, and they answer what the normalizers answer.
"""

from __future__ import annotations

from .record_admission_receipt import *  # noqa: F403
from .record_admission_receipt import normalize_admission_receipt
from .record_attempt import *  # noqa: F403
from .record_common import *  # noqa: F403
from .record_event import *  # noqa: F403
from .record_lease import *  # noqa: F403
from .record_plan import *  # noqa: F403
from .record_plan import normalize_plan
from .record_run import *  # noqa: F403
from .record_step_run import *  # noqa: F403
from .record_step_run import normalize_step_run
from .record_task_receipt import *  # noqa: F403
from .record_task_receipt import normalize_task_receipt
from .speedups import ExactMemo, flat_key

# Shared, memoized normalizers for the pure resolvers; never hand these out.
shared_plan = ExactMemo(normalize_plan, 64)
shared_step_run = ExactMemo(normalize_step_run, 8192, key=flat_key)  # a StepRun's values are all scalars
shared_admission_receipt = ExactMemo(normalize_admission_receipt, 64)
shared_task_receipt = ExactMemo(normalize_task_receipt, 4096)
