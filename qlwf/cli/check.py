"""`qlwf check`: the correctness gate (one command, clear exit code, JSON / JUnit output)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from qlwf.cli.argtypes import output_file, same_output, seconds_up_to
from qlwf.gate.checks import CHECKS, LEGS
from qlwf.gate.verdict import EXIT_USAGE, exit_code, render_counts, render_table, run_checks, write_json, write_junit

# per check (per planted fault under --self-test, which runs the quick budgets); the slowest check takes
# about 30 s of the quick profile and two minutes of the full one on two cores
DEFAULT_CHECK_TIMEOUT = {"quick": 300.0, "full": 1200.0}


def run(args: argparse.Namespace) -> int:
    if (clash := same_output(args, "--json", "--junit")) is not None:  # before minutes of checks, not after
        print(f"qlwf check: {clash}", file=sys.stderr)
        return EXIT_USAGE
    selected = [c for c in CHECKS if not args.only or c.name in args.only]
    unknown = set(args.only or ()) - {c.name for c in CHECKS}
    if unknown:
        print(f"unknown check(s): {sorted(unknown)}; known: {[c.name for c in CHECKS]}", file=sys.stderr)
        return EXIT_USAGE
    skip = frozenset(args.skip or ())
    if "postgres" not in skip and (args.self_test or any(c.leg == "postgres" for c in selected)):
        from qlwf.impl.postgres.dsn import PostgresUnavailable, check_dsn_env

        try:  # a configured but broken server is a usage error, not an unknown per check or a traceback
            check_dsn_env()
        except PostgresUnavailable as e:
            print(f"qlwf check: {e}", file=sys.stderr)
            return EXIT_USAGE
    quick = args.quick or args.self_test
    limit = args.check_timeout or DEFAULT_CHECK_TIMEOUT["quick" if quick else "full"]
    if args.self_test:
        from qlwf.gate.selftest import self_test

        results = self_test(skip=skip, progress=sys.stderr, timeout=limit)
    else:
        results = run_checks(selected, {"quick": args.quick, "check_timeout": limit},
                             progress=sys.stderr, skip=skip, lanes=args.jobs)
    print(render_table(results))
    if args.json:
        write_json(results, Path(args.json))
    if args.junit:
        write_junit(results, Path(args.junit))
    print(render_counts(results))
    return exit_code(results)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    checks = "\n".join(f"  {c.name:<22} {c.description}" for c in CHECKS)
    p = sub.add_parser(
        "check", help="run the verification gate", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run every check of the gate and print one table on stdout, in the order below; progress (one "
                    "line as each check starts and ends, two lanes at once with --jobs 2) goes to stderr.",
        epilog=f"checks:\n{checks}\n\n"
               "profiles:\n  (default)  the full budgets\n  --quick    smaller budgets, as CI runs them\n\n"
               "verdicts: passed, failed, unknown (no problem found but too little evidence: a count below its\n"
               "floor in qlwf/gate/evidence_floors.json, a leg that could not run, or a check stopped at\n"
               "--check-timeout), skipped (only by --skip)\n\n"
               "exit codes:\n  0  every check that ran passed\n  1  a check failed\n  2  bad usage\n"
               "  2  also: QLWF_PG_DSN is set but malformed or unreachable\n"
               "  3  no failure, but a check is unknown (or every check was skipped)\n\n"
               "PostgreSQL: the *-postgres checks start a throwaway cluster from the local server binaries\n"
               "(initdb, pg_ctl, postgres: on PATH, under /usr/lib/postgresql/*/bin, or QLWF_PG_BIN), or use\n"
               "the server that QLWF_PG_DSN names. Without either they are unknown (the gate is red); leave the\n"
               "leg out on purpose with --skip postgres, and the report says so.")
    p.add_argument("--only", action="append", metavar="CHECK", help="run only this check (repeatable)")
    p.add_argument("--quick", action="store_true", help="smaller budgets (for a fast local loop)")
    p.add_argument("--skip", action="append", choices=[leg for leg in LEGS if leg != "core"], metavar="LEG",
                   help="leave a whole leg out (postgres); the report says so")
    p.add_argument("--self-test", action="store_true",
                   help="plant one fault per layer and require the owning check to fail (quick budgets)")
    p.add_argument("--jobs", type=int, choices=(1, 2), default=min(2, os.cpu_count() or 1), metavar="J",
                   help="2 (the default where there are two cores): the PostgreSQL leg runs in this process "
                        "while a second process takes the other checks, and this one joins it when free; "
                        "1: one after another. The evidence and the verdicts are the same")
    p.add_argument("--check-timeout", type=seconds_up_to(86_400), metavar="SECONDS",
                   help="stop a check that has no verdict after this long and report it unknown, so that a hang "
                        f"cannot hold the gate (default {DEFAULT_CHECK_TIMEOUT['full']:g}, with --quick "
                        f"{DEFAULT_CHECK_TIMEOUT['quick']:g}; with --self-test: per planted fault, default "
                        f"{DEFAULT_CHECK_TIMEOUT['quick']:g})")
    p.add_argument("--json", type=output_file, metavar="PATH", help="write the results as JSON")
    p.add_argument("--junit", type=output_file, metavar="PATH", help="write the results as JUnit XML")
    p.set_defaults(func=run)
