"""Identifier recipes (records.md §7). Every id is a pure function of durable facts."""

from __future__ import annotations

from . import tables as T
from .canonical import id_hash

# Mutation-id prefixes of the StepRun paths that are not built in one recipe below (records.md §7).
ADMISSION_MUTATION_PREFIX = "wfm:"
FRONTIER_MUTATION_PREFIX = "workflow-frontier:"
WORKER_MUTATION_PREFIX = "wxm:"
CONVERGE_MUTATION_PREFIX = "wcm:"


def admission_event_id(pd: str) -> str:
    return f"wfa:{pd[:32]}"


def admission_step_event_id(pd: str, i: int) -> str:
    return f"wfe:{pd[:27]}:{i}"


def admission_step_mutation_id(pd: str, i: int) -> str:
    return f"{ADMISSION_MUTATION_PREFIX}{pd[:56]}:{i}"


def frontier_step_hash(pd: str, step_run_id: str, version: int, target: str) -> str:
    return id_hash(T.DOMAIN_FRONTIER_ID, pd, step_run_id, version, target)


def frontier_step_ids(pd: str, step_run_id: str, version: int, target: str) -> tuple[str, str]:
    """(mutationId, eventId) of a frontier step transition."""
    h = frontier_step_hash(pd, step_run_id, version, target)
    return f"{FRONTIER_MUTATION_PREFIX}{h}", f"wff:{h[:32]}"


def frontier_terminal_event_id(pd: str, run_version: int, status: str) -> str:
    return f"wft:{id_hash(T.DOMAIN_FRONTIER_ID, pd, 'terminal', run_version, status)[:32]}"


def task_attempt_ids(pd: str, step_run_id: str, step_run_version: int) -> tuple[str, str]:
    """(attemptId, admission eventId) of the attempt admitted at this ready epoch."""
    a = id_hash(T.DOMAIN_TASK_ATTEMPT_ID, pd, step_run_id, step_run_version)
    return f"wta:{a[:32]}", f"wte:{a[:32]}"


def recovery_hash(run_id: str, attempt_id: str, callback_sequence: int, step_run_id: str,
                  step_run_version: int, reason: str) -> str:
    return id_hash(T.DOMAIN_TASK_RECOVERY_ID, run_id, attempt_id, callback_sequence, step_run_id,
                   step_run_version, reason)[:32]


RECOVERY_PREFIXES = {
    "attempt_event": "wra:",
    "requeue_mutation": "wrq:",
    "requeue_event": "wqe:",
    "lost_mutation": "wrl:",
    "lost_event": "wle:",
    "failed_mutation": "wrf:",
    "failed_event": "wfe:",
}

# StepRun path -> the prefixes of the mutation ids it writes (a StepRun's lastMutationId names its path).
STEP_MUTATION_PREFIXES = {
    "admit": (ADMISSION_MUTATION_PREFIX,),
    "frontier": (FRONTIER_MUTATION_PREFIX,),
    "worker": (WORKER_MUTATION_PREFIX,),
    "recover": tuple(RECOVERY_PREFIXES[f"{k}_mutation"] for k in ("requeue", "lost", "failed")),
    "converge": (CONVERGE_MUTATION_PREFIX,),
}


def cancellation_hash(run_id: str, cancel_requested_at_ms: int, kind: str, target_id: str, epoch: int) -> str:
    return id_hash(T.DOMAIN_CANCELLATION_ID, run_id, cancel_requested_at_ms, kind, target_id, epoch)[:32]


def cancel_request_event_id(run_id: str, cancel_requested_at_ms: int, reason: str) -> str:
    return f"wcq:{id_hash(T.DOMAIN_CANCEL_REQUEST_ID, run_id, cancel_requested_at_ms, reason)[:32]}"


TASK_EXECUTION_ATTEMPT_KINDS = (
    "lease_claimed", "lease_released", "attempt_starting", "attempt_running", "attempt_terminal",
    "timeout_requested",
)
TASK_EXECUTION_STEP_KINDS = ("step_running", "step_terminal")


def task_execution_hash(run_id: str, attempt_id: str, lease_generation: int, kind: str) -> str:
    return id_hash(T.DOMAIN_TASK_EXECUTION_ID, run_id, attempt_id, lease_generation, kind)[:32]


def task_execution_event_id(run_id: str, attempt_id: str, lease_generation: int, kind: str) -> str:
    assert kind in TASK_EXECUTION_ATTEMPT_KINDS
    return f"wxa:{task_execution_hash(run_id, attempt_id, lease_generation, kind)}"


def task_execution_step_ids(run_id: str, attempt_id: str, lease_generation: int, kind: str) -> tuple[str, str]:
    """(mutationId, eventId) of a worker-path StepRun mutation."""
    assert kind in TASK_EXECUTION_STEP_KINDS
    x = task_execution_hash(run_id, attempt_id, lease_generation, kind)
    return f"{WORKER_MUTATION_PREFIX}{x}", f"wxe:{x}"
