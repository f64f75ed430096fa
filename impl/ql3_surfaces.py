"""The surfaces of ql3's two storage adapters, as data in the `hello` wire form (docs/protocol.md "Partial
drivers"; the facts: docs/ql3-adapters.md §1, §4, §5), stated once: the restricted SQLite reference driver
(impl/sqlite/restricted.py) declares EDGE, and the harness's profiles (conformance/exec/profiles.py) read
both.

* **edge** (`ql3-local-sqlite`): no dispatch leases for workflow attempts, so no claim_lease, renew_lease
  (only its timeout part exists) or release_lease (§1.1, §4 item 1); no cancellation_candidates and no
  per-Run converge_cancellation (§4 item 5); the convergence page and the recovery candidates take
  `{limit}` only, no cursor (§1.1, §4 item 6); cancel intent is for `user` only (§4 item 4), and recovery
  takes a reason meaning "not running", so only the `not_running` evidence (§4 item 3); the page returns
  its counters only (§4 item 6); task admission answers `{status, receipt}` without `attempt` (§4 item
  10); errors carry a code, mostly no reason (§5); only `local_process` attempts (§4 item 1); the binding
  is derived from the stored Task reconciliation receipt and execution revision (§2, task-attempts.md §3A).
* **cluster** (`ql3-cluster-postgres`): the dispatch leases exist, and recovery's evidence processor
  answers all three kinds of evidence (§4 item 3); otherwise the same gaps, and only `remote_worker`
  attempts (§1.2, §4 item 1).

frontier_candidates and task_candidates keep their cursors on both (§1: "as on Edge", `after?`).
"""

from __future__ import annotations

from typing import Any, Final

from qlwf.model import tables as T

PAGE_COUNTERS: Final = ("scanned", "settledRuns", "settledAttempts", "blocked", "hasMore")
_NEITHER: Final = ("cancellation_candidates", "converge_cancellation")
_LEASES: Final = ("claim_lease", "renew_lease", "release_lease")

EDGE_COMMANDS: Final = tuple(c for c in T.COMMAND_FAMILY if c not in (*_NEITHER, *_LEASES))
CLUSTER_COMMANDS: Final = tuple(c for c in T.COMMAND_FAMILY if c not in _NEITHER)

_COMMON: Final[dict[str, Any]] = {
    "omittedArguments": {"converge_cancellation_page": ["after"], "recovery_candidates": ["after"]},
    "resultKeys": {"admit_task_attempt": ["status", "receipt"], "converge_cancellation_page": list(PAGE_COUNTERS)},
    "errorDetail": "code", "admissionEvidence": True}
EDGE_SURFACE: Final[dict[str, Any]] = {
    **_COMMON,
    "argumentValues": {"recover_attempt": {"evidence": ["not_running"]}, "request_cancel": {"reason": ["user"]}},
    "executorTypes": ["local_process"], "profile": "edge"}
CLUSTER_SURFACE: Final[dict[str, Any]] = {
    **_COMMON, "argumentValues": {"request_cancel": {"reason": ["user"]}},
    "executorTypes": ["remote_worker"], "profile": "cluster"}
