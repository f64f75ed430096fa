"""What the read-only readers of a stored database (impl/*/readonly.py) share: what they raise on input they
cannot audit, the keys they add to a snapshot, and the Run-by-Run merge of their ordered reads."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from qlwf.impl.port import SNAPSHOT_KINDS
from qlwf.model.tables import TRIGGER_TYPE


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
# The generic ql3 tables §9 lets an implementation widen: snapshot kind and key column.
GENERIC_TABLES: tuple[tuple[str, str], ...] = (("runs", "id"), ("attempts", "id"), ("leases", "attempt_id"))

Record = dict[str, Any]
Row = tuple[Any, ...]
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


class RunByRun(ABC):
    """What both readers' Run-by-Run reads share: queries restricted to workflow Runs and ordered by Run id
    first, and the streams of values in columns beyond the v1 subset. A dialect supplies how it spells a
    parameter, a collation and the Runs table, runs a query, and lists a table's columns."""

    mark: str  # the parameter placeholder
    collate: str  # the collation that orders text by code point
    runs_table: str  # the Runs table as the dialect names it in SQL
    percent = "%"  # a literal % in SQL text (psycopg reads `%` as the start of a placeholder)

    @abstractmethod
    def _execute(self, sql: str, params: tuple[Any, ...]) -> Iterator[Row]:
        """The rows of one query, fetched as they are consumed."""

    @abstractmethod
    def _generic(self, kind: str) -> tuple[str, tuple[str, ...], list[str]]:
        """A generic table of GENERIC_TABLES: its SQL name, its v1 columns, and the columns it has."""

    def by_workflow_run(self, sql: str, runs: bool = False, also: str = "") -> str:
        """`sql` (`SELECT cols FROM table ORDER BY …` of a table with run_id, or of the Runs table itself) as rows
        (run id, cols…) of workflow Runs only, ordered by run id first: ql3's generic Runs table also holds
        Runs of other trigger types (cron, manual, …), with their attempts and events, which are none of the
        model's (decisions Q-118, Q-121). The collation is spelled out: a foreign schema may declare the
        column otherwise, and the merge needs code-point order. First parameter: the workflow trigger type;
        `also`: a further condition, ANDed, whose parameters follow."""
        head, order = sql.rsplit(" ORDER BY ", 1)
        run = "id" if runs else "run_id"
        where = (f"trigger_type = {self.mark}" if runs
                 else f"run_id IN (SELECT id FROM {self.runs_table} WHERE trigger_type = {self.mark})")
        head = head.replace("SELECT ", f"SELECT {run}, ", 1)
        return f"{head} WHERE {where}{' AND ' + also if also else ''} ORDER BY {run} COLLATE {self.collate}, {order}"

    def _query(self, sql: str, runs: bool, run_id: str | None, also: str = "") -> Iterator[Row]:
        """The rows of `sql` for every workflow Run, or for `run_id`'s alone."""
        conditions = [also] if also else []
        if run_id is not None:
            conditions.append(f"{'id' if runs else 'run_id'} = {self.mark}")
        params = (TRIGGER_TYPE, *((run_id,) if run_id is not None else ()))
        return self._execute(self.by_workflow_run(sql, runs, " AND ".join(conditions)), params)

    def _extra_streams(self, run_id: str | None) -> list[Stream]:
        """Per column beyond the v1 subset of a generic table, the workflow rows where it is not NULL (§9)."""
        streams: list[Stream] = []
        for kind, key in GENERIC_TABLES:
            table, v1, present = self._generic(kind)
            for column in (c for c in present if c not in v1):
                name = '"' + column.replace('"', '""').replace("%", self.percent) + '"'  # from the catalog: quoted
                rows = self._query(f"SELECT {key} FROM {table} ORDER BY {key} COLLATE {self.collate}", kind == "runs",
                                   run_id, also=f"{name} IS NOT NULL")
                streams.append((EXTRA_VALUES, extra_values(rows, kind, column)))
        return streams


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
