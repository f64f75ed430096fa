"""Proof time per property against the number of workflow steps N.

    .venv/bin/python bench/bench_proofs.py                 # N = 2..8, BMC depth 3
    .venv/bin/python bench/bench_proofs.py --max-n 12 --only 'INV-*' --only 'LIVE-*'
    .venv/bin/python bench/bench_proofs.py --min-n 10 --max-n 16 --only '!BMC-*'
    .venv/bin/python bench/bench_proofs.py --json > bench.json

Reproducible: the encoding, the solver inputs and the solver are deterministic (no random seeds);
only wall-clock times vary with the machine. A property that is not proved is reported as such in
its cell ("V" violated, "?" unknown) and makes the exit status non-zero.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import z3
from qlwf.proofs import runner
from qlwf.proofs.results import PROVED


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min-n", type=int, default=2)
    p.add_argument("--max-n", type=int, default=8)
    p.add_argument("--depth", type=int, default=3, help="BMC depth k (BMC-cover uses k + 2)")
    p.add_argument("--only", action="append",
                   help="property name or fnmatch pattern; '!PATTERN' excludes, e.g. '!BMC-*' (repeatable)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    table: dict[str, dict[int, tuple[str, float]]] = {}
    totals: dict[int, float] = {}
    ok = True
    for n in range(args.min_n, args.max_n + 1):
        start = time.perf_counter()
        results = runner.run(runner.Options(bound=n, depth=args.depth, only=args.only))
        totals[n] = time.perf_counter() - start
        for r in results:
            table.setdefault(r.name, {})[n] = (r.result, r.seconds)
            ok = ok and r.result == PROVED
        print(f"N={n}: {len(results)} properties in {totals[n]:.1f}s", file=sys.stderr, flush=True)

    ns = list(totals)
    if args.json:
        cells = {k: {str(n): {"result": v[0], "seconds": round(v[1], 3)} for n, v in row.items()}
                 for k, row in table.items()}
        print(json.dumps({"z3": z3.get_version_string(), "python": platform.python_version(), "depth": args.depth,
                          "totals": totals, "properties": cells}))
        return 0 if ok else 1
    width = max(len(k) for k in table)
    print(f"z3 {z3.get_version_string()}, python {platform.python_version()}, BMC depth {args.depth} "
          f"(seconds per property; V = violated, ? = unknown)")
    print(f"{'property':<{width}} " + " ".join(f"{'N=' + str(n):>8}" for n in ns))
    for name, row in table.items():
        columns = []
        for n in ns:
            result, secs = row.get(n, ("", 0.0))
            mark = {"proved": "", "violated": "V", "unknown": "?"}.get(result, "-")
            columns.append(f"{secs:>7.2f}{mark or ' '}")
        print(f"{name:<{width}} " + " ".join(columns))
    print(f"{'TOTAL (wall)':<{width}} " + " ".join(f"{totals[n]:>7.1f} " for n in ns))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
