"""`qlwf show`: render a trace or counterexample as a step table and the workflow DAG at one step.

Markdown (Mermaid DAG) to stdout by default; `--md OUT` and `--html OUT` write files instead
(conformance/report/render.py, conformance/report/svg.py). Exit 0 when rendered, 2 on input that cannot be
rendered (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from qlwf.cli.argtypes import integer, output_file, same_output
from qlwf.conformance.report.render import ShowError, build, markdown
from qlwf.conformance.report.svg import html
from qlwf.conformance.report.visible import visible
from qlwf.conformance.traces.format import TraceFormatError, load
from qlwf.support import stdio


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("show", help="render a trace or counterexample (step table and coloured DAG)",
                              description="Run a qlwf trace through the model and render every step (command, "
                              "outcome, rule rows that fired, state diff, invariant violations) and the workflow "
                              "DAG coloured by StepRun status after one step (default: the failing step, else the "
                              "last). Markdown with a Mermaid DAG goes to stdout unless --md or --html is given.")
    p.add_argument("trace", metavar="TRACE", help="a qlwf-trace v1 JSON file (corpus trace or counterexample)")
    p.add_argument("--step", type=integer(0), metavar="N", help="colour the DAG after step N (0-based)")
    p.add_argument("--html", type=output_file, metavar="OUT", help="write one self-contained HTML file (inline SVG)")
    p.add_argument("--md", type=output_file, metavar="OUT", help="write the Markdown report to OUT")
    p.add_argument("--layout", choices=("auto", "dot", "layered"), default="auto",
                   help="HTML DAG layout: Graphviz dot where installed (auto), or the plain layered layout")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if (clash := same_output(args, "--md", "--html")) is not None:
        print(f"qlwf show: {clash}", file=sys.stderr)
        return 2
    try:
        view = build(load(args.trace))
        # a trace comes from outside: its text is shown, never obeyed by a terminal or a viewer
        md = visible(markdown(view, args.step))
        page = visible(html(view, args.step, args.layout)) if args.html else None
    except (OSError, json.JSONDecodeError, TraceFormatError, ShowError, RuntimeError) as e:
        print(f"qlwf show: {args.trace}: {e}", file=sys.stderr)
        return 2
    if args.md:
        stdio.write_report(args.md, md)
    if page is not None:
        stdio.write_report(args.html, page)
    if not args.md and not args.html:
        sys.stdout.write(md)
    return 0
