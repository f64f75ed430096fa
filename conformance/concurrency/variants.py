"""Backend variants for the concurrency check: the real PostgreSQL backend and a deliberately broken one.

The broken variant is what the check must catch: it takes none of the locks of storage.md §6.3 (no
attempt-authority locks, so convergence runs without its try-locks, and no row locks on Runs,
StepRuns, attempts or leases), runs at READ COMMITTED, and its Run, attempt and lease
compare-and-sets ignore the version predicates (they re-read the row and overwrite whatever is
there). SERIALIZABLE alone would still save it, which is why the isolation is lowered too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qlwf.impl.postgres.session import PgSession
from qlwf.impl.postgres.store import PgStore

Record = dict[str, Any]


class UnlockedBlindStore(PgStore):
    def lock_attempt_authority(self, attempt_id: str) -> None:
        pass

    def try_lock_attempt_authorities(self, attempt_ids: Sequence[str]) -> bool:
        return True

    def lock_run(self, run_id: str) -> None:
        pass

    def lock_step_runs(self, run_id: str, step_run_ids: Sequence[str] | None = None) -> None:
        pass

    def lock_attempts(self, attempt_ids: Sequence[str]) -> None:
        pass

    def lock_leases(self, attempt_ids: Sequence[str]) -> None:
        pass

    def cas_run(self, guard: str, old: Record, new: Record) -> None:
        current = self.run(old["id"]) or old
        super().cas_run(guard, old | {"version": current["version"], "eventSequence": current["eventSequence"]}, new)

    def cas_attempt(self, old: Record, new: Record) -> None:
        current = self.attempt(old["id"]) or old
        blind = old | {k: current[k] for k in ("status", "callbackSequence") if k in current}
        blind.pop("leaseGeneration", None)
        if "leaseGeneration" in current:
            blind["leaseGeneration"] = current["leaseGeneration"]
        super().cas_attempt(blind, new)

    def cas_lease(self, old: Record, new: Record) -> None:
        current = self.lease(old["attemptId"]) or old
        super().cas_lease(old | {k: current[k] for k in ("status", "version", "leaseGeneration")}, new)


@dataclass(frozen=True)
class Variant:
    description: str
    store_factory: Callable[[PgSession], PgStore]
    isolation: str


VARIANTS: dict[str, Variant] = {
    "correct": Variant("the PostgreSQL backend as specified", PgStore, "SERIALIZABLE"),
    "broken": Variant("no advisory or row locks, READ COMMITTED, version-blind compare-and-set",
                      UnlockedBlindStore, "READ COMMITTED"),
}
