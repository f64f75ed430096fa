"""`qlwf traces export` and `qlwf traces check`: self-contained qlwf-trace@1 files (docs/traces.md).

export writes traces whose every expectation is explicit, so another project's test suite can
replay them with a JSON parser; check validates files against the schema and re-derives every
expected value from the model. check exits 0 when every file is right, 1 when a file is wrong (a
stale or edited expectation; its first wrong step is reported), 2 when a file is unreadable or
invalid (2 wins over 1), 3 when a file holds no step (nothing to re-derive: no verdict; 1 and 2 win
over it).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from qlwf.cli.argtypes import integer, output_dir
from qlwf.conformance.traces import check as trace_check
from qlwf.conformance.traces import export as trace_export
from qlwf.conformance.traces.format import STATE_FORMS


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("traces", help="export self-contained trace files, or check them against the model",
                              description="Self-contained qlwf-trace@1 files (docs/traces.md): the initial state and, "
                              "per step, the inputs, the absolute time atMs, the expected outcome and the expected "
                              "durable state, every record explicit.")
    sub = p.add_subparsers(dest="traces_command", required=True, metavar="ACTION")
    export = sub.add_parser("export", help="write self-contained trace files to DIR",
                            description="Record the golden corpus (--corpus) and/or N generated traces (seeds S…S+N-1) "
                            "through the model and write one self-contained file per trace to DIR.")
    export.add_argument("directory", type=output_dir, metavar="DIR")
    export.add_argument("--corpus", action="store_true", help="the golden corpus (conformance/traces/corpus)")
    export.add_argument("--generated", type=integer(0), default=0, metavar="N", help="generated traces (default 0)")
    export.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the first generated trace")
    export.add_argument("--state-form", choices=STATE_FORMS, default="changes",
                        help="each step's state as the changed records (default) or the whole snapshot")
    export.set_defaults(func=run_export)
    check = sub.add_parser("check", help="validate trace files and re-derive every expectation from the model",
                           description="Validate each FILE against conformance/exec/schema/trace.json, then run its "
                           "inputs through the model and compare every recorded value; a wrong file is reported at its "
                           "first wrong step with a record-level diff. Exit codes: 0 every file right; 1 a file is "
                           "wrong; 2 a file is unreadable or invalid (2 wins over 1); 3 a file holds no step, so "
                           "nothing to re-derive (no verdict; 1 and 2 win over it).")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--json", action="store_true", help="one JSON object per file, one per line")
    check.set_defaults(func=run_check)


def run_export(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if not args.corpus and not args.generated:
        print("qlwf traces export: nothing to export (give --corpus and/or --generated N)", file=sys.stderr)
        return 2
    written = trace_export.export(trace_export.selected(args.corpus, args.generated, args.seed), args.directory,
                                  args.state_form)
    for e in written:
        print(f"wrote {e.path} ({e.steps} steps, {e.commands} commands)", file=out)
    print(f"exported {len(written)} traces, {sum(e.steps for e in written)} steps, state form {args.state_form}, "
          f"to {args.directory}", file=out)
    return 0


def run_check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    results = [trace_check.check_file(path) for path in args.files]
    for r in results:
        print(json.dumps(r.to_json(), ensure_ascii=False) if args.json else r.render(), file=out)
    counts = {s: sum(1 for r in results if r.status == s) for s in ("ok", "wrong", "invalid", "empty")}
    if not args.json:
        empty = f", {counts['empty']} empty (no step: no verdict)" if counts["empty"] else ""
        print(f"traces check: {len(results)} file(s): {counts['ok']} ok, {counts['wrong']} wrong, "
              f"{counts['invalid']} invalid{empty}", file=out)
    # 2 (invalid) wins over 1 (wrong), which wins over 3 (a file of no step: nothing checked), over 0
    return max((r.exit_code for r in results), key=[0, 3, 1, 2].index)
