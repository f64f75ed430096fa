"""Where shards run: a local process pool (the default) or an existing Dask distributed cluster.

Both offer the same four operations to the campaign loop; neither decides anything about results.
The pool forks, so its workers inherit the parent's PostgreSQL server (impl/postgres/conformance.py)
and any backend registered at run time; Dask workers are separate processes on any host, which get
everything they need inside the shard.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

from .shards import Shard, ShardResult, run_shard


class ClusterUnavailable(Exception):
    """--scheduler given, but dask.distributed is not installed or the scheduler does not answer."""


class Executor(Protocol):
    workers: int
    where: str

    def submit(self, shard: Shard) -> Any: ...

    def wait_any(self, handles: Iterable[Any], timeout: float) -> set[Any]: ...

    def result(self, handle: Any) -> ShardResult: ...

    def cancel(self, handles: Iterable[Any]) -> None: ...

    def close(self) -> None: ...


class PoolExecutor:
    """concurrent.futures over forked local processes; close() kills what still runs (an interrupt, a
    finding that makes the remaining shards moot) instead of waiting for it."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.where = f"a local pool of {workers} process(es)"
        self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))

    def submit(self, shard: Shard) -> Future[ShardResult]:
        return self._pool.submit(run_shard, shard)

    def wait_any(self, handles: Iterable[Any], timeout: float) -> set[Any]:
        done, _ = wait(list(handles), timeout=timeout, return_when=FIRST_COMPLETED)
        return set(done)

    def result(self, handle: Future[ShardResult]) -> ShardResult:
        return handle.result()

    def cancel(self, handles: Iterable[Any]) -> None:
        for h in handles:
            h.cancel()

    def close(self) -> None:
        # ProcessPoolExecutor has no way to stop a running task; its processes are ours to end.
        processes = list(getattr(self._pool, "_processes", {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            if p.is_alive():
                p.terminate()
        for p in processes:
            p.join(10)


class DaskExecutor:
    """The same shards on an existing Dask cluster (dask.distributed.Client at ADDRESS)."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        try:
            from dask.distributed import Client
        except ImportError as e:
            raise ClusterUnavailable("--scheduler needs dask.distributed: pip install 'qlwf[cluster]'") from e
        try:
            self._client = Client(address, timeout=timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ClusterUnavailable(f"no Dask scheduler answers at {address}: {e}") from e
        self.workers = max(1, sum(self._client.nthreads().values()))
        self.where = f"the Dask cluster at {address} ({self.workers} worker thread(s))"

    def submit(self, shard: Shard) -> Any:
        # pure=False: a shard re-submitted by another campaign must run again, not be served from memory
        return self._client.submit(run_shard, shard, pure=False, key=f"qlwf-campaign-{shard.index}-{id(shard)}")

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
        result: ShardResult = handle.result()  # a dask Future of run_shard
        return result

    def cancel(self, handles: Iterable[Any]) -> None:
        futures = list(handles)
        if futures:
            self._client.cancel(futures)

    def close(self) -> None:
        self._client.close()
