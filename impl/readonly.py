"""What the read-only readers of a stored database (impl/*/readonly.py) share: what they raise on input they
cannot audit, the keys they add to a snapshot, and the Run-by-Run merge of their ordered reads."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from qlwf.impl.port import SNAPSHOT_KINDS


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



Record = dict[str, Any]
Part = dict[str, list[Record]]
# One stream of a Run-by-Run read: the part key its records go to, and (run id, record) pairs ordered by run id
# in code-point order, the order of both readers (SQLite's BINARY collation, PostgreSQL's COLLATE "C").
Stream = tuple[str, Iterable[tuple[str, Record]]]
PART_KEYS = (*SNAPSHOT_KINDS, MIRRORS, STORED_JSON, EXTRA_VALUES)


def merge_by_run(runs: Iterable[tuple[str, Record]], streams: Sequence[Stream]) -> Iterator[Part]:
    """One part per Run (a snapshot of that Run's records alone), in the Runs' order, holding each stream's
    records of that Run in the stream's order. One pass over every stream, so a database is audited in the
    memory of its largest Run (decisions Q-121). A row whose run id falls between two Runs' belongs to no
    workflow Run and is passed over, as `split_by_run` leaves it out of every part."""
    heads = [(key, _Head(iter(rows))) for key, rows in streams]
    previous: str | None = None
    for run_id, run in runs:
        if previous is not None and run_id <= previous:  # the merge would misplace rows: refuse, do not guess
            raise ValueError(f"Runs not in code-point order of their ids ({previous!r}, then {run_id!r})")
        previous = run_id
        part: Part = {key: [] for key in PART_KEYS}
        part["runs"].append(run)
        for key, head in heads:
            head.skip_before(run_id)
            part[key] += head.take(run_id)
        yield part


class _Head:
    """A stream with its next row in view."""

    def __init__(self, rows: Iterator[tuple[str, Record]]) -> None:
        self._rows = rows
        self._next = next(rows, None)

    def _advance(self, before: str) -> None:
        self._next = next(self._rows, None)
        if self._next is not None and self._next[0] < before:  # the merge would misplace rows: refuse
            raise ValueError(f"rows not in code-point order of their run ids ({before!r}, then {self._next[0]!r})")

    def skip_before(self, run_id: str) -> None:
        while self._next is not None and self._next[0] < run_id:
            self._advance(self._next[0])

    def take(self, run_id: str) -> Iterator[Record]:
        while self._next is not None and self._next[0] == run_id:
            yield self._next[1]
            self._advance(run_id)


class StoredRuns(Protocol):
    """An open read-only view of one database: its workflow Runs, one at a time."""

    workflow_runs: int  # how many workflow Runs it holds
    other_runs: int  # how many Runs of other trigger types (not read)

    def parts(self, run_id: str | None = None) -> Iterator[Part]:
        """Every workflow Run's part in Run id order (or only `run_id`'s); UnreadableDatabase on a row the
        reader cannot decode."""


def extra_values(rows: Iterable[tuple[Any, ...]], kind: str, column: str) -> Iterator[tuple[str, Record]]:
    """EXTRA_VALUES entries of one column, from rows (run id, key) (a function, so that each stream keeps its
    own kind and column: a generator expression in the readers' loops would see the loop's last ones)."""
    for run_id, key in rows:
        yield run_id, {"runId": run_id, "kind": kind, "key": key, "column": column}


def whole(stored: StoredRuns) -> dict[str, list[Record]]:
    """Every part in one snapshot (each kind in Run order, then key order), with OTHER_RUNS: what tests and
    small stores use; `qlwf audit` goes Run by Run."""
    snap: dict[str, list[Record]] = {key: [] for key in PART_KEYS}
    for part in stored.parts():
        for key, records in part.items():
            snap[key] += records
    snap[OTHER_RUNS] = [{"count": stored.other_runs}]
    return snap
