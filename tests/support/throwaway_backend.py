"""A throwaway backend, added by the five steps of docs/architecture.md
(tests/conformance/backends/test_architecture.py).

Step 1 is free: it is the SQLite package (impl/sqlite) again, on a file database in WAL mode
instead of a private in-memory one. Steps 2-4 are below; step 5 is left undone on purpose: its gate
check has no evidence floors, so the gate must judge it unknown.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from qlwf.conformance import backends
from qlwf.impl.port import CommandPort
from qlwf.impl.sqlite.adapter import SqliteAdapter

NAME = "throwaway"
CHECK = "conform-throwaway"


class FileSqliteBackend:
    """Step 2, the factory: a fresh file database per trace, all removed at shutdown."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="qlwf-throwaway-"))
        self._numbers = itertools.count()

    def open(self) -> CommandPort:
        return SqliteAdapter(self.directory / f"trace-{next(self._numbers)}.db")

    def shutdown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


# Step 3: a local file needs no provisioning (the default Provisioner). Step 4: one registry entry.
backends.register(
    NAME, FileSqliteBackend, "SQLite on a file database per trace (a test's throwaway backend)",
    capabilities=frozenset({"snapshot", "lost_commits", "concurrency", "transaction_log"}),
    concurrency="qlwf.impl.sqlite.concurrency:SqliteConcurrencyHost",
    gate=(backends.GateEntry(CHECK, "conform", "corpus + generated traces, the throwaway backend vs model",
                             {"corpus": False, "traces": 3}, {"corpus": False, "traces": 3}),))
