"""`python -m qlwf.impl.sqlite.driver`: the SQLite backend behind the qlwf-backend@1 protocol.

Every `reset` opens a private in-memory database (storage.md §6.1), as the in-process backend does.
"""

from __future__ import annotations

import sys

from qlwf.impl.driver_protocol import package_version, serve
from qlwf.impl.port import CommandPort

from .adapter import SqliteAdapter


class MemoryStores:
    def open(self) -> CommandPort:
        return SqliteAdapter(":memory:")

    def shutdown(self) -> None:
        pass


def main() -> int:
    return serve(MemoryStores(), name="qlwf-sqlite", version=package_version(), fault_hooks=("corrupt",))


if __name__ == "__main__":
    sys.exit(main())
