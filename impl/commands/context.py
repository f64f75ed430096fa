"""What a command sees inside its transaction: the store, the loads, its errors and `now`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qlwf.model.errors import CommandErrors
from qlwf.model.integrity import counters_overflow
from qlwf.model.records import Record

from .loads import Loads
from .store import Store


def worker_actor(worker_id: str) -> Record:
    return {"type": "worker", "id": worker_id}


@dataclass
class StoreTx:
    """One writing command inside a storage transaction: the store, its integrity loads, the
    command's typed errors and the observation time read under the locks."""

    store: Store
    loads: Loads
    fail: CommandErrors
    now: int

    def ceiling(self, *values: int) -> None:
        """Counter ceiling (commands.md §2.5): no write may push a counter past 2147483647."""
        overflow = counters_overflow(*values)
        if overflow is not None:
            raise self.fail.unavailable(*overflow)


class RunCounter:
    """In-memory Run counters of one command; APPEND and MUTATE advance them (commands.md §2.5)."""

    def __init__(self, run: Record) -> None:
        self.version = run["version"]
        self.sequence = run["eventSequence"]

    def next(self) -> tuple[int, int]:
        self.version += 1
        self.sequence += 1
        return self.version, self.sequence

    def context(self, event_id: str, actor: Record) -> dict[str, Any]:
        return {"expectedRunVersion": self.version, "expectedRunEventSequence": self.sequence, "eventId": event_id,
                "dedupeKey": event_id, "actor": actor}
