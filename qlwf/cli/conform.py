"""`qlwf conform` and `qlwf replay`: step-by-step conformance of a storage backend against the model."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qlwf.cli.argtypes import integer, processes, seconds_up_to
from qlwf.conformance import backends
from qlwf.conformance.exec.profiles import PROFILES
from qlwf.conformance.lockstep import runner
from qlwf.support.progress import Progress

EXIT_PASSED, EXIT_DIVERGED, EXIT_UNAVAILABLE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_NO_VERDICT = 3  # nothing was checked: as `qlwf audit` of a store with no workflow Run
EXIT_CODES = ("exit codes: 0 every trace and concurrency run passed; 1 a divergence (or a failed concurrency "
              "judgement, or a broken driver); 2 bad usage, or the backend's storage (PostgreSQL) unavailable or "
              "misconfigured before the run (no server, "
              "malformed or unreachable QLWF_PG_DSN, --concurrency above the server's connection limit); "
              "3 no verdict: storage unreachable (the server went away during a concurrency run and did not come "
              "back within --reconnect-window, the report says how far the run got, or stopped answering during a "
              "lockstep run: no verdict on the step it was on), or nothing was checked (--traces 0 alone, "
              "--ops 0, or no trace inside the driver's declared surface)")


def register(subparsers: Any) -> None:
    conform = subparsers.add_parser(
        "conform", help="replay generated traces (and the golden corpus) against a backend in lockstep with the model",
        description="Apply seeded-random traces, and with --corpus the golden traces, to the model and to a fresh "
                    "store of the backend; compare outcome and snapshot after every step (what the step wrote; the "
                    "whole store at least every 16th step and at the last). Exit 0 only when "
                    "every trace passed. The last line printed is a one-line summary.",
        epilog=EXIT_CODES)
    conform.add_argument("--backend", default="sqlite", choices=backends.names(), help="backend (default: sqlite)")
    conform.add_argument("--traces", type=integer(0), default=None, metavar="N",
                         help="generated traces (default: 100, or 0 with --concurrency)")
    conform.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the first generated trace")
    conform.add_argument("--corpus", action="store_true", help="also run the golden corpus (conformance/traces/corpus)")
    conform.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    conform.add_argument("--no-invariants", action="store_true", help="skip invariant evaluation (faster)")
    conform.add_argument("--jobs", type=processes(), default=1, metavar="J",
                         help="worker processes for the generated traces (default: 1)")
    conform.add_argument("--concurrency", type=_ks, default=None, metavar="K[,K...]",
                         help="also run the concurrency check with K worker threads (backends with the concurrency "
                              "capability: postgres, sqlite), e.g. 2,4,8")
    conform.add_argument("--ops", type=integer(0), default=60, metavar="N",
                         help="operations per worker of the concurrency check (default: 60)")
    conform.add_argument("--variant", default="correct", choices=("correct", "broken"),
                         help="concurrency check against the real backend or a deliberately broken one (postgres)")
    conform.add_argument("--workflows", type=integer(1), default=3, metavar="N",
                         help="workflows admitted before the concurrency workers start; workers may admit up to "
                              "2N (default: 3). Long run: --concurrency 8 --workflows 1000 --ops 1500")
    conform.add_argument("--reconnect-window", type=seconds_up_to(3600), default=30.0, metavar="SECONDS",
                         help="how long a concurrency run waits for an unreachable server before it stops with "
                              "exit 3 (default: 30)")
    conform.add_argument("--out", type=Path, default=None, metavar="DIR",
                         help="write counterexample traces to DIR (default: $QLWF_TRACE_DIR, else "
                              "reports/counterexamples)")
    conform.add_argument("--profile", default=None, choices=sorted(PROFILES), metavar="NAME",
                         help="generate traces inside the surface of ql3's adapter NAME (edge, cluster: "
                              "docs/protocol.md); by default inside what the driver declares in hello, once the "
                              "corpus run has met it")
    _driver_options(conform)
    conform.set_defaults(func=_conform)

    replay = subparsers.add_parser(
        "replay", help="replay one trace file against a backend (and its recorded expectations)",
        description="Run TRACE in lockstep against the backend; a recorded trace is also checked against its "
                    "recorded outcomes and state digests. Exit 0 only when it passed.")
    replay.add_argument("trace", metavar="TRACE", help="a qlwf-trace JSON file")
    replay.add_argument("--backend", default="sqlite", choices=backends.names(), help="backend (default: sqlite)")
    replay.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    replay.add_argument("--no-invariants", action="store_true", help="skip invariant evaluation")
    replay.epilog = ("exit codes: 0 passed; 1 diverged; 2 bad usage, a file that is not a readable trace, or "
                     "PostgreSQL unavailable or misconfigured; 3 no verdict: a trace of no step (nothing checked), "
                     "or the server stopped answering")
    _driver_options(replay)
    replay.set_defaults(func=_replay)


def _driver_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--driver", metavar="CMD", default=None,
                        help="with --backend exec: the driver command line (qlwf-backend@1 over stdin/stdout, "
                             "docs/protocol.md), e.g. \"python -m qlwf.impl.sqlite.driver\"; split into words as a "
                             "POSIX shell would (quote a path with spaces), but no shell runs it")
    parser.add_argument("--driver-timeout", type=seconds_up_to(3600), default=None, metavar="SECONDS",
                        help="with an exec backend: seconds each driver response may take (default: 10)")


def _ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("expected K or K,K,... with K >= 1") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError("expected K or K,K,... with K >= 1")
    return ks


def _with_driver(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """A backend with the `driver` capability takes --driver CMD (its command line) and --driver-timeout;
    a broken backend (a driver that died or broke the protocol) ends the run (exit 1)."""
    spec = backends.get(args.backend)
    if not spec.has("driver") and (args.driver is not None or args.driver_timeout is not None):
        option = "--driver" if args.driver is not None else "--driver-timeout"
        print(f"{option} needs a driver backend such as --backend exec (got {args.backend})", file=sys.stderr)
        return 2
    if args.driver is not None and not args.driver.strip():
        print(f"--backend {args.backend} needs a non-empty --driver CMD", file=sys.stderr)
        return 2
    try:
        if spec.has("driver"):
            from qlwf.conformance.exec import port as exec_port

            with exec_port.driver_configured(args.backend, args.driver, args.driver_timeout):
                return _with_storage(args, run)
        return _with_storage(args, run)
    except backends.BackendBroken as e:  # the lockstep report of the failing step, if any, is printed already
        if args.json:
            print(json.dumps({"backend": args.backend, "passed": False, "aborted": True, **e.report()},
                             ensure_ascii=False))
        print(f"conform {args.backend}: FAIL — run aborted, the {e.what} is broken:\n  "
              + str(e).replace("\n", "\n  "))
        return 1


def _with_storage(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """Storage the backend cannot get (no server, a malformed or unreachable DSN) is one line and exit 2,
    before any work, not a traceback."""
    spec = backends.get(args.backend)
    try:
        with spec.provisioner.guard():
            spec.provisioner.prepare()
            return run(args)
    except backends.BackendUnavailable as e:
        print(f"{args.backend} backend unavailable: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except backends.BackendMisconfigured as e:
        print(f"{args.backend} backend misconfigured: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except backends.BackendLost as e:  # mid-run: no verdict on what it was doing
        print(f"conform {args.backend}: NO VERDICT — {e}", file=sys.stderr)
        return EXIT_UNREACHABLE


def _conform(args: argparse.Namespace) -> int:
    spec = backends.get(args.backend)
    if args.concurrency and not spec.has("concurrency"):
        able = [s.name for s in backends.specs() if s.has("concurrency")]
        print(f"--concurrency needs a backend with the concurrency capability ({', '.join(able)}; got "
              f"{args.backend})", file=sys.stderr)
        return 2
    return _with_driver(args, _run_conform)


def _run_conform(args: argparse.Namespace) -> int:
    traces = args.traces if args.traces is not None else (0 if args.concurrency else 100)
    code = 0
    if args.corpus or traces or not args.concurrency:
        total = traces + (len(runner.corpus_traces()) if args.corpus else 0)
        bar = Progress(f"conform {args.backend}", total)
        try:
            code = runner.conform(args.backend, traces, args.seed, args.corpus, args.json, sys.stdout,
                                  invariants=not args.no_invariants, jobs=args.jobs,
                                  progress=lambda r: bar.advance(1, r.steps), out_dir=args.out,
                                  profile=PROFILES[args.profile] if args.profile else None)
        except Exception:  # a broken driver: the bar's last line before the report of it
            bar.close()
            raise
        bar.close()  # not on an interrupt: then the one line said is the interrupt's
    if args.concurrency:
        from qlwf.conformance.concurrency.harness import concurrency_check

        host = backends.get(args.backend).concurrency_host()
        if args.variant not in host.variants:
            print(f"--variant {args.variant}: backend {args.backend} has only {', '.join(sorted(host.variants))}",
                  file=sys.stderr)
            return 2
        problem = host.capacity_problem(max(args.concurrency))
        if problem is not None:
            print(problem, file=sys.stderr)
            return EXIT_UNAVAILABLE
        for k in args.concurrency:
            report = concurrency_check(k=k, ops=args.ops, seed=args.seed, variant=args.variant,
                                       workflows=args.workflows, host=host,
                                       reconnect_window_s=args.reconnect_window,
                                       on_event=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
            if args.json:
                print(json.dumps(report.to_json(), ensure_ascii=False))
            else:
                for problem in report.problems:
                    print(f"  {problem}")
            print(report.line(), flush=True)
            if report.unreachable is not None:
                return EXIT_UNREACHABLE
            code = _worse(code, EXIT_NO_VERDICT if report.unchecked else
                          EXIT_PASSED if report.passed else EXIT_DIVERGED)
    return code


def _worse(a: int, b: int) -> int:
    """The run's exit code from two parts': a divergence outweighs no verdict, which outweighs a pass."""
    rank = {EXIT_PASSED: 0, EXIT_NO_VERDICT: 1, EXIT_DIVERGED: 2}
    return max(a, b, key=rank.__getitem__)


def _replay(args: argparse.Namespace) -> int:
    return _with_driver(args, lambda a: runner.replay(a.trace, a.backend, a.json, sys.stdout,
                                                      invariants=not a.no_invariants))
