"""`qlwf check`: the correctness gate (one command, clear exit code, JSON / JUnit output)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qlwf.checks import CHECKS
from qlwf.gate import render_table, run_checks, write_json, write_junit


def run(args: argparse.Namespace) -> int:
    selected = [c for c in CHECKS if not args.only or c.name in args.only]
    unknown = set(args.only or ()) - {c.name for c in CHECKS}
    if unknown:
        print(f"unknown check(s): {sorted(unknown)}; known: {[c.name for c in CHECKS]}")
        return 2
    if any(c.name.endswith("-postgres") for c in selected):
        from qlwf.impl.postgres.dsn import check_dsn_env
        from qlwf.impl.postgres.server import PostgresUnavailable

        try:  # a configured but broken server is a usage error, not a skip or a traceback per check
            check_dsn_env()
        except PostgresUnavailable as e:
            print(f"qlwf check: {e}", file=sys.stderr)
            return 2
    results = run_checks(selected, {"quick": args.quick})
    print(render_table(results))
    if args.json:
        write_json(results, Path(args.json))
    if args.junit:
        write_junit(results, Path(args.junit))
    failed = [r.name for r in results if r.status == "failed"]
    passed = sum(r.status == "passed" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    print(f"qlwf check: {passed} passed, {len(failed)} failed, {skipped} skipped")
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("check", help="run the verification gate",
                       epilog="exit codes: 0 no check failed; 1 a check failed; 2 unknown check, or QLWF_PG_DSN set "
                              "but malformed or unreachable")
    p.add_argument("--only", action="append", metavar="CHECK", help="run only this check (repeatable)")
    p.add_argument("--quick", action="store_true", help="smaller budgets (for a fast local loop)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--junit", metavar="PATH", help="write the results as JUnit XML")
    p.set_defaults(func=run)
