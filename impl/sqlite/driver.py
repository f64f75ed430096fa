"""`python -m qlwf.impl.sqlite.driver`: the SQLite backend behind the qlwf-backend@1 protocol.

Every `reset` opens a private in-memory database (storage.md §6.1), as the in-process backend does.
`--profile edge` restricts it to the surface of ql3's Edge adapter (impl/sqlite/restricted.py) and
declares that surface in hello; `--plant NAME` (with it) plants a fault for the harness's own tests.
"""

from __future__ import annotations

import argparse
import sys

from qlwf.impl.driver_protocol import package_version, serve
from qlwf.impl.port import CommandPort
from qlwf.impl.ql3_surfaces import EDGE_COMMANDS, EDGE_SURFACE

from .adapter import SqliteAdapter
from .restricted import PLANTS, EdgePort


class MemoryStores:
    def __init__(self, edge: bool = False, plants: frozenset[str] = frozenset()) -> None:
        self.edge = edge
        self.plants = plants

    def open(self) -> CommandPort:
        store = SqliteAdapter(":memory:")
        return EdgePort(store, self.plants) if self.edge else store

    def shutdown(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qlwf.impl.sqlite.driver",
                                     description="the SQLite store behind the qlwf-backend@1 protocol")
    parser.add_argument("--profile", choices=("edge",), default=None,
                        help="behave like ql3's Edge adapter and declare its surface in hello")
    parser.add_argument("--plant", action="append", choices=PLANTS, default=[],
                        help="with --profile edge: a planted fault (repeatable)")
    args = parser.parse_args(argv)
    if args.plant and args.profile is None:
        parser.error("--plant needs --profile edge")
    if args.profile is None:
        return serve(MemoryStores(), name="qlwf-sqlite", version=package_version(), fault_hooks=("corrupt",))
    name = "qlwf-sqlite-edge" + "".join(f"+{p}" for p in args.plant)
    return serve(MemoryStores(True, frozenset(args.plant)), name=name, version=package_version(),
                 fault_hooks=("corrupt",), commands=EDGE_COMMANDS, surface=EDGE_SURFACE)


if __name__ == "__main__":
    sys.exit(main())
