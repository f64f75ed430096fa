"""`qlwf regenerate`: rebuild every generated artifact of the checkout (qlwf/gate/artifacts.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from qlwf.gate import artifacts


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "regenerate", help="rebuild every generated artifact (docs tables, ADR matrix, examples, corpus, explorer "
                           "manifest)",
        description="Rebuild every generated artifact of the source checkout from the model: "
                    + "; ".join(f"{a.name}: {a.about}" for a in artifacts.ARTIFACTS)
                    + ". Exit 0 when done (with --check: when nothing is stale), 1 when --check found stale files, "
                      "2 when a generator failed.")
    p.add_argument("--check", action="store_true", help="write nothing; list stale files and exit 1 if any")
    p.add_argument("--only", action="append", choices=artifacts.NAMES, metavar="NAME",
                   help=f"only these artifacts (repeatable; one of {', '.join(artifacts.NAMES)})")
    p.add_argument("--root", type=Path, default=None, help="the checkout (default: the one qlwf runs from)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        root = args.root.resolve() if args.root else artifacts.source_root()
        built = artifacts.build(root, tuple(args.only or artifacts.NAMES))
    except (FileNotFoundError, RuntimeError) as e:
        print(f"regenerate: {e}", file=sys.stderr)
        return 2
    if args.check:
        stale = artifacts.stale(root, built)
        for path in stale:
            print(f"stale: {path}")
        print(f"{len(stale)} stale file(s) in {', '.join(built)}")
        return 1 if stale else 0
    changed = artifacts.write(root, built)
    for path in changed:
        print(f"wrote: {path}")
    print(f"regenerated {', '.join(built)}: {len(changed)} file(s) changed")
    return 0
