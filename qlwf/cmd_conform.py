"""`qlwf conform` and `qlwf replay`: step-by-step conformance of a storage backend against the model."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qlwf.conformance import backends, runner


def register(subparsers: Any) -> None:
    conform = subparsers.add_parser(
        "conform", help="replay generated traces (and the golden corpus) against a backend in lockstep with the model",
        description="Apply seeded-random traces, and with --corpus the golden traces, to the model and to a fresh "
                    "store of the backend; compare outcome and full snapshot after every step. Exit 0 only when "
                    "every trace passed. The last line printed is a one-line summary.")
    conform.add_argument("--backend", default="sqlite", choices=backends.names(), help="backend (default: sqlite)")
    conform.add_argument("--traces", type=_count, default=100, metavar="N", help="generated traces (default: 100)")
    conform.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the first generated trace")
    conform.add_argument("--corpus", action="store_true", help="also run the golden corpus (conformance/corpus)")
    conform.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    conform.add_argument("--no-invariants", action="store_true", help="skip invariant evaluation (faster)")
    conform.add_argument("--jobs", type=_count, default=1, metavar="J",
                         help="worker processes for the generated traces (default: 1)")
    conform.set_defaults(func=_conform)

    replay = subparsers.add_parser(
        "replay", help="replay one trace file against a backend (and its recorded expectations)",
        description="Run TRACE in lockstep against the backend; a recorded trace is also checked against its "
                    "recorded outcomes and state digests. Exit 0 only when it passed.")
    replay.add_argument("trace", metavar="TRACE", help="a qlwf-trace JSON file")
    replay.add_argument("--backend", default="sqlite", choices=backends.names(), help="backend (default: sqlite)")
    replay.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    replay.add_argument("--no-invariants", action="store_true", help="skip invariant evaluation")
    replay.set_defaults(func=_replay)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _conform(args: argparse.Namespace) -> int:
    return runner.conform(args.backend, args.traces, args.seed, args.corpus, args.json, sys.stdout,
                          invariants=not args.no_invariants, jobs=max(1, args.jobs))


def _replay(args: argparse.Namespace) -> int:
    return runner.replay(args.trace, args.backend, args.json, sys.stdout, invariants=not args.no_invariants)
