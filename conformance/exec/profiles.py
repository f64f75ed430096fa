"""The surfaces of ql3's two storage adapters, as data (docs/ql3-adapters.md §1, §4, §5).

A driver over one of them declares its profile's surface in `hello` (docs/protocol.md); `qlwf conform
--profile NAME` generates traces inside it. The facts, mapped onto qlwf's command names
(model/tables_commands.py, model/arguments.py):

* **edge** (`ql3-local-sqlite`): no dispatch leases for workflow attempts, so no claim_lease,
  renew_lease (only its timeout part exists) or release_lease (§1.1, §4 item 1); no
  cancellation_candidates and no per-Run converge_cancellation (§4 item 5); the convergence page and
  the recovery candidates take `{limit}` only, no cursor (§1.1, §4 item 6); cancel intent is for
  `user` only (§4 item 4), and recovery takes a reason meaning "not running", so only the
  `not_running` evidence (§4 item 3); the page returns the five
  counters only (§4 item 6); task admission answers `{status, receipt}` without `attempt` (§4 item 10);
  errors carry a code, their class read from the error type, mostly no reason (§5); only
  `local_process` attempts (§4 item 1); the binding is derived from the stored Task reconciliation
  receipt and execution revision (§2, task-attempts.md §3A).
* **cluster** (`ql3-cluster-postgres`): the dispatch leases exist, and recovery's evidence processor
  answers all three kinds of evidence (§4 item 3); otherwise the same gaps, and only `remote_worker`
  attempts (§1.2, §4 item 1).

frontier_candidates and task_candidates keep their cursors on both (§1: "as on Edge", `after?`).
"""

from __future__ import annotations

from typing import Final

from qlwf.conformance.generate.surface import Surface
from qlwf.model import tables as T

PAGE_COUNTERS: Final = ("scanned", "settledRuns", "settledAttempts", "blocked", "hasMore")
_NO_CURSOR: Final = {"converge_cancellation_page": frozenset({"after"}), "recovery_candidates": frozenset({"after"})}
_RESULT_KEYS: Final = {"converge_cancellation_page": PAGE_COUNTERS, "admit_task_attempt": ("status", "receipt")}
# Cancel intent is always for `user` on both (§4 item 4); Edge's recovery takes a reason that says the
# execution is not running, so of qlwf's evidence only `not_running` has an Edge counterpart (§4 item 3).
_CANCEL_USER: Final = {"request_cancel": {"reason": frozenset({"user"})}}
_EDGE_VALUES: Final = {**_CANCEL_USER, "recover_attempt": {"evidence": frozenset({"not_running"})}}
_NEITHER: Final = frozenset({"cancellation_candidates", "converge_cancellation"})
_LEASES: Final = frozenset({"claim_lease", "renew_lease", "release_lease"})

EDGE: Final = Surface(commands=frozenset(T.COMMAND_FAMILY) - _NEITHER - _LEASES, omitted_arguments=_NO_CURSOR,
                      argument_values=_EDGE_VALUES,
                      result_keys=_RESULT_KEYS, error_detail="code", executor_types=frozenset({"local_process"}),
                      admission_evidence=True, profile="edge")
CLUSTER: Final = Surface(commands=frozenset(T.COMMAND_FAMILY) - _NEITHER, omitted_arguments=_NO_CURSOR,
                         argument_values=_CANCEL_USER,
                         result_keys=_RESULT_KEYS, error_detail="code", executor_types=frozenset({"remote_worker"}),
                         admission_evidence=True, profile="cluster")

PROFILES: Final = {"edge": EDGE, "cluster": CLUSTER}


def profile(name: str) -> Surface:
    """The named profile's surface; KeyError names the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"no profile {name!r}; known: {', '.join(PROFILES)}") from None
