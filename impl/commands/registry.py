"""The writing commands and how one of them runs inside a backend's transaction (storage.md §6–§7)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qlwf.impl.port import Clock
from qlwf.model.errors import CommandErrors
from qlwf.model.records import Record

from . import cmd_admission, cmd_cancel, cmd_frontier, cmd_recovery, cmd_tasks, cmd_worker
from .context import StoreTx
from .loads import Loads
from .store import Store


@dataclass(frozen=True)
class WritingCommand:
    prepare: Callable[[CommandErrors, Any], Any]  # argument checks, before any storage work
    lock: Callable[[Store, CommandErrors, Any], None]  # the locks of storage.md §6.3
    run: Callable[[StoreTx, Any], Record]  # checks and effects, with `now` read under the locks


def _worker(name: str) -> WritingCommand:
    return WritingCommand(cmd_worker.prepare, cmd_worker.lock, cmd_worker.COMMANDS[name])


WRITING_COMMANDS: dict[str, WritingCommand] = {
    "admit_workflow": WritingCommand(cmd_admission.prepare, cmd_admission.lock, cmd_admission.run),
    "advance_frontier": WritingCommand(cmd_frontier.prepare, cmd_frontier.lock, cmd_frontier.run),
    "admit_task_attempt": WritingCommand(cmd_tasks.prepare, cmd_tasks.lock, cmd_tasks.run),
    **{name: _worker(name) for name in cmd_worker.COMMANDS},
    "recover_attempt": WritingCommand(cmd_recovery.prepare, cmd_recovery.lock, cmd_recovery.run),
    "request_cancel": WritingCommand(cmd_cancel.prepare_request, cmd_cancel.lock_request, cmd_cancel.request_cancel),
    "converge_cancellation": WritingCommand(cmd_cancel.prepare_converge, cmd_cancel.lock_converge,
                                            cmd_cancel.converge_cancellation),
}
CONVERGE = WRITING_COMMANDS["converge_cancellation"]


def run_command(store: Store, fail: CommandErrors, clock: Clock, command: WritingCommand, prepared: Any,
                on_now: Callable[[int], None] | None = None) -> Record:
    """Inside an open transaction: take the locks, read `now` once under them (D-8), run the command.

    `on_now` receives the observation time as soon as it is read (the concurrency harness logs it).
    """
    command.lock(store, fail, prepared)
    now = clock.read(store.database_time)
    if on_now is not None:
        on_now(now)
    return command.run(StoreTx(store, Loads(store, fail), fail, now), prepared)
