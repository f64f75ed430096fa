"""`python -m qlwf.conformance.drivers.postgres`: the PostgreSQL backend behind the qlwf-backend@1 protocol.

The server is `QLWF_PG_DSN` or a throwaway cluster (`conformance/provision`, `server_from_env`), started
before the first request is read; the driver owns one database on it, emptied on every `reset`, and drops
it (and stops the cluster) when the harness closes the channel.
"""

from __future__ import annotations

import sys

from qlwf.impl.driver_protocol import package_version, serve

from ..backends.postgres import PostgresBackend, stop_shared_server


class DriverStores(PostgresBackend):
    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            stop_shared_server()


def main() -> int:
    return serve(DriverStores, name="qlwf-postgres", version=package_version(), fault_hooks=("corrupt",))


if __name__ == "__main__":
    sys.exit(main())
