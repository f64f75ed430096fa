"""One scope searched in one process and split across processes (explore/parallel.py), side by side in one run.

For each scope named (default: the three free steps with the full alphabet to depth 16) the search runs
once in this process (`explore_shape`) and once split across each number of partitions asked for
(`explore_shape_partitioned`), one after the other, with every invariant, the command postconditions and
LIVE-1 checked. Each row gives states, transitions, LIVE-1 drains, wall seconds, CPU seconds of every
process, the speed-up over one process and the largest resident set of a process; the counts and findings
must be the same in every row of a scope (the run fails otherwise).

Run: python bench/bench_explorer_split.py [--scope SHAPE ...] [--parts P ...] [--depth D | --unbounded]
                                          [--default-alphabet] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from qlwf.conformance.checkers.explore import (
    COUNT_KEYS,
    Config,
    ShapeReport,
    default_alphabet,
    explore_shape,
    explore_shape_partitioned,
    full_alphabet,
    parse_scope,
)
from qlwf.conformance.stateful.postconditions import transition_problems


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (the partitions)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _max_rss_mb() -> int:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return max(me.ru_maxrss, children.ru_maxrss) // 1024  # kB on Linux


def _row(name: str, parts: int, report: ShapeReport, wall: float, cpu: float) -> dict[str, Any]:
    return {"scope": name, "parts": parts, **{k: getattr(report, k) for k in COUNT_KEYS}, "drains": report.drains,
            "findings": [(f.kind, f.message) for f in report.findings], "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "max_rss_mb": _max_rss_mb()}


def bench_scope(name: str, parts: list[int], depth: int | None, full: bool) -> list[dict[str, Any]]:
    scope = parse_scope(name)
    cfg = Config(max_steps=scope.shape[0], workflows=scope.workflows, max_depth=depth,
                 alphabet=full_alphabet if full else default_alphabet)
    rows = []
    for p in parts:
        wall, cpu = time.perf_counter(), _cpu()
        report = (explore_shape(scope.shape, cfg, checker=transition_problems) if p == 1 else
                  explore_shape_partitioned(scope.shape, cfg, p, checker=transition_problems))
        rows.append(_row(name, p, report, time.perf_counter() - wall, _cpu() - cpu))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    first = rows[0]
    for row in rows:
        row["speedup"] = round(first["wall_s"] / row["wall_s"], 2) if row["wall_s"] else None
        same = all(row[k] == first[k] for k in (*COUNT_KEYS, "findings"))
        if not same:
            raise SystemExit(f"{name}: the split search differs from the sequential one: {row} != {first}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scope", action="append", default=[], metavar="SHAPE")
    ap.add_argument("--parts", action="append", type=int, default=[], metavar="P",
                    help="partitions of a split search (default: 2); 1 is the one-process search, always run first")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--unbounded", action="store_true", help="no depth bound")
    ap.add_argument("--default-alphabet", action="store_true", help="the shape's default alphabet, not the full one")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    parts = [1, *sorted(set(args.parts or [2]) - {1})]
    rows = [row for name in (args.scope or ["3:-"])
            for row in bench_scope(name, parts, None if args.unbounded else args.depth, not args.default_alphabet)]
    print("| scope | processes | states | transitions | drains | wall s | CPU s | speed-up | max RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['scope']} | {r['parts']} | {r['distinct_states']:,} | {r['transitions']:,} | {r['drains']:,} | "
              f"{r['wall_s']} | {r['cpu_s']} | {r['speedup']} | {r['max_rss_mb']:,} |")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
