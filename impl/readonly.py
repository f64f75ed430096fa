"""What the read-only readers of a stored database (impl/*/readonly.py) raise on input they cannot audit."""

from __future__ import annotations


class UnreadableDatabase(Exception):
    """The database cannot be opened read-only, or does not hold the ql3 layout of storage.md."""


# Snapshot key the readers add: each StepRun's stored JSON mirror, {id, runId, json}. The harness snapshot
# rebuilds StepRuns from their columns only; storage.md §3 requires the mirror to agree with them.
MIRRORS = "stepRunMirrors"
# Snapshot key the SQLite reader adds: every stored JSON text, {runId, table, column, key, holds, text}
# (`holds`: the record kind the text holds, "stepRun", "plan", "admissionReceipt", "taskReceipt", or None). storage.md
# §1 stores TEXT holding the canonical JSON; the audit checks the text itself (decisions Q-116). PostgreSQL's
# jsonb keeps no text (it reorders keys and keeps the last of two with one name), so its reader adds none.
STORED_JSON = "storedJson"
# Snapshot key the readers add: [{count}], how many Runs of other trigger types the database holds. ql3's
# generic Runs table holds them beside the workflow Runs; the audit reads and audits only the latter.
OTHER_RUNS = "otherRuns"
# Snapshot key the readers add: every value in a column of the generic Run, attempt and lease tables outside
# the v1 subset, {runId, kind, key, column}; storage.md §9 allows such columns only if always NULL for
# workflow data.
EXTRA_VALUES = "extraColumnValues"
# The generic ql3 tables §9 lets an implementation widen: snapshot kind, key column, the Run's id column.
GENERIC_TABLES: tuple[tuple[str, str, str], ...] = (("runs", "id", "id"), ("attempts", "id", "run_id"),
                                                    ("leases", "attempt_id", "run_id"))


def quote_identifier(name: str) -> str:
    """A column name from the catalog as an SQL identifier (both dialects)."""
    return '"' + name.replace('"', '""') + '"'

