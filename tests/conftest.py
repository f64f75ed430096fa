"""Shared pytest configuration: Hypothesis settings profiles and the session's PostgreSQL server.

Select one with HYPOTHESIS_PROFILE (default `ci`):
* ci   - deterministic (derandomize, no example database), a modest budget: the stateful test takes
         well under a minute;
* dev  - random seeds and the local example database, a larger budget;
* deep - a long campaign for release gates (many more examples, longer step sequences).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("ci", derandomize=True, database=None, max_examples=120, stateful_step_count=40,
                          deadline=None, suppress_health_check=_SLOW_OK, print_blob=False)
settings.register_profile("dev", max_examples=300, stateful_step_count=60, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("deep", max_examples=3000, stateful_step_count=120, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _load_the_checkouts_modules() -> None:
    """Hypothesis draws constants from the source of the checkout's non-test modules this process has
    imported, so "derandomized" runs differed with the test files a worker had run before (decisions Q-113).
    Every module the suite may import is loaded before any test: the distribution, and the scripts of
    docs/ and examples/ (under names of their own; the constants are the file's, whatever the name)."""
    import importlib.util

    from qlwf.support.preload import load_every_module

    load_every_module()
    repo = Path(__file__).resolve().parent.parent
    for script in sorted([*(repo / "docs").glob("*.py"), *(repo / "examples").glob("*.py")]):
        name = f"_qlwf_constants_{script.parent.name}_{script.stem}"
        spec = importlib.util.spec_from_file_location(name, script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


_load_the_checkouts_modules()


def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM (a cancelled CI job, `timeout`, `kill`) into an interrupt like Ctrl-C.

    By default SIGTERM ends pytest on the spot: no fixture teardown, no atexit, so the session's
    PostgreSQL cluster directory (and, with QLWF_PG_DSN, its databases) would be left behind. As a
    KeyboardInterrupt, pytest stops the session and tears its fixtures down
    (tests/conformance/provision/test_pg_signals.py).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return  # someone else (a runner, a plugin) handles it
    owner = os.getpid()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:  # a forked worker of a test: die as it would have by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM must not cut the teardown short
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    signal.signal(signal.SIGTERM, on_sigterm)
    from qlwf.cli import entry as cli
    cli.reset_at_fork(on_sigterm)  # pool workers of tests: Pool.terminate() must end them


@pytest.fixture(scope="session", autouse=True)
def _one_exploration_per_run(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Under xdist every worker's base temp lies in one directory of this run: the workers share the
    session's exploration through it (support/explored.py) instead of each exploring again."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from support import explored

        explored.SHARED_DIR = tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """The PostgreSQL server of the session for the test_pg_* modules: $QLWF_PG_DSN or a throwaway cluster.

    Without binaries and without QLWF_PG_DSN the tests skip with one clear message, except under
    CI=true, where that is a failure. The server is also the one the `postgres` conformance backend uses.
    """
    from qlwf.conformance.backends.postgres import shared_server, stop_shared_server
    from qlwf.conformance.provision import PostgresUnavailable
    from qlwf.impl.postgres.dsn import check_dsn_env
    from support.postgres_leg import missing

    try:
        check_dsn_env()  # a QLWF_PG_DSN that is malformed, unreachable or without CREATEDB: one message
        server, _ = shared_server()
    except PostgresUnavailable as exc:
        missing(str(exc))
    yield server
    stop_shared_server()


@pytest.fixture(scope="module")
def pg_backend(pg_server: Any) -> Iterator[Any]:
    """The `postgres` conformance backend on the session's server, one per test module (the one copy of it:
    a test that needs another pool size says so with its own fixture)."""
    from qlwf.conformance.backends.postgres import PostgresBackend

    factory = PostgresBackend()
    yield factory
    factory.shutdown()


@pytest.fixture
def db(pg_backend: Any) -> Any:
    """The PostgreSQL storage adapter of `pg_backend`, emptied for the test (impl/postgres `PgDatabase`)."""
    pg_backend.database.reset()
    return pg_backend.database


@pytest.fixture(scope="session")
def pg_durable() -> Iterator[Any]:
    """A private throwaway cluster with durability on (fsync, synchronous_commit), for the tests that
    crash, stop and restart a server; never the shared one. Skips (fails under CI) without binaries."""
    from qlwf.conformance.provision import PostgresUnavailable, ThrowawayCluster
    from support.postgres_leg import missing

    try:
        cluster = ThrowawayCluster(durable=True).start()
    except PostgresUnavailable as exc:
        missing(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
