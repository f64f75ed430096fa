"""Nothing is left behind however a run ends (issue 10 §2).

Real `qlwf` (and pytest) subprocesses take a throwaway cluster and are signalled once it is up:
SIGINT and SIGTERM tear down in order, with one stderr line and exit 128 + signal; SIGKILL cannot be
caught, so the postmaster dies with its parent and the next cluster start removes the directory.
With QLWF_PG_DSN, a killed run's databases are dropped by the next run on the same host.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from qlwf.conformance.provision import (
    UNAVAILABLE_MESSAGE,
    ExternalServer,
    ThrowawayCluster,
    cluster_root,
    find_pg_bin,
    unique_database_name,
)

REPO = Path(__file__).resolve().parents[3]
LONG_CONFORM = ("conform", "--backend", "postgres", "--traces", "100000", "--seed", "1")
LONG_CONCURRENCY = ("conform", "--backend", "postgres", "--concurrency", "2", "--ops", "100000")

Spawn = Callable[[list[str], dict[str, str]], "subprocess.Popen[str]"]

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(find_pg_bin() is None, reason=UNAVAILABLE_MESSAGE),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to track processes"),
]


# ---------------------------------------------------------------------------------------------
# Observing processes, clusters and shared memory from outside


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan's zombie lingers where init does not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


class Cluster:
    """What a running cluster of another process exposes: its dir, postmaster pid and SysV segment."""

    def __init__(self, base: Path, lines: list[str]) -> None:
        self.base = base
        self.postmaster = int(lines[0])
        self.shm = tuple(lines[6].split())  # (key, shmid)

    def shm_exists(self) -> bool:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        return any(tuple(row.split()[:2]) == self.shm for row in rows)

    def gone(self) -> bool:
        return not self.base.exists() and not alive(self.postmaster) and not self.shm_exists()


def ready_cluster_of(pid: int) -> Cluster | None:
    for base in cluster_root().glob(f"{pid}-*"):
        try:  # the server writes, rewrites and removes this file while it starts: read it once, or not at all
            lines = (base / "data" / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            lines = []
        if len(lines) > 7 and lines[7].strip() == "ready":
            return Cluster(base, lines)
    return None


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QLWF_PG_DSN", "PYTEST_ADDOPTS")}
    return {**env, **extra}


@pytest.fixture()
def spawn() -> Iterator[Spawn]:
    """Start subprocesses that are killed at the end of the test, whatever happened."""
    started: list[subprocess.Popen[str]] = []

    def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def qlwf(*args: str) -> list[str]:
    return [sys.executable, "-m", "qlwf.cli", *args]


def held_cluster(proc: subprocess.Popen[str]) -> Cluster:
    """Wait until ``proc`` has a cluster that accepts connections (proc must still be running)."""
    found: list[Cluster] = []

    def up() -> bool:
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"exited with {proc.returncode} before its cluster was up: {err[-2000:]}")
        cluster = ready_cluster_of(proc.pid)
        found[:] = [cluster] if cluster else []
        return bool(found)

    wait_until(up, 60, f"the cluster of pid {proc.pid}")
    time.sleep(0.5)  # let the run get going with it
    return found[0]


PROGRESS_LINE = re.compile(r"^(\r?\[[#.]*\] )?conform \w+: \d+/\d+ traces, ")  # qlwf/support/progress.py


def assert_one_interrupt_line(stderr: str, sig: signal.Signals) -> None:
    """The interrupt says one line; progress lines before it are the run's own (stderr is for both)."""
    lines = [line for line in stderr.splitlines() if not PROGRESS_LINE.match(line)]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qlwf: ") and sig.name in lines[0] and "clean" in lines[0], stderr


# ---------------------------------------------------------------------------------------------
# qlwf holding a throwaway cluster


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_tears_the_cluster_down(spawn: Spawn, sig: signal.Signals) -> None:
    proc = spawn(qlwf(*LONG_CONFORM), child_env())
    cluster = held_cluster(proc)
    assert alive(cluster.postmaster) and cluster.shm_exists()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    assert_one_interrupt_line(err, sig)
    assert cluster.gone()


def test_sigkill_takes_the_postmaster_along_and_the_next_start_reaps(spawn: Spawn) -> None:
    proc = spawn(qlwf(*LONG_CONFORM), child_env())
    cluster = held_cluster(proc)
    proc.kill()
    proc.wait(timeout=30)
    wait_until(lambda: not alive(cluster.postmaster), 15, "the postmaster to follow its parent")
    with ThrowawayCluster():
        assert cluster.gone()


# A cluster started from a non-main thread gets no parent-death signal (it would fire when that
# thread ends), so its postmaster outlives a SIGKILLed owner: only the reaper can stop it.
THREAD_OWNER = """
import threading, time
from qlwf.conformance.provision import ThrowawayCluster
threading.Thread(target=lambda: ThrowawayCluster().start()).start()
time.sleep(300)
"""


@pytest.fixture()
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A temp dir of this test alone, for the child and for this process: other processes starting
    clusters at the same time (parallel test workers) reap stale clusters under the shared root, and
    must not reap this test's before the test's own next start does."""
    path = tempfile.mkdtemp(prefix="qlwfr", dir="/tmp")
    os.chmod(path, 0o755)  # the server user (when root) must traverse it
    monkeypatch.setattr(tempfile, "tempdir", path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("postmaster_killed", [False, True], ids=["postmaster-running", "postmaster-killed"])
def test_next_start_reaps_a_cluster_whose_owner_was_killed(spawn: Spawn, postmaster_killed: bool,
                                                           private_tmp: str) -> None:
    proc = spawn([sys.executable, "-c", THREAD_OWNER], child_env(TMPDIR=private_tmp))
    cluster = held_cluster(proc)
    proc.kill()
    proc.wait(timeout=30)
    time.sleep(0.5)
    assert alive(cluster.postmaster), "precondition: this postmaster does not die with its owner"
    if postmaster_killed:  # e.g. the OOM killer: no shutdown, so the SysV segment is orphaned
        os.kill(cluster.postmaster, signal.SIGKILL)
        wait_until(lambda: not alive(cluster.postmaster), 15, "the postmaster to die")
        assert cluster.shm_exists()
    with ThrowawayCluster() as fresh:
        assert cluster.gone()
        assert fresh.base_dir.exists()  # the live cluster of this process is left alone


def test_pytest_sigterm_tears_the_session_server_down(spawn: Spawn) -> None:
    # -n 0: the session server must belong to this pytest process, not to an xdist worker
    proc = spawn([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                  "tests/support/hold_pg_server.py"], child_env(QLWF_HOLD_PG_SERVER="1"))
    cluster = held_cluster(proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert cluster.gone()


# ---------------------------------------------------------------------------------------------
# qlwf using an external server (QLWF_PG_DSN)


@pytest.fixture(scope="module")
def external() -> Iterator[ThrowawayCluster]:
    with ThrowawayCluster() as server:
        yield server


def qlwf_databases(server: ThrowawayCluster) -> list[str]:
    with psycopg.connect(server.dsn()) as conn:
        return [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'qlwf%'")]


def database_of(server: ThrowawayCluster, proc: subprocess.Popen[str]) -> str:
    found: list[str] = []

    def created() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode} before creating its database: {proc.communicate()[1]}")
        found[:] = [n for n in qlwf_databases(server) if re.search(rf"_{proc.pid}_\d+_[0-9a-f]+$", n)]
        return bool(found)

    wait_until(created, 60, f"a database named after pid {proc.pid}")
    time.sleep(0.5)
    return found[0]


def test_sigterm_drops_the_database_on_an_external_server(spawn: Spawn, external: ThrowawayCluster) -> None:
    proc = spawn(qlwf(*LONG_CONCURRENCY), child_env(QLWF_PG_DSN=external.dsn()))
    name = database_of(external, proc)
    assert name.startswith("qlwf_concurrency_")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert_one_interrupt_line(err, signal.SIGTERM)
    assert name not in qlwf_databases(external)


def test_sigterm_stops_pool_workers_and_drops_their_databases(spawn: Spawn, external: ThrowawayCluster) -> None:
    proc = spawn(qlwf(*LONG_CONFORM, "--jobs", "2"), child_env(QLWF_PG_DSN=external.dsn()))
    workers: list[str] = []

    def both_workers_run() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode}: {proc.communicate()[1]}")
        names = [n for n in qlwf_databases(external) if n.startswith("qlwf_conform_")]
        workers[:] = [n for n in names if not re.search(rf"_{proc.pid}_\d+_[0-9a-f]+$", n)]
        return len(workers) == 2

    wait_until(both_workers_run, 60, "two pool workers with their databases")
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert_one_interrupt_line(err, signal.SIGTERM)
    assert not set(workers) & set(qlwf_databases(external))


def test_a_killed_runs_database_is_dropped_by_the_next_run(spawn: Spawn, external: ThrowawayCluster) -> None:
    proc = spawn(qlwf(*LONG_CONCURRENCY), child_env(QLWF_PG_DSN=external.dsn()))
    name = database_of(external, proc)
    proc.kill()
    proc.wait(timeout=30)
    assert name in qlwf_databases(external)
    later = ExternalServer(external.dsn())
    try:
        mine = unique_database_name("qlwf_test")
        later.create_database(mine)
        assert name not in qlwf_databases(external)
        assert mine in qlwf_databases(external)
    finally:
        later.stop()
    assert mine not in qlwf_databases(external)


NAME_OF_A_DEAD_OWNER = "from qlwf.conformance.provision import unique_database_name as u; print(u('qlwf_test'))"


def test_only_databases_of_dead_owners_on_this_host_are_reaped(external: ThrowawayCluster) -> None:
    dead = subprocess.run([sys.executable, "-c", NAME_OF_A_DEAD_OWNER], capture_output=True, text=True,
                          check=True).stdout.strip()
    marker = dead.split("_")[2]
    foreign = dead.replace(f"_{marker}_", f"_{'0' if marker[0] != '0' else '1'}{marker[1:]}_")
    live = unique_database_name("qlwf_test")
    for name in (dead, foreign, live):
        external.create_database(name)
    try:
        reaper = ExternalServer(external.dsn())
        dropped = reaper.reap_stale_databases()
        reaper.stop()
        present = qlwf_databases(external)
        assert dead in dropped and foreign not in dropped and live not in dropped
        assert dead not in present and foreign in present and live in present
    finally:
        for name in (dead, foreign, live):
            external.drop_database(name)
