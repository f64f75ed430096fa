"""Lock phases of the writing commands (storage.md §6.3), run before the clock is read.

A lock phase only acquires locks; it never decides an outcome, so a missing row simply locks
nothing and the command's own checks report it. The only errors raised here are PostgreSQL's
convergence authority errors (`authority_locked`, `authority_drift`), which the model never produces.
"""

from __future__ import annotations

from qlwf.model.errors import CommandErrors

from .store import Store


def run_scope(store: Store, run_id: str, step_run_ids: list[str] | None = None, all_steps: bool = False) -> None:
    """The Run, then all its StepRuns or the given ones (admission, frontier, request_cancel)."""
    store.lock_run(run_id)
    if all_steps:
        store.lock_step_runs(run_id)
    elif step_run_ids:
        store.lock_step_runs(run_id, step_run_ids)


def attempt_scope(store: Store, attempt_id: str) -> None:
    """Worker and recovery commands: authority (blocking), Run, the attempt's StepRun, attempt, lease."""
    store.lock_attempt_authority(attempt_id)
    # runId and stepRunId never change, so reading them before any row lock is safe.
    attempt = store.attempt(attempt_id)
    if attempt is None:
        return
    run_scope(store, attempt["runId"], [attempt["stepRunId"]] if attempt.get("stepRunId") else None)
    store.lock_attempts([attempt_id])
    store.lock_leases([attempt_id])


def convergence_scope(store: Store, fail: CommandErrors, run_id: str) -> None:
    """Try-lock the authority of every active attempt (read before locking), then Run, all StepRuns,
    those attempts and their leases; afterwards no active attempt may lie outside the locked set."""
    locked = sorted(a["id"] for a in store.active_attempts_of_run(run_id))
    if not store.try_lock_attempt_authorities(locked):
        raise fail.conflict("authority_locked", f"an attempt-authority lock of Run {run_id} is held")
    run_scope(store, run_id, all_steps=True)
    store.lock_attempts(locked)
    store.lock_leases(locked)
    # Admission refuses cancelling Runs, so the set can only shrink once intent is recorded.
    drifted = sorted({a["id"] for a in store.active_attempts_of_run(run_id)} - set(locked))
    if drifted:
        raise fail.unavailable("authority_drift", f"active attempts {drifted} appeared outside the locked set")
