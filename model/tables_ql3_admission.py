"""task-attempts.md §3A as data: ql3's input form of the task attempt admission builder, its schemas,
domains and limits, and the check ladder A1–A18 with ql3's reason texts."""

from __future__ import annotations

from typing import Final, NamedTuple

SCHEMA_TASK_RECONCILIATION: Final = "qinglong/plugin-package-task-reconciliation@v1"
DOMAIN_TASK_RECONCILIATION_RECEIPT: Final = "qinglong/plugin-package-task-reconciliation-receipt@v1"
DOMAIN_LOCAL_EXECUTION_REVISION: Final = "qinglong.local-task-execution-revision.v1"
DOMAIN_CLUSTER_EXECUTION_REVISION: Final = "qinglong.cluster-task-execution-revision.v1"
SCHEMA_COMMAND_EXECUTION_PLAN: Final = "qinglong/command-execution@v1"
RECONCILIATION_DISPOSITIONS: Final = ("already_disabled", "created", "disabled", "retained", "updated")
# The dispositions whose item a Task attempt may execute (check A16).
EXECUTABLE_DISPOSITIONS: Final = ("created", "retained", "updated")
MAX_RECONCILIATION_ITEMS: Final = 512
MAX_CLUSTER_REVISION_BYTES: Final = 98304
MAX_REVISION_TIMEOUT_MS: Final = 31536000000
MAX_COMMAND_ARGS: Final = 256
MAX_COMMAND_ARG_BYTES: Final = 16384
MAX_COMMAND_BYTES: Final = 65536
MAX_PATH_BYTES: Final = 4096
MAX_ENVIRONMENT_ENTRIES: Final = 256
MAX_ENVIRONMENT_BYTES: Final = 65536
MAX_SECRET_REF_BYTES: Final = 512
MAX_PLACEMENT_LIST: Final = 16
MAX_PLACEMENT_TOKEN_CHARS: Final = 64
MAX_LABEL_KEY_CHARS: Final = 128
MAX_LABEL_VALUE_CHARS: Final = 256
MAX_PREFERENCE_WEIGHT: Final = 100
SHELLS: Final = ("/bin/sh", "/bin/bash")
REMOTE_WORKER_EXECUTOR: Final = "remote-worker"
PLACEMENT_STRING_LISTS: Final = ("architectures", "operatingSystems", "executors", "features")
PLACEMENT_REQUIRED_KEYS: Final = (
    "architectures", "operatingSystems", "executors", "runtimes", "labels", "minMemoryBytes", "minDiskBytes",
    "gpuVendor", "features",
)


class AdmissionCheck(NamedTuple):
    """One row of task-attempts.md §3A's check ladder: its id, what it checks, and ql3's reason text,
    which is the oracle's error message (so messages compare with ql3's detail text)."""

    id: str
    checks: str
    reason_text: str


QL3_ADMISSION_CHECKS: Final = (
    AdmissionCheck("A1", "the input is a JSON object", "admission input must be an object"),
    AdmissionCheck("A2", "exact input keys", "admission input shape is invalid"),
    AdmissionCheck("A3", "plan, stepRun and taskReconciliation normalize", "durable Workflow evidence is invalid"),
    AdmissionCheck("A4", "execution is an object whose executorType is local_process or remote_worker",
                   "execution revision executorType is invalid"),
    AdmissionCheck("A5", "execution normalizes as that executor's revision, digest included",
                   "execution revision is invalid"),
    AdmissionCheck("A6", "local only: taskRevision is IDENTIFIER-shaped", "execution revision taskRevision is invalid"),
    AdmissionCheck("A7", "local only: taskRevision is qltd:v1:R:DIGEST (R without upper bound)",
                   "execution revision Task identity is inconsistent"),
    AdmissionCheck("A8", "execution.projectId is IDENTIFIER-shaped", "execution revision projectId is invalid"),
    AdmissionCheck("A9", "execution.taskId is IDENTIFIER-shaped", "execution revision taskId is invalid"),
    AdmissionCheck("A10", "attemptNumber is an int in 1..8192", "attemptNumber is invalid"),
    AdmissionCheck("A11", "admittedAtMs is a TIMESTAMP", "admittedAtMs is invalid"),
    AdmissionCheck("A12", "the Run checks of §3 step 4, except the counter bound",
                   "Run does not match the admitted Workflow aggregate"),
    AdmissionCheck("A13", "the StepRun checks of §3 step 5", "StepRun is not one exact ready Task from the plan"),
    AdmissionCheck("A14", "the receipt's project, package, generation and digests equal plan.target's",
                   "Task reconciliation does not match the immutable plan"),
    AdmissionCheck("A15", "pkg: + packageName + : + the plan step's taskId is IDENTIFIER-shaped",
                   "runtime Task identity is invalid"),
    AdmissionCheck("A16", "an executable receipt item for the Task, and the revision is that item's",
                   "execution binding is not the reconciled Task revision"),
    AdmissionCheck("A17", "admittedAtMs >= plan.plannedAtMs, receipt.committedAtMs and stepRun.updatedAtMs",
                   "admission time precedes durable evidence"),
    AdmissionCheck("A18", "run.version and run.eventSequence < 2147483647", "Run counters overflowed"),
)
