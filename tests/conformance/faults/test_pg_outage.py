"""Outages produce a verdict: a server that stays away stops the concurrency run after the
reconnection window with "storage unreachable" (exit 3), one that comes back is reported and the
run is still judged; a malformed or unreachable QLWF_PG_DSN is one line and exit 2; a throwaway
cluster that will not start leaves the gate's PostgreSQL checks unknown; a K the server cannot
serve is refused up front."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from qlwf.conformance.concurrency.harness import concurrency_check
from qlwf.conformance.faults.outage import Reachability, StorageUnreachable, connection_headroom
from qlwf.conformance.provision import BIN_ENV, DSN_ENV, PgServer, PostgresStartupError, ThrowawayCluster

from qlwf.cli.entry import main

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[3]
WINDOW_S = 3.0
MARGIN_S = 10.0  # a worker blocked in the pool's 5 s getconn timeout, pool close, database cleanup


@pytest.fixture()
def cluster(pg_durable: ThrowawayCluster) -> Iterator[ThrowawayCluster]:
    """The durable cluster, running again after the test whatever the test did to it."""
    pg_durable.restart()
    yield pg_durable
    pg_durable.restart()


def once_at(n: int, action: Callable[[], None]) -> Callable[[int], None]:
    """A hook that runs `action` once, at the first count >= n; workers call it from several threads,
    so the test-and-set is one step (two threads past a bare check would crash the server twice)."""
    fired = False
    guard = threading.Lock()

    def hook(count: int) -> None:
        nonlocal fired
        with guard:
            first = count >= n and not fired
            fired = fired or first
        if first:
            action()
    return hook


def test_a_permanent_outage_stops_the_run_after_the_window(cluster: ThrowawayCluster) -> None:
    crashed_at: list[float] = []

    def crash() -> None:
        crashed_at.append(time.monotonic())
        cluster.crash()

    report = concurrency_check(k=3, ops=10_000, seed=1, server=cluster, reconnect_window_s=WINDOW_S,
                               after_transaction=once_at(30, crash))
    elapsed = time.monotonic() - crashed_at[0]
    assert WINDOW_S <= elapsed <= WINDOW_S + MARGIN_S, elapsed
    assert report.unreachable is not None and not report.passed
    assert report.transactions >= 30 and 0 < report.ops_done < 3 * 10_000 and report.workflows_admitted >= 3
    line = report.line()
    assert "STORAGE UNREACHABLE" in line and f"got through {report.ops_done} of 30000 ops" in line
    progress = report.to_json()["progress"]
    assert report.to_json()["storageUnreachable"] and progress["opsCompleted"] == report.ops_done


def test_a_transient_outage_is_reported_and_the_history_still_judged(cluster: ThrowawayCluster) -> None:
    def crash_and_come_back() -> None:
        cluster.crash()
        threading.Timer(1.5, cluster.restart).start()

    report = concurrency_check(k=3, ops=40, seed=2, server=cluster, reconnect_window_s=30,
                               after_transaction=once_at(25, crash_and_come_back))
    assert report.passed, "\n".join(report.problems or [report.line()])
    assert len(report.outages) == 1 and report.outages[0].seconds >= 1.0
    assert "1 outage(s) lasting" in report.line() and report.replayed > 25
    assert report.to_json()["outages"][0]["seconds"] >= 1.0


def test_the_cli_exits_3_when_the_server_goes_away_for_good(cluster: ThrowawayCluster, tmp_path: Path) -> None:
    env = {**os.environ, DSN_ENV: cluster.dsn()}
    cmd = [sys.executable, "-m", "qlwf.cli", "conform", "--backend", "postgres", "--concurrency", "2",
           "--ops", "100000", "--reconnect-window", str(WINDOW_S)]
    with subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            _wait_for_pool(cluster, 2, deadline=time.monotonic() + 30)
            time.sleep(0.5)
            cluster.crash()
            stopped = time.monotonic()
            out, err = proc.communicate(timeout=WINDOW_S + MARGIN_S + 10)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 3, (out, err)
    assert time.monotonic() - stopped <= WINDOW_S + MARGIN_S + 5
    assert "Traceback" not in err and "STORAGE UNREACHABLE" in out.splitlines()[-1]
    assert "workflows admitted" in out.splitlines()[-1] and "storage unreachable at" in err


# ---- a server lost under a lockstep run: no verdict, not a divergence (decisions Q-107) ------------------
@pytest.fixture()
def backend_on(cluster: ThrowawayCluster, monkeypatch: pytest.MonkeyPatch) -> ThrowawayCluster:
    """The `postgres` backend of this process on the test's own cluster (the session's stays untouched)."""
    from qlwf.conformance.backends import postgres as pg_backend

    monkeypatch.setattr(pg_backend, "shared_server", lambda: (cluster, False))
    return cluster


def test_a_server_lost_between_traces_is_no_verdict(backend_on: ThrowawayCluster) -> None:
    from qlwf.conformance.backends import BackendLost
    from qlwf.conformance.lockstep import runner

    def traces() -> Iterator[Any]:
        yield from runner.generated_traces(2, 7)
        backend_on.crash()
        yield from runner.generated_traces(1, 9)

    with pytest.raises(BackendLost, match=r"stopped answering during the run: .*\(opening a fresh store for trace"):
        runner.run_traces("postgres", traces())


def test_a_server_lost_under_a_command_is_no_verdict_not_a_divergence(backend_on: ThrowawayCluster,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Before Q-107 the step was a divergence (the adapter answers Unavailable where the model commits)."""
    from qlwf.conformance.backends import BackendLost
    from qlwf.conformance.lockstep import runner
    from qlwf.impl.postgres.adapter import PostgresAdapter

    calls = itertools.count(1)
    execute = PostgresAdapter.execute

    def crashing(self: PostgresAdapter, name: str, args: Any, now: int | None = None) -> Any:
        if next(calls) == 12:
            backend_on.crash()
        return execute(self, name, args, now)

    monkeypatch.setattr(PostgresAdapter, "execute", crashing)
    with pytest.raises(BackendLost, match=r"stopped answering during the run: .*\(trace '.*' step \d+: "):
        runner.run_traces("postgres", runner.generated_traces(3, 7))
    assert next(calls) > 12


def test_a_server_lost_while_a_divergence_is_reported_is_no_verdict(backend_on: ThrowawayCluster,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An Unavailable answer read back fine, then the server gone while the report reads the whole store:
    before, the read's OperationalError escaped the run (a traceback, exit 1; seen once under load)."""
    from qlwf.conformance.backends import BackendLost
    from qlwf.conformance.lockstep import compare as lockstep
    from qlwf.conformance.lockstep import runner

    calls = itertools.count(1)
    backend_outcome, whole = lockstep.backend_outcome, lockstep.ReadBack.whole

    def unavailable_once(port: Any, name: str, args: Any, now: int, step: Any = None) -> Any:
        got = backend_outcome(port, name, args, now, step)
        if next(calls) == 5:  # as a connection killed under the command would answer
            return {"error": {"class": "Unavailable", "code": "QL3_STORAGE_UNAVAILABLE", "reason": "storage_error"}}
        return got

    def crash_then_read(self: Any, snap: Any, fresh: Any) -> Any:
        backend_on.crash()
        return whole(self, snap, fresh)

    monkeypatch.setattr(lockstep, "backend_outcome", unavailable_once)
    monkeypatch.setattr(lockstep.ReadBack, "whole", crash_then_read)
    with pytest.raises(BackendLost, match=r"stopped answering during the run: .*\(trace '"):
        runner.run_traces("postgres", runner.generated_traces(2, 7))


def test_the_gate_says_unknown_when_the_server_is_gone(backend_on: ThrowawayCluster) -> None:
    """Before Q-107 both checks failed: conform-postgres with an OperationalError traceback, and
    concurrency-postgres with "STORAGE UNREACHABLE", which blamed the implementation for a dead server."""
    from qlwf.gate.checks import backend_checks
    from qlwf.gate.verdict import run_checks

    backend_on.crash()
    checks = [c for c in backend_checks() if c.name in ("conform-postgres", "concurrency-postgres")]
    results = run_checks(checks, {"quick": True})
    assert [(r.name, r.status) for r in results] == [("conform-postgres", "unknown"),
                                                    ("concurrency-postgres", "unknown")]
    for r in results:
        assert r.summary.startswith("postgres leg lost its storage: ") and "Is the server running" in r.summary
        assert not r.details


def test_the_cli_says_no_verdict_when_the_server_goes_away_mid_run(cluster: ThrowawayCluster, tmp_path: Path) -> None:
    """Before Q-107: a DIVERGENCE (backend_crash) report, then a traceback, exit 1."""
    env = {**os.environ, DSN_ENV: cluster.dsn()}
    cmd = [sys.executable, "-m", "qlwf.cli", "conform", "--backend", "postgres", "--traces", "2000"]
    with subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            _wait_for_database(cluster, "qlwf_conform_%", deadline=time.monotonic() + 60)
            time.sleep(0.5)
            cluster.crash()
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 3, (out, err)
    assert "Traceback" not in err and "DIVERGENCE" not in out
    assert err.splitlines()[-1].startswith("conform postgres: NO VERDICT — the PostgreSQL server stopped answering")


def test_a_server_lost_while_a_run_drops_its_store_is_no_verdict(backend_on: ThrowawayCluster,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The server crashed as a run dropped its database: `conform` without --corpus first runs the empty
    corpus, whose store is dropped before any generated trace. Found by crashing the server under
    `qlwf conform` 0.05 s after it connected: the drop's OperationalError escaped the runner, and the CLI
    said "internal error (a bug in qlwf)", exit 70, with a traceback (issue 33). The crash is injected at
    the drop itself here."""
    from qlwf.conformance.backends import postgres as pg_backend

    shutdown = pg_backend.PostgresBackend.shutdown
    crashed: list[str] = []

    def crash_then_shut_down(self: pg_backend.PostgresBackend) -> None:
        if not crashed:
            crashed.append(self.name)
            backend_on.crash()
        shutdown(self)

    monkeypatch.setattr(pg_backend.PostgresBackend, "shutdown", crash_then_shut_down)
    code = main(["conform", "--backend", "postgres", "--traces", "3"])
    err = capsys.readouterr().err
    assert crashed and code == 3, err
    assert "Traceback" not in err and "internal error" not in err
    assert err.splitlines()[-1].startswith("conform postgres: NO VERDICT — the PostgreSQL server stopped answering "
                                           "during the run: ")
    assert err.splitlines()[-1].endswith("(shutting the backend down)")


def test_a_factory_stops_the_server_it_started_even_when_its_store_cannot_be_dropped() -> None:
    """A pool worker's factory owns the cluster it started: a drop that fails on a dead server must not
    leave that cluster running (the drop's error used to skip the stop)."""
    from qlwf.conformance.backends.postgres import PostgresBackend

    stopped: list[bool] = []

    class DeadServer:
        def drop_database(self, name: str) -> None:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

        def stop(self) -> None:
            stopped.append(True)

    class Pool:
        def close(self) -> None:
            pass

    factory = PostgresBackend.__new__(PostgresBackend)  # no server: only shutdown() is under test
    vars(factory).update(server=DeadServer(), database=Pool(), name="qlwf_x", _owns_server=True)
    with pytest.raises(psycopg.OperationalError):
        factory.shutdown()
    assert stopped == [True]


def _wait_for_database(cluster: ThrowawayCluster, pattern: str, deadline: float) -> None:
    """Until a client is connected to a database named like `pattern`."""
    while time.monotonic() < deadline:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE %s "
                               "AND backend_type = 'client backend'", (pattern,)).fetchone()
        if row and row[0]:
            return
        time.sleep(0.05)
    raise AssertionError(f"no client ever connected to a database like {pattern}")


def _wait_for_pool(cluster: ThrowawayCluster, k: int, deadline: float) -> None:
    """Until the run's k pooled connections are open on its own database."""
    sql = ("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE 'qlwf_concurrency_%' "
           "AND backend_type = 'client backend'")
    while time.monotonic() < deadline:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
        if row and row[0] >= k:
            return
        time.sleep(0.05)
    raise AssertionError("the concurrency run never opened its pool")


@pytest.mark.parametrize("dsn", ["host=/nonexistent/qlwf port=1 dbname=x connect_timeout=2",
                                 "postgresql://qlwf:s3cret@[::1", "not a dsn"])
@pytest.mark.parametrize("argv", [["conform", "--backend", "postgres", "--traces", "1"],
                                  ["check", "--only", "conform-postgres"],
                                  ["replay", str(REPO / "conformance/traces/corpus/adr0226-settled-replay.json"),
                                   "--backend", "postgres"]])
def test_a_broken_dsn_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                            dsn: str, argv: list[str]) -> None:
    monkeypatch.setenv(DSN_ENV, dsn)
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and DSN_ENV in lines[0] and ("malformed" in lines[0] or "unreachable" in lines[0])
    assert "s3cret" not in captured.err and "Traceback" not in captured.err and not captured.out.strip()


@pytest.fixture(scope="module")
def role_without_createdb(pg_server: PgServer) -> Iterator[str]:
    """A DSN of the session's server for a login role that may not create databases."""
    name, password = f"qlwf_plain_{os.getpid()}", "pl41n-s3cret"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        try:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOCREATEDB PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(password)))
        except psycopg.errors.InsufficientPrivilege:  # QLWF_PG_DSN may name a role without CREATEROLE
            pytest.skip("the server's role may not create roles")
    try:
        yield make_conninfo(pg_server.dsn(), user=name, password=password)
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.mark.parametrize("argv", [["conform", "--backend", "postgres", "--traces", "1"],
                                  ["check", "--only", "conform-postgres"],
                                  ["replay", str(REPO / "conformance/traces/corpus/adr0226-settled-replay.json"),
                                   "--backend", "postgres"]])
def test_a_role_that_may_not_create_databases_is_one_line_and_exit_2(
        role_without_createdb: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str]) -> None:
    """Every run creates a database of its own: without CREATEDB that failed deep in the backend, as a
    traceback from `qlwf conform` (exit 1, the code of a divergence) and as a failed check in the gate."""
    monkeypatch.setenv(DSN_ENV, role_without_createdb)
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and DSN_ENV in lines[0] and "CREATEDB" in lines[0], captured.err
    assert "pl41n-s3cret" not in captured.err and "Traceback" not in captured.err and not captured.out.strip()


FULL_DISK = 'FATAL:  could not write to file "base/4/3603_vm": No space left on device'


@pytest.fixture()
def full_disk_bin() -> Iterator[Path]:
    """Server binaries whose initdb fails as on a full disk, after the page of progress it prints first.
    In a directory of its own under the temp dir, readable by all: as root, the cluster's tools run as
    an unprivileged user, who cannot enter pytest's private tmp_path."""
    directory = Path(tempfile.mkdtemp(prefix="qlwf-full-disk-"))
    try:
        directory.chmod(0o755)
        scripts = {"initdb": ("echo 'The files belonging to this database system will be owned by user \"postgres\".'\n"
                              "echo 'creating subdirectories ... ok'\n"
                              f"echo 'performing post-bootstrap initialization ... {FULL_DISK}'\n"
                              "echo 'child process exited with exit code 1'\nexit 1\n"),
                   "pg_ctl": "exit 1\n", "postgres": "exit 1\n"}
        for name, body in scripts.items():
            (directory / name).write_text("#!/bin/sh\n" + body)
            (directory / name).chmod(0o755)
        yield directory
    finally:
        shutil.rmtree(directory)


def test_an_initdb_that_fails_is_one_line_naming_its_error(full_disk_bin: Path) -> None:
    cluster = ThrowawayCluster(bin_dir=full_disk_bin)
    with pytest.raises(PostgresStartupError) as info:
        cluster.start()
    message = str(info.value)
    assert message.startswith("initdb failed (exit 1) in ") and "\n" not in message
    assert message.endswith(" ".join(FULL_DISK.split())) and "The files belonging" not in message
    where = Path(message.split(" in ", 1)[1].split(": ", 1)[0])
    assert where.name and not where.exists()  # the cluster's directory is removed on the way out


def test_a_cluster_that_will_not_start_leaves_the_gate_unknown(full_disk_bin: Path, tmp_path: Path) -> None:
    """No implementation ran, so there is no evidence either way (decisions Q-101): unknown, exit 3, one
    reason per check, never a failed check with a traceback (which blamed the implementation before)."""
    env = {k: v for k, v in os.environ.items() if k not in (DSN_ENV, "CI")} | {BIN_ENV: str(full_disk_bin)}
    report = tmp_path / "gate.json"
    done = subprocess.run([sys.executable, "-m", "qlwf.cli", "check", "--only", "conform-postgres", "--only",
                           "faults-postgres", "--jobs", "1", "--json", str(report)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    results = json.loads(report.read_text())["checks"]
    assert [(r["name"], r["status"]) for r in results] == [("conform-postgres", "unknown"),
                                                          ("faults-postgres", "unknown")]
    for r in results:
        assert r["summary"].startswith("postgres leg cannot run: initdb failed (exit 1)")
        assert "No space left on device" in r["summary"]
    assert "Traceback" not in done.stdout + done.stderr
    conform = subprocess.run([sys.executable, "-m", "qlwf.cli", "conform", "--backend", "postgres", "--traces", "1"],
                             capture_output=True, text=True, env=env, timeout=300, check=False)
    assert conform.returncode == 2 and conform.stderr.count("\n") == 1 and "No space left" in conform.stderr
    out = tmp_path / "campaign"
    campaign = subprocess.run([sys.executable, "-m", "qlwf.cli", "campaign", "--minutes", "1", "--kinds",
                               "oracle,conform-postgres", "--max-shards", "1", "--oracle-lines", "50",
                               "--out", str(out)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert campaign.returncode == 3, campaign.stdout + campaign.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "unknown" and summary["kinds"]["conform-postgres"]["status"] == "skipped"
    assert "No space left on device" in json.dumps(summary) and "Traceback" not in campaign.stderr


def test_a_k_above_the_connection_limit_is_refused(pg_server: PgServer, capsys: pytest.CaptureFixture[str]) -> None:
    headroom = connection_headroom(pg_server.dsn())
    assert headroom.available > 0
    # K pooled connections + 1 harness connection > available; + 5 in case a connection counted here has
    # closed before the command measures again
    too_many = str(headroom.available + 5)
    assert main(["conform", "--backend", "postgres", "--concurrency", f"2,{too_many}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--concurrency {too_many}" in err[0] and "max_connections" in err[0]


def test_the_window_bounds_the_wait_without_a_server() -> None:
    reach = Reachability("unused", 0.5, probe_fn=lambda _dsn: False)
    start = time.monotonic()
    with pytest.raises(StorageUnreachable):
        reach.wait()
    assert 0.5 <= time.monotonic() - start < 2.0 and reach.gave_up is not None
    with pytest.raises(StorageUnreachable):  # every later caller stops at once
        reach.wait()
    answers = iter([False, False, True])
    back = Reachability("unused", 30, probe_fn=lambda _dsn: next(answers))
    back.wait()
    assert len(back.outages) == 1 and back.gave_up is None


def test_a_stale_pooled_connection_after_a_restart_is_waited_out() -> None:
    from qlwf.conformance.backends.postgres import PostgresConcurrencyStore
    from qlwf.conformance.concurrency.harness import _through_outages

    calls: list[int] = []

    def snapshot() -> str:
        calls.append(1)
        if len(calls) == 1:  # the pool handed out a connection the restarted server no longer knows
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return "snapshot"

    reach = Reachability("unused", 5, probe_fn=lambda _dsn: True)
    assert _through_outages(reach, snapshot, PostgresConcurrencyStore.transient) == "snapshot" and len(calls) == 2
