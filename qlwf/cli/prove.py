"""`qlwf prove`: run the Z3 proofs (invariants, decision tables, LIVE-1, page bounds, BMC)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from qlwf.cli.argtypes import output_file
from qlwf.proofs import decode, runner
from qlwf.proofs.mutants import BY_NAME
from qlwf.proofs.results import PROVED
from qlwf.support import stdio


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("prove", help="Z3 proofs of the invariants, the decision tables and progress",
                              description="Prove every encoded INV-n inductive, the decision tables total and "
                              "deterministic, LIVE-1 by a ranking function and the page bounds, for one workflow "
                              "of N steps (every DAG of N steps at once).")
    p.add_argument("--bound", type=int, default=4, metavar="N", help="number of workflow steps N (default 4)")
    p.add_argument("--depth", type=int, default=4, metavar="K", help="BMC depth k (default 4)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="property name or fnmatch pattern, e.g. 'INV-2*'; '!PATTERN' excludes (repeatable)")
    p.add_argument("--jobs", type=int, default=None, metavar="J",
                   help="processes for the independent proof tasks (default: every core; 1 runs in this process)")
    p.add_argument("--lemma-free-depth", default="3", metavar="K|all",
                   help="BMC-invariants checks paths up to K steps without lemmas and longer ones by the inductive "
                        "proof of the same run, falling back to lemma-free BMC at every depth if that proof fails "
                        "(decisions Q-147); 'all': lemma-free at every depth (default 3)")
    p.add_argument("--json", action="store_true", help="print a JSON list of {name, result, bound, seconds}")
    p.add_argument("--mutant", choices=sorted(BY_NAME), help="build the encoding from a mutant (expect violations)")
    p.add_argument("--list", action="store_true", help="list the property names and exit")
    p.add_argument("--counterexamples", type=output_file, metavar="FILE",
                   help="write every counterexample (decoded states, replayable traces) to FILE as JSON")
    p.set_defaults(func=main)


def _non_negative(text: str) -> int:
    """A depth ≥ 0, or -1 for anything else (reported with the other usage errors)."""
    return int(text) if text.isdigit() else -1


def main(args: argparse.Namespace) -> int:
    if args.list:
        for name in runner.ALL_PROPERTIES:
            print(name)
        return 0
    lemma_free: int | None = None if args.lemma_free_depth == "all" else _non_negative(args.lemma_free_depth)
    if args.bound < 1 or args.depth < 0 or (args.jobs is not None and args.jobs < 1) or lemma_free == -1:
        print("qlwf prove: --bound must be ≥ 1, --depth ≥ 0, --jobs ≥ 1 and --lemma-free-depth a number ≥ 0 or "
              "'all'", file=sys.stderr)
        return 2
    options = runner.Options(bound=args.bound, depth=args.depth, only=args.only, mutant=args.mutant,
                             explain=not args.json or bool(args.counterexamples), jobs=args.jobs,
                             lemma_free_depth=lemma_free)
    started = time.perf_counter()
    results = runner.run(options)
    wall = time.perf_counter() - started
    if not results:
        print(f"qlwf prove: no property matches {args.only}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([r.to_json() for r in results]))
    else:
        width = max(len(r.name) for r in results)
        print(f"{'property':<{width}}  {'result':<8}  {'bound':>5}  {'seconds':>8}")
        for r in results:
            print(f"{r.name:<{width}}  {r.result:<8}  {r.bound:>5}  {r.seconds:>8.2f}")
        s = runner.summary(results)
        # per-property seconds overlap when tasks run in parallel: the wall time is the run's
        print(f"{s['properties']} properties, {s.get(PROVED, 0)} proved, {s.get('violated', 0)} violated, "
              f"{s.get('unknown', 0)} unknown, {wall:.2f}s wall ({s['seconds']:.2f}s summed over properties)")
        for r in results:
            if r.result != PROVED:
                print(f"\n{r.name}: {r.result} — {r.detail}")
                if r.counterexample is not None:
                    print("\n".join(decode.describe(r.counterexample)))
    if args.counterexamples:
        stdio.write_report(args.counterexamples, json.dumps(
            {r.name: r.counterexample for r in results if r.counterexample is not None}, indent=1, ensure_ascii=False))
    return 0 if all(r.result == PROVED for r in results) else 1
