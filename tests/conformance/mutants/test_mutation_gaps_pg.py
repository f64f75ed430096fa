"""PostgreSQL behaviours no other test checked, found by the mutation run's survivors
(docs/mutation-survivors.md): through the command port of a PostgresAdapter on the shared test server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from qlwf.conformance.backends.postgres import PostgresBackend
from qlwf.conformance.generate import plans
from qlwf.impl.port import FixedClock
from qlwf.impl.postgres.adapter import PostgresAdapter
from qlwf.impl.postgres.store import PgStore
from qlwf.model.errors import QlwfError

pytestmark = pytest.mark.postgres

T0 = 1_000_000


@pytest.fixture
def port(pg_backend: PostgresBackend) -> Iterator[PostgresAdapter]:
    pg_backend.database.reset()
    p = PostgresAdapter(pg_backend.database, FixedClock())
    try:
        yield p
    finally:
        p.close()  # the database (and its pool) belongs to the backend


def test_a_clock_below_the_runs_last_event_fails_closed(port: PostgresAdapter) -> None:
    """S-14 on PostgreSQL: the Run's last event time is a floor of the observation time."""
    plan = plans.make_plan("run-1", "plan-1", {"a": [], "b": ["a"]}, T0)
    port.execute("admit_workflow", {"plan": plan}, now=T0)
    port.execute("request_cancel", {"runId": "run-1", "reason": "user", "actor": {"type": "user"}}, now=T0 + 100)
    before = port.snapshot()
    with pytest.raises(QlwfError) as err:
        port.execute("converge_cancellation", {"runId": "run-1"}, now=T0 + 50)
    assert (err.value.error_class, err.value.reason) == ("Invalid", "clock_regression")
    assert port.snapshot() == before


def test_a_storage_error_names_its_sqlstate(pg_backend: PostgresBackend) -> None:
    """storage.md §6.2: a non-constraint error is Unavailable storage_error; the message carries the SQLSTATE
    (the operator's only handle on what the server said), not just a Python class name."""
    class DiskFullStore(PgStore):
        def insert_event(self, event: dict[str, Any]) -> None:
            raise psycopg.errors.DiskFull("could not extend file")

    pg_backend.database.reset()
    port = PostgresAdapter(pg_backend.database, FixedClock(), store_factory=DiskFullStore)
    try:
        with pytest.raises(QlwfError) as err:
            port.execute("admit_workflow", {"plan": plans.make_plan("run-1", "plan-1", {"a": []}, T0)}, now=T0)
    finally:
        port.close()
    assert (err.value.error_class, err.value.reason) == ("Unavailable", "storage_error")
    assert "SQLSTATE 53100" in err.value.message


# The shared-server lifecycle of conformance/backends/postgres.py, in a process of its own (stopping the
# session's server here would pull it from under the other tests). Survivors P5 and P6.
_LIFECYCLE = r"""
import psycopg
from qlwf.conformance.backends import postgres as c

first, owned_first = c.shared_server()  # the main process keeps one server for all its callers
second, owned_second = c.shared_server()
assert second is first and not owned_first and not owned_second, (owned_first, owned_second)
dsn = first.dsn()
c.stop_shared_server()
try:
    psycopg.connect(dsn, connect_timeout=5).close()
except psycopg.OperationalError:
    print("stopped")
else:
    print("still running")
"""


def test_the_main_process_shares_one_server_and_stops_it_on_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from qlwf.conformance.provision import DSN_ENV, find_pg_bin

    if find_pg_bin() is None:
        pytest.skip("needs the PostgreSQL server binaries (a throwaway cluster of its own)")
    monkeypatch.delenv(DSN_ENV, raising=False)  # an external server is not ours to stop
    out = subprocess.run([sys.executable, "-c", _LIFECYCLE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "stopped"
