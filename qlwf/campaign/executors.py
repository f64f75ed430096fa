"""Where shards run: a local process pool (the default) or an existing Dask distributed cluster.

Both offer the same four operations to the campaign loop; neither decides anything about results.
The pool forks, so its workers inherit the parent's PostgreSQL server (conformance/backends/postgres.py)
and any backend registered at run time; Dask workers are separate processes on any host, which get
everything they need inside the shard.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

from qlwf.conformance.processes.fork_pool import ForkPool, Outcome

from .code_digest import code_digest
from .shards import Shard, ShardResult, error_line, run_shard


class ClusterUnavailable(Exception):
    """--scheduler given, but dask.distributed is not installed, the address is not one, or the
    scheduler does not answer."""


class OtherCode(Exception):
    """A worker runs another qlwf than the campaign that sent it a shard (decisions Q-120)."""


def run_shard_of(shard: Shard, digest: str) -> ShardResult:
    """run_shard on a worker that runs the very source the campaign planned the shard with."""
    if code_digest() != digest:
        raise OtherCode(f"this worker runs another qlwf (source digest {code_digest()[:12]}, the campaign's "
                        f"{digest[:12]}): install the campaign's checkout on every worker")
    return run_shard(shard)


class ShardLost(Exception):
    """The executor lost a shard: its worker died (the kernel's OOM killer, a SIGKILL), the cluster
    gave up on it, or the connection to the cluster went. Not a finding of the system under test: the
    shard's evidence is missing (decisions Q-105). `executor_gone`: nothing more can run on it."""

    def __init__(self, why: str, executor_gone: bool = False) -> None:
        super().__init__(why)
        self.executor_gone = executor_gone


class Executor(Protocol):
    workers: int
    where: str

    def submit(self, shard: Shard) -> Any: ...

    def wait_any(self, handles: Iterable[Any], timeout: float) -> set[Any]: ...

    def result(self, handle: Any) -> ShardResult: ...

    def cancel(self, handles: Iterable[Any]) -> None: ...

    def close(self) -> None: ...


class PoolExecutor:
    """Forked local processes (conformance/fork_pool); close() kills what still runs (an interrupt, a
    finding that makes the remaining shards moot) instead of waiting for it."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.where = f"a local pool of {workers} process(es)"
        self._pool: ForkPool[Shard, ShardResult] = ForkPool(run_shard, workers)
        self._finished: dict[int, Outcome[ShardResult]] = {}

    def submit(self, shard: Shard) -> int:
        return self._pool.submit(shard)

    def wait_any(self, handles: Iterable[Any], timeout: float) -> set[Any]:
        wanted = set(handles)
        deadline = time.monotonic() + timeout
        while not wanted & self._finished.keys():
            left = deadline - time.monotonic()
            if left <= 0 or not self._pool.pending:
                break
            self._collect(left)
        return wanted & self._finished.keys()

    def result(self, handle: int) -> ShardResult:
        """The shard's result, waiting for it if need be (a cancelled shard has none: KeyError). A
        worker that died on it (WorkerDied) is ShardLost; the pool has already replaced it."""
        while handle not in self._finished and self._pool.pending:
            self._collect(None)
        outcome = self._finished.pop(handle)
        try:
            return outcome.get()
        except Exception as e:  # run_shard returns every error of its own: only the worker's end is left
            raise ShardLost(error_line(e)) from e

    def _collect(self, timeout: float | None) -> None:
        for outcome in self._pool.wait(timeout):
            self._finished[outcome.ticket] = outcome

    def cancel(self, handles: Iterable[Any]) -> None:
        for h in handles:
            self._pool.cancel(h)

    def close(self) -> None:
        self._pool.close()


# distributed.comm's own transports (distributed/comm/__init__.py and its modules register them); others
# come from the `distributed.comm.backends` entry points of installed packages, as Dask looks them up
_DASK_SCHEMES = ("inproc", "tcp", "tls", "ucx", "ws", "wss")
_HOST_PORT_SCHEMES = ("tcp", "tls", "ws", "wss")  # the schemes whose locations are host:port
_DASK_DEFAULT_SCHEME = "tcp"  # distributed.comm.default-scheme's default, for an address without one


def check_scheduler_address(address: str) -> None:
    """Refuse an address Dask's own parser refuses (distributed.comm: parse_address, get_backend,
    parse_host_port), in its words, before dask is imported and so before a Client exists: a
    malformed address is bad usage whether or not the `cluster` extra is installed, and a Client that
    fails on one in its constructor holds its shutdown for 20 s when it is collected (decisions Q-105).
    tests/app/campaign/test_campaign.py holds this to Dask's parser on a table of addresses."""
    scheme, sep, location = address.rpartition("://")
    if not sep:
        scheme = _DASK_DEFAULT_SCHEME
    problem = None
    if scheme not in _DASK_SCHEMES and not _plugin_scheme(scheme):
        problem = f"unknown address scheme {scheme!r} (known schemes: {sorted(_DASK_SCHEMES)})"
    elif scheme in _HOST_PORT_SCHEMES:
        problem = _host_port_problem(location)
    if problem is not None:
        raise ClusterUnavailable(f"not a Dask scheduler address: {address!r}: {problem}")


def _plugin_scheme(scheme: str) -> bool:
    from importlib.metadata import entry_points

    return bool(entry_points(group="distributed.comm.backends", name=scheme))


def _host_port_problem(location: str) -> str | None:
    """What distributed.comm.addressing.parse_host_port (no default port) says of `location`, or None."""
    invalid = f"invalid address {location!r}; maybe: ipv6 needs brackets like [::1]"
    if location.startswith("["):  # '[addr]:port': the address may hold colons
        _, bracket, tail = location[1:].partition("]")
        if not bracket:
            return invalid
        if not tail:
            return f"missing port number in address {location!r}"
        if not tail.startswith(":"):
            return invalid
        port = tail[1:]
    else:
        host, colon, port = location.rpartition(":")
        if not colon:
            return f"missing port number in address {location!r}"
        if ":" in host:
            return invalid
    try:
        int(port)  # what Dask converts the port with, so what it accepts (" 80", "8_0")
    except ValueError as e:
        return str(e)
    return None


class DaskExecutor:
    """The same shards on an existing Dask cluster (dask.distributed.Client at ADDRESS)."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        check_scheduler_address(address)  # first: a malformed address is refused as such without Dask too
        try:
            from dask.distributed import Client
        except ImportError as e:
            raise ClusterUnavailable("--scheduler needs dask.distributed: pip install 'qlwf[cluster]'") from e
        try:
            self._client = Client(address, timeout=timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ClusterUnavailable(f"no Dask scheduler answers at {address}: {e}") from e
        except Exception as e:  # anything else Client refuses the address with
            raise ClusterUnavailable(f"cannot use the Dask scheduler at {address}: {error_line(e)}") from e
        self._digest = code_digest()
        self._check_workers(address)
        threads = sum(self._client.nthreads().values())
        self.workers = max(1, threads)  # shards in flight; with no worker yet they wait for one to join
        self.where = f"the Dask cluster at {address} ({threads} worker thread(s) at the start)"

    def _check_workers(self, address: str) -> None:
        """Every worker there now imports qlwf, and the same source as this process: a worker that cannot
        load a shard never answers for it (the campaign would wait out its deadline), and one with another
        qlwf answers for another model. A worker that joins later is held to the digest by each shard."""
        try:
            digests: dict[str, str] = self._client.run(code_digest)
        except Exception as e:
            self._client.close()
            raise ClusterUnavailable(f"the Dask workers at {address} cannot run qlwf: {error_line(e)}") from e
        others = sorted(worker for worker, digest in digests.items() if digest != self._digest)
        if others:
            self._client.close()
            raise ClusterUnavailable(f"Dask worker(s) {', '.join(others)} run another qlwf than this checkout "
                                     f"(source digest {digests[others[0]][:12]}, here {self._digest[:12]}): "
                                     "install this checkout on every worker")

    def submit(self, shard: Shard) -> Any:
        # pure=False: a shard re-submitted by another campaign must run again, not be served from memory
        return self._client.submit(run_shard_of, shard, self._digest, pure=False,
                                   key=f"qlwf-campaign-{shard.index}-{id(shard)}")

    def wait_any(self, handles: Iterable[Any], timeout: float) -> set[Any]:
        # dask.distributed.wait needs a default client, which a library must not install behind its caller
        futures = list(handles)
        deadline = time.monotonic() + timeout
        while True:
            done = {f for f in futures if f.done()}
            if done or time.monotonic() >= deadline:
                return done
            time.sleep(0.02)

    def result(self, handle: Any) -> ShardResult:
        """The shard's result. run_shard returns every error of its own, so what the future raises is
        the cluster's: KilledWorker (its workers died on it), a lost connection (the future is
        cancelled and the client is no longer running), or a worker that cannot load the shard."""
        try:
            result: ShardResult = handle.result()  # a dask Future of run_shard
        except Exception as e:
            raise ShardLost(error_line(e), executor_gone=self._client.status != "running") from e
        return result

    def cancel(self, handles: Iterable[Any]) -> None:
        futures = list(handles)
        if futures and self._client.status == "running":  # a lost cluster has nothing left to cancel
            self._client.cancel(futures)

    def close(self) -> None:
        self._client.close()
