"""The explorer's reductions side by side, in one run: per scope, the unreduced search and each reduction.

For every multi-workflow scope named (default: the manifest's, explore.WORKFLOW_SCOPES) the search runs
once per reduction (`none`, `sleep`, `runs`, `sleep+runs`), in this process, one after the other, with
every invariant, the command postconditions and LIVE-1 checked. Each row gives the states visited, the
states avoided against `none`, the transitions taken, the choices slept, wall and CPU seconds, and the
findings, which must be the same in every row of a scope (the run fails otherwise).

Run: python bench/bench_explorer_reduction.py [--scope WxSHAPE ...] [--reduction R ...] [--depth D] [--full]
                                             [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from qlwf.conformance.checkers.explore import (
    ALPHABETS,
    REDUCTIONS,
    WORKFLOW_SCOPES,
    Config,
    default_alphabet,
    explore,
    parse_scope,
)
from qlwf.conformance.stateful.postconditions import transition_problems


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def bench_scope(name: str, reductions: list[str], depth: int | None, full: bool) -> list[dict[str, Any]]:
    scope = parse_scope(name)
    named = "full" if full else scope.alphabet
    alphabet = default_alphabet if named is None else ALPHABETS[named]
    cfg = Config(max_steps=scope.shape[0], shapes=(scope.shape,), workflows=scope.workflows, max_depth=depth,
                 alphabet=alphabet)
    rows: list[dict[str, Any]] = []
    for reduction in reductions:
        wall, cpu = time.perf_counter(), _cpu()
        report = explore(replace(cfg, reduction=reduction), checker=transition_problems)
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
        rows.append({"scope": name + (f", depth <= {depth}" if depth else "") + (", full alphabet" if full else ""),
                     "reduction": reduction, "states": report.distinct_states, "transitions": report.transitions,
                     "slept": report.slept, "reexpanded": report.reexpanded,
                     "findings": sorted({f"{f.kind}: {f.message}" for f in report.findings}),
                     "wall": round(wall, 2), "cpu": round(cpu, 2)})
        print(f"  {rows[-1]['scope']:<28} {reduction:<11} {report.distinct_states:>8} states "
              f"{report.transitions:>9} transitions {wall:8.1f} s", file=sys.stderr, flush=True)
    base = next((r for r in rows if r["reduction"] == "none"), None)
    for r in rows:
        r["avoided"] = None if base is None else base["states"] - r["states"]
        if base is not None and r["findings"] != base["findings"]:
            raise SystemExit(f"{r['scope']}: {r['reduction']} finds {r['findings']}, the full search "
                             f"{base['findings']}: the reduction is unsound here")
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| scope | reduction | states visited | states avoided | transitions | slept | wall s | CPU s |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        avoided = "" if r["avoided"] is None else f"{r['avoided']:,}"
        out.append(f"| {r['scope']} | {r['reduction']} | {r['states']:,} | {avoided} | {r['transitions']:,} | "
                   f"{r['slept']:,} | {r['wall']} | {r['cpu']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scope", action="append", metavar="WxSHAPE", help="default: every manifest scope")
    p.add_argument("--reduction", action="append", choices=REDUCTIONS, help="default: all, 'none' first")
    p.add_argument("--depth", type=int, default=None)
    p.add_argument("--full", action="store_true", help="the full alphabet (as the nightly's --full)")
    p.add_argument("--json", type=Path, metavar="OUT")
    args = p.parse_args(argv)
    rows = [r for name in (args.scope or WORKFLOW_SCOPES)
            for r in bench_scope(name, args.reduction or list(REDUCTIONS), args.depth, args.full)]
    print(markdown(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
