"""`qlwf explore`: exhaustive small-scope exploration of the model (conformance/checkers/explore/)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from qlwf.cli.argtypes import integer, processes
from qlwf.conformance.checkers.counterexamples import write_counterexamples
from qlwf.conformance.checkers.explore import (
    ALPHABETS,
    COUNT_KEYS,
    MAX_SHAPE_STEPS,
    MAX_WORKFLOWS,
    REDUCED,
    REDUCTIONS,
    SELECTED,
    Config,
    ExploreReport,
    Shape,
    ShapeReport,
    default_alphabet,
    explore,
    parse_shape,
    scope_name,
    scope_shapes,
    scope_work,
)
from qlwf.conformance.report.render import show_command

DEFAULT_TRACE_DIR = "reports/counterexamples"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explore", help="breadth-first search of every reachable state of every DAG shape with up to K steps",
        description="Explore every reachable abstract state of one workflow for every DAG shape with 1..K steps "
                    "(isomorphic shapes once), checking INV-1..31 and LIVE-1 on every state. Exit 0 when nothing "
                    "was violated; counterexample traces are written to $QLWF_TRACE_DIR "
                    f"(default {DEFAULT_TRACE_DIR}).")
    p.add_argument("--max-steps", type=integer(1, MAX_SHAPE_STEPS), metavar="K",
                   help=f"every shape of 1..K steps (at most {MAX_SHAPE_STEPS}); this or --shape is required")
    p.add_argument("--shape", type=_shape, action="append", default=[], metavar="NAME",
                   help="explore only this shape, named as the table names it ('3:a>b,c>b', '2:-') or any relabelling "
                        "of it; repeatable, instead of --max-steps")
    p.add_argument("--selected", type=_selected, action="append", default=[], metavar="K",
                   help="also explore the selected family of K-step shapes pinned in the manifest "
                        f"({'; '.join(f'{k}: {family}' for k, (family, _) in sorted(SELECTED.items()))}); repeatable. "
                        "The full gate explores --max-steps 4 --selected 5")
    p.add_argument("--depth", type=integer(1), default=None, metavar="D", help="stop the search at depth D")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--full", action="store_true",
                   help="give every shape the full alphabet (two attempts and lease generations, deadlines, renew); "
                        "much larger, for deep campaigns — the manifest pins the default alphabets")
    p.add_argument("--reduction", choices=REDUCTIONS, default=REDUCED,
                   help=f"'runs' (default: {REDUCED}) explores states up to permutations of the Runs (fewer "
                        "states); 'sleep' skips choices that commute with one already taken (sleep sets: the same "
                        "states, fewer transitions, more CPU); 'sleep+runs' both; 'none' neither "
                        "(docs/explorer-reduction.md). With one Run every reduction is the same search: they save "
                        "work only with --workflows 2 or more")
    p.add_argument("--workflows", type=integer(1, MAX_WORKFLOWS), default=1, metavar="W",
                   help=f"admit W Runs of each shape side by side (at most {MAX_WORKFLOWS}; the manifest pins W = 1)")
    p.add_argument("--pinned", action="store_true",
                   help="compare each shape's or scope's counts with the manifest (conformance/checkers/"
                        "explore_manifest.json: 'shapes', 'workflows', or with --full 'full'); a changed count "
                        "exits 1, a scope the manifest does not pin exits 2 before anything is explored")
    p.add_argument("--pin", action="store_true",
                   help="with --full: write the counts into the manifest's 'full' section (the only one "
                        "`qlwf regenerate` does not rebuild, for its cost)")
    p.add_argument("--jobs", type=processes(), default=min(2, os.cpu_count() or 1), metavar="J",
                   help="explore shapes in J processes, or split a lone shape or scope across them (default: 2 where "
                        "there are two cores; the report is the same)")
    p.set_defaults(func=run)


def _shape(text: str) -> Shape:
    try:
        return parse_shape(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _selected(text: str) -> int:
    value = int(text)
    if value not in SELECTED:
        raise argparse.ArgumentTypeError(f"no selected family of {value} steps (there are: {sorted(SELECTED)})")
    return value


def _progress(out: TextIO) -> Any:
    def show(r: ShapeReport) -> None:
        out.write(f"{r.shape:<22} {r.distinct_states:>8} {r.transitions:>10} {r.refusals:>9} {r.depth:>6} "
                  f"{len(r.findings):>10} {r.seconds:>9.1f}\n")
        out.flush()
    return show


def render(report: ExploreReport, out: TextIO) -> None:
    s = report.summary()
    out.write(f"{'total':<22} {s['distinct_states']:>8} {s['transitions']:>10} {s['refusals']:>9} {s['depth']:>6} "
              f"{s['violations']:>10} {s['seconds']:>9.1f}\n")
    out.write(f"distinct states {s['distinct_states']}, transitions {s['transitions']} ({s['refusals']} refused), "
              f"depth {s['depth']}, {s['seconds']} s, {s['states_per_second']} states/s\n")


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    full = getattr(args, "full", False)
    selected = tuple(sorted(set(getattr(args, "selected", []))))
    named = tuple(dict.fromkeys(getattr(args, "shape", [])))  # each shape once, in the order given
    if (args.max_steps is None) == (not named) or (named and selected):
        print("qlwf explore: give either --max-steps K (with any --selected) or --shape NAME", file=sys.stderr)
        return 2
    shapes = named or (scope_shapes(args.max_steps, selected) if selected else None)
    cfg = Config(max_steps=args.max_steps or max(n for n, _ in named), max_depth=args.depth,
                 alphabet=ALPHABETS["full"] if full else default_alphabet, shapes=shapes,
                 reduction=getattr(args, "reduction", REDUCED), workflows=getattr(args, "workflows", 1))
    pinned = _pinned_section(cfg, full) if getattr(args, "pinned", False) else None
    if pinned is not None:
        missing = [scope_name(shape, cfg.workflows, None) for shape, _ in scope_work(cfg)
                   if scope_name(shape, cfg.workflows, None) not in pinned]
        if missing:
            print(f"qlwf explore: --pinned: the manifest pins no counts for {', '.join(missing)} with "
                  f"{'the full alphabet' if full else 'the default alphabet'}", file=sys.stderr)
            return 2
    if getattr(args, "pin", False) and (not full or cfg.workflows > 1 or cfg.max_depth is not None):
        print("qlwf explore: --pin writes the full alphabet's one-Run counts: give --full, no --workflows, "
              "no --depth", file=sys.stderr)
        return 2
    if not args.json:
        out.write(f"{'shape':<22} {'states':>8} {'transitions':>10} {'refused':>9} {'depth':>6} {'violations':>10} "
                  f"{'seconds':>9}\n")
    report = explore(cfg, progress=None if args.json else _progress(out), jobs=getattr(args, "jobs", 1))
    findings = report.findings
    changed = [] if pinned is None else [
        f"{r.shape}: {counts} != pinned {pinned[r.shape]}" for r in report.shapes
        if (counts := {k: getattr(r, k) for k in COUNT_KEYS}) != pinned[r.shape]]
    if getattr(args, "pin", False) and not findings:
        from qlwf.gate.artifacts import pin_full, source_root

        print(f"qlwf explore: pinned the counts of {len(report.shapes)} shape(s) in "
              f"{pin_full(source_root(), report)}", file=sys.stderr)
    paths = write_counterexamples(findings, os.environ.get("QLWF_TRACE_DIR", DEFAULT_TRACE_DIR)) if findings else []
    if args.json:
        summary = report.summary()
        summary["per_shape"] = [{"shape": r.shape, "distinct_states": r.distinct_states, "transitions": r.transitions,
                                 "refusals": r.refusals, "depth": r.depth, "violations": len(r.findings),
                                 "seconds": round(r.seconds, 3)}
                                for r in report.shapes]
        summary["counterexamples"] = [str(p) for p in paths]
        if pinned is not None:
            summary["changed_from_pinned"] = changed
        if "sleep" in cfg.reduction:  # what the sleep sets skipped (docs/explorer-reduction.md)
            summary["slept"], summary["reexpanded"] = report.slept, report.reexpanded
        out.write(json.dumps(summary) + "\n")
    else:
        render(report, out)
        for f in findings[:10]:
            out.write(f"VIOLATION [{f.shape}] {f.kind}: {f.message}\n")
        for p in paths:
            out.write(f"counterexample trace: {p}\nrender it: {show_command(p)}\n")
        for line in changed:
            out.write(f"CHANGED FROM PINNED {line}\n")
        if pinned is not None and not changed:
            out.write(f"every count as pinned ({len(report.shapes)} shape(s) or scope(s))\n")
    return 1 if findings or changed else 0


def _pinned_section(cfg: Config, full: bool) -> dict[str, Any]:
    """The manifest's counts for scopes explored like `cfg`: one Run with the default alphabet
    ('shapes'), several ('workflows'), one Run with the full alphabet ('full')."""
    from importlib import resources

    from qlwf.gate.artifacts import PINNED_FULL

    text = resources.files("qlwf.conformance.checkers").joinpath("explore_manifest.json").read_text(encoding="utf-8")
    manifest = json.loads(text)
    if full:
        return manifest.get(PINNED_FULL, {}) if cfg.workflows == 1 else {}
    return dict(manifest.get("workflows" if cfg.workflows > 1 else "shapes", {}))
