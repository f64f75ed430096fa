"""The `qlwf` command line: one sub-command module per area, registered here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module defines `register(subparsers)`; its parsers set `func(args) -> int`.
SUBCOMMAND_MODULES = (
    "qlwf.cmd_check",
    "qlwf.cmd_oracle",
    "qlwf.cmd_conform",
    "qlwf.cmd_prove",
    "qlwf.cmd_explore",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qlwf", description="Formal-model-first verification gate for the ql3 "
                                     "Workflow runtime (ADR-0226 frontier, ADR-0228 cancellation convergence).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
