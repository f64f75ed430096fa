"""A SQLite backend with one planted bug, for the tests that need a backend the harness must fail."""

from __future__ import annotations

from typing import Any

from qlwf.impl.port import CommandPort
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.store import SqliteStore


class LedgerSkippingStore(SqliteStore):
    """Broken: forgets the ledger entries of frontier mutations."""

    def insert_mutation(self, entry: dict[str, Any]) -> None:
        if not entry["mutationId"].startswith("workflow-frontier:"):
            super().insert_mutation(entry)


class BrokenBackend:
    """A backend factory whose stores skip the frontier's ledger entries."""

    def open(self) -> CommandPort:
        return SqliteAdapter(store_factory=LedgerSkippingStore)

    def shutdown(self) -> None:
        """Nothing to release: each store closes itself."""
