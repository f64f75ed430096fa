"""What a command of the model sees: its typed errors, the observation time, the fired rules, and the
writing helpers of commands.md §2.5 (mirrors impl/commands/context.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CommandErrors
from .integrity import counters_overflow
from .records import ATTEMPT_KEYS, LEASE_KEYS, RUN_KEYS, Record, canonical
from .rules import require
from .state import StateWriter
from .steprun import ledger_entry


@dataclass(frozen=True)
class CommandContext(CommandErrors):
    """One command's run in the model: its typed errors, the observation time and the fired rules."""

    now: int
    rules: list[str]

    def fire(self, rule_id: str) -> None:
        """Record that the row `rule_id` of a rule table decided this command (UnknownRule if none has it)."""
        self.rules.append(require(rule_id))


# ------------------------------------------------------------------------------------------------
# Writing helpers (commands.md §2.5)
def ceiling(ctx: CommandContext, *values: int) -> None:
    overflow = counters_overflow(*values)
    if overflow is not None:
        raise ctx.unavailable(*overflow)


def bump_run(tx: StateWriter, run: Record, k: int) -> Record:
    new = dict(run)
    new["version"] = run["version"] + k
    new["eventSequence"] = run["eventSequence"] + k
    return new


def put_run(tx: StateWriter, run: Record) -> None:
    tx.table("runs")[run["id"]] = canonical(run, RUN_KEYS)


def put_mutation(tx: StateWriter, mutation: Record) -> None:
    tx.table("step_runs")[mutation["stepRun"]["id"]] = mutation["stepRun"]
    tx.append_event(mutation["event"])
    tx.table("mutations")[mutation["mutationId"]] = ledger_entry(mutation, tx.now)


def put_attempt(tx: StateWriter, attempt: Record) -> None:
    tx.table("attempts")[attempt["id"]] = canonical(attempt, ATTEMPT_KEYS)


def put_lease(tx: StateWriter, lease: Record) -> None:
    tx.table("leases")[lease["attemptId"]] = canonical(lease, LEASE_KEYS)


class RunCounter:
    """In-memory Run counters for one command: APPEND and MUTATE advance them (commands.md §2.5)."""

    def __init__(self, run: Record) -> None:
        self.run = run
        self.version = run["version"]
        self.sequence = run["eventSequence"]

    def next(self) -> tuple[int, int]:
        self.version += 1
        self.sequence += 1
        return self.version, self.sequence

    def context(self, event_id: str, actor: Record) -> Record:
        return {"expectedRunVersion": self.version, "expectedRunEventSequence": self.sequence, "eventId": event_id,
                "dedupeKey": event_id, "actor": actor}


def worker_actor(worker_id: str) -> Record:
    return {"type": "worker", "id": worker_id}
