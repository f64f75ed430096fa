"""`qlwf audit`: check every Workflow Run stored in a live SQLite or PostgreSQL database against the model.

The database is opened read-only (impl/*/readonly.py); the checks are qlwf/review/audit.py. Only workflow Runs
(trigger type `plugin_package_workflow`) and their records are read: ql3's Runs table holds other Runs too.
Exit 0 only if every audited Run is clean, 1 if any Run has a finding, 2 on input that cannot be audited (one
line), 3 when the database holds no workflow Run (an audit of nothing is no evidence; decisions Q-118).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import AbstractContextManager
from typing import Any

from qlwf.conformance.report.visible import visible
from qlwf.impl.readonly import StoredRuns, UnreadableDatabase
from qlwf.review.audit import RunAudit, audit_parts
from qlwf.support.progress import Progress


class AuditProgress(Progress):
    """The shared progress display, counting Runs and events instead of traces and steps. Quiet on a quick
    audit: the first line comes after one display interval, and the closing line only after one was shown."""

    def __init__(self, label: str, total: int) -> None:
        super().__init__(label, total)
        self._shown = self.start
        self._any_shown = False

    def _show(self, *, final: bool) -> None:
        if final and not self._any_shown:
            return
        self._any_shown = True
        super()._show(final=final)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        return f"{self.label}: {self.done}/{self.total} Runs, {self.steps} events, {elapsed:.0f} s"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("audit", help="audit a live ql3 database read-only against the model",
                              description="Open a SQLite file or PostgreSQL database in the ql3 layout read-only "
                              "and check every Workflow Run's history against the model: events and ledger "
                              "entries as legal model steps in sequence order, counters, digests and identifier "
                              "recipes, stored state = replayed state, and every invariant INV-1…31.")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--sqlite", metavar="PATH", help="SQLite database file (opened with mode=ro)")
    source.add_argument("--pg", metavar="DSN", help="PostgreSQL conninfo or URI (READ ONLY transaction)")
    p.add_argument("--run", metavar="ID", help="audit only this Run")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a line per Run")
    p.set_defaults(func=main)


def _open(args: argparse.Namespace) -> AbstractContextManager[StoredRuns]:
    if args.sqlite is not None:
        from qlwf.impl.sqlite import readonly as sqlite_readonly

        return sqlite_readonly.open_runs(args.sqlite)
    from qlwf.impl.postgres import readonly as pg_readonly  # psycopg only when asked for

    return pg_readonly.open_runs(args.pg)


def main(args: argparse.Namespace) -> int:
    try:
        with _open(args) as stored:  # Run by Run: the memory of the largest Run, not of the database
            progress = AuditProgress("audit", 1 if args.run is not None else stored.workflow_runs)

            def on_run(result: RunAudit) -> None:
                progress.advance(steps=result.events)

            results = audit_parts(stored.parts(args.run), on_run=on_run)
            progress.close()
            others = stored.other_runs
    except UnreadableDatabase as e:
        print(f"qlwf audit: {e}", file=sys.stderr)
        return 2
    not_audited = f"; {others} Runs of other trigger types not audited" if others else ""
    if args.run is not None and not results:
        print(f"qlwf audit: no workflow Run {args.run!r} in the database{not_audited}", file=sys.stderr)
        return 2
    if not results:
        print(f"qlwf audit: no workflow Run in the database{not_audited}: nothing audited, no verdict",
              file=sys.stderr)
        return 3
    clean = sum(r.ok for r in results)
    if args.json:
        print(json.dumps({"ok": clean == len(results), "runs": len(results), "clean": clean, "otherRuns": others,
                          "results": [r.to_json() for r in results]}, ensure_ascii=False))
    else:
        for r in results:
            if r.first is None:
                print(visible(f"{r.run_id}: ok ({r.events} events)", keep=""))
            else:
                more = f" (+{len(r.findings) - 1} more)" if len(r.findings) > 1 else ""
                print(visible(f"{r.run_id}: FAIL {r.first}{more}", keep=""))  # stored text is shown, not obeyed
        print(f"audit: {len(results)} Runs, {clean} clean, {len(results) - clean} with findings{not_audited}")
    return 0 if clean == len(results) else 1
