"""records.md §2 as data: schema strings, digest domains, numeric limits, enumerations, the derived
status sets and the fixed codes (read through `model/tables.py`, the one name every reader imports)."""

from __future__ import annotations

from typing import Final

# --- records.md §2.1 schema strings -----------------------------------------------------------
SCHEMA_PLAN: Final = "qinglong/plugin-package-workflow-execution-plan@v1"
SCHEMA_ADMISSION_RECEIPT: Final = "qinglong/plugin-package-workflow-admission-receipt@v1"
SCHEMA_FRONTIER: Final = "qinglong/plugin-package-workflow-frontier@v1"
SCHEMA_STEP_RUN: Final = "qinglong/step-run@v1"
SCHEMA_STEP_RUN_MUTATION: Final = "qinglong/step-run-mutation@v1"
SCHEMA_TASK_RECEIPT: Final = "qinglong/plugin-package-workflow-task-attempt-admission@v1"
SCHEMA_TASK_RECOVERY: Final = "qinglong/plugin-package-workflow-task-recovery@v1"
SCHEMA_CANCELLATION: Final = "qinglong/plugin-package-workflow-cancellation-convergence@v1"

# --- records.md §2.2 domains ---------------------------------------------------------------------
DOMAIN_PLAN: Final = "qinglong/plugin-package-workflow-execution-plan-digest@v1"
DOMAIN_DEFINITION: Final = "qinglong/plugin-package-workflow-definition-digest@v1"
DOMAIN_ADMISSION_RECEIPT: Final = "qinglong/plugin-package-workflow-admission-receipt-digest@v1"
DOMAIN_FRONTIER_ID: Final = "qinglong/plugin-package-workflow-frontier-id@v1"
DOMAIN_STEP_RUN: Final = "qinglong/step-run-digest@v1"
DOMAIN_STEP_RUN_MUTATION: Final = "qinglong/step-run-mutation-digest@v1"
DOMAIN_TASK_ATTEMPT_ID: Final = "qinglong/plugin-package-workflow-task-attempt-id@v1"
DOMAIN_TASK_RECEIPT: Final = "qinglong/plugin-package-workflow-task-attempt-receipt@v1"
DOMAIN_TASK_RECOVERY_ID: Final = "qinglong/plugin-package-workflow-task-recovery-id@v1"
DOMAIN_CANCELLATION_ID: Final = "qinglong/plugin-package-workflow-cancellation-convergence-id@v1"
DOMAIN_CANCEL_REQUEST_ID: Final = "qinglong/plugin-package-workflow-cancel-request-id@v1"
DOMAIN_TASK_EXECUTION_ID: Final = "qinglong/plugin-package-workflow-task-execution-id@v1"

# --- records.md §2.3 numeric limits --------------------------------------------------------------
MAX_WORKFLOW_STEPS: Final = 128
MAX_STEP_RUNS_PER_RUN: Final = 128
MAX_STEP_RUN_ATTEMPTS: Final = 64
MAX_RUN_ATTEMPTS: Final = 8192
MAX_PLAN_BYTES: Final = 262144
MAX_ADMISSION_RECEIPT_BYTES: Final = 262144
MAX_TASK_RECEIPT_BYTES: Final = 16384
MAX_STEP_RUN_JSON_BYTES: Final = 16384
MAX_EVENT_PAYLOAD_BYTES: Final = 16384
MAX_FRONTIER_PAGE: Final = 64
MAX_TASK_ATTEMPT_PAGE: Final = 64
MAX_CANCELLATION_PAGE: Final = 128
MAX_CANCELLATION_PAGES_PER_CYCLE: Final = 64
CANCELLATION_CYCLE_DEFAULT_PAGE_SIZE: Final = 32
CANCELLATION_CYCLE_DEFAULT_MAX_PAGES: Final = 4
LEASE_DURATION_MIN_MS: Final = 5000
LEASE_DURATION_MAX_MS: Final = 600000
INT31_MAX: Final = 2147483647
RECOVERY_RUN_VERSION_MAX: Final = 2147483644
PG_TRANSACTION_TRIES: Final = 3
PG_STATEMENT_TIMEOUT_MS: Final = 5000
PG_LOCK_TIMEOUT_MS: Final = 1000
PG_IDLE_IN_TRANSACTION_TIMEOUT_MS: Final = 10000
SQLITE_MAX_PENDING_OPERATIONS: Final = 256

# --- records.md §2.4 enumerations ----------------------------------------------------------------
RUN_STATUSES_ALL: Final = (
    "created", "queued", "dispatching", "running", "waiting_approval", "retry_wait", "lost",
    "succeeded", "failed", "cancelled", "timed_out",
)
RUN_STATUSES: Final = ("running", "succeeded", "failed", "cancelled", "timed_out")
CANCEL_REASONS: Final = ("user", "policy", "shutdown", "reconcile", "timeout")
STEP_STATUSES: Final = (
    "pending", "ready", "waiting_approval", "running", "lost",
    "succeeded", "failed", "skipped", "cancelled", "timed_out",
)
STEP_KINDS: Final = ("task", "tool", "model", "agent", "condition", "approval", "subworkflow")
ATTEMPT_STATUSES: Final = (
    "claimed", "starting", "running", "succeeded", "failed", "cancelled", "timed_out", "lost",
)
LEASE_STATUSES: Final = ("leased", "released", "completed")
WORKER_RELEASE_REASONS: Final = ("declined", "shutdown", "start_failed", "capacity_changed")
RELEASE_REASONS: Final = (*WORKER_RELEASE_REASONS, "lease_expired")
ACTOR_TYPES: Final = (
    "user", "api_app", "trigger", "agent", "mcp_client", "worker", "executor", "system",
    "legacy_shell", "scheduler", "reconciler", "compatibility",
)
EXECUTOR_TYPES: Final = ("local_process", "remote_worker")
EXECUTION_ORIGINS: Final = (
    "manual", "scheduled_system", "scheduled_node", "once", "boot", "grpc", "subscription",
    "system", "script", "legacy_import",
)
EXECUTION_OWNERS: Final = ("legacy", "runtime")
RECOVERY_REASONS: Final = ("unstarted_claim_expired", "execution_not_running")
RECOVERY_EVIDENCE: Final = ("not_running", "running", "unknown")

TRIGGER_TYPE: Final = "plugin_package_workflow"
EXECUTION_ORIGIN: Final = "system"
EXECUTION_OWNER: Final = "runtime"
EXECUTION_SCOPE: Final = "workflow_task"
CANCELLATION_ACTOR: Final = {"type": "reconciler", "id": "runtime:cancellation"}

# --- derived sets (records.md §2.4, state-machines.md §1) ---------------------------------------
TERMINAL_RUN: Final = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
TERMINAL_STEP: Final = frozenset({"succeeded", "failed", "skipped", "cancelled", "timed_out"})
BLOCKING_STEP: Final = frozenset({"failed", "skipped", "cancelled", "timed_out"})
ACTIVE_ATTEMPT: Final = frozenset({"claimed", "starting", "running"})
TERMINAL_ATTEMPT: Final = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})
# ACTIVE_ATTEMPT in the order of ATTEMPT_STATUSES, for storage queries that list it (SQL IN-lists).
ACTIVE_ATTEMPT_STATUSES: Final = tuple(s for s in ATTEMPT_STATUSES if s in ACTIVE_ATTEMPT)

# --- records.md §2.5 fixed codes and texts -------------------------------------------------------
CODE_TEXTS: Final = {
    "EXECUTION_CANCELLED": "Execution was cancelled",
    "EXECUTION_TIMED_OUT": "Execution exceeded its configured timeout",
    "EXECUTION_FAILED": "Execution completed without success",
    "EXECUTOR_START_FAILED": "The Workflow Task Attempt failed before the executor started",
    "CLUSTER_RECOVERY_UNSTARTED_CLAIM_EXPIRED":
        "The Workflow Task Attempt claim expired before execution started",
    "CLUSTER_RECOVERY_EXECUTION_NOT_RUNNING":
        "Trusted execution evidence proved that the Workflow Task Attempt is not running",
}
