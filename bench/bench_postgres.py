"""PostgreSQL backend throughput against a trivial-transaction baseline on the same server, in one run.

1. Conformance: the golden corpus plus N generated traces in lockstep (invariants off), single
   threaded; reported as lockstep steps/s and backend transactions/s (writing commands only), twice:
   `full` reads and compares the whole store after every step (full_every=1, the harness before
   incremental checks), `incremental` the default (lockstep.FULL_EVERY).
2. Concurrency: the concurrency check for K = 2, 4, 8 workers; reported as commits/s.
3. Baselines: the same number of trivial transactions — `BEGIN ISOLATION LEVEL SERIALIZABLE`, the
   same SET LOCAL limits, `UPDATE` of one counter row, `COMMIT` — on pooled connections of the same
   server: single threaded for (1), with K threads (one counter row each) for (2).

Run: python bench/bench_postgres.py [--traces N] [--seed S] [--ops N]
Uses QLWF_PG_DSN when set, otherwise a throwaway cluster.
"""

from __future__ import annotations

import argparse
import threading
import time

from qlwf.conformance import backends, runner
from qlwf.conformance.concurrency import concurrency_check
from qlwf.conformance.lockstep import FULL_EVERY, run_lockstep
from qlwf.conformance.trace import Trace
from qlwf.impl.postgres.adapter import TRANSACTION_LIMITS, PostgresAdapter, TransactionLog
from qlwf.impl.postgres.conformance import shared_server
from qlwf.impl.postgres.database import PgDatabase
from qlwf.impl.postgres.server import PgServer, unique_database_name

SEED = 20261129


def conformance(traces: list[Trace], full_every: int) -> tuple[int, int, int, float, float]:
    """(steps, commands, writing transactions, total seconds, seconds inside the backend's commands)."""
    factory = backends.get("postgres").create()
    steps = commands = transactions = 0
    backend_seconds = 0.0
    start = time.perf_counter()
    try:
        for trace in traces:
            port = factory.open()
            assert isinstance(port, PostgresAdapter)
            log: list[TransactionLog] = []
            port.observer = log.append
            result = run_lockstep(trace, port, full_every=full_every)
            port.close()
            if result.divergence is not None:
                raise SystemExit(f"trace {trace.name} diverged:\n{result.divergence.render()}")
            steps += result.steps
            commands += sum(1 for s in trace.steps if s["op"] == "command")
            transactions += len(log)
            backend_seconds += result.backend_seconds
    finally:
        factory.shutdown()
    return steps, commands, transactions, time.perf_counter() - start, backend_seconds


def baseline(server: PgServer, transactions: int, threads: int) -> float:
    """Trivial SERIALIZABLE single-row transactions per second with `threads` workers."""
    name = unique_database_name("qlwf_bench")
    database = PgDatabase(server.create_database(name), size=threads)
    try:
        database.execute_script("CREATE TABLE counters (id integer PRIMARY KEY, n bigint NOT NULL); "
                                f"INSERT INTO counters SELECT g, 0 FROM generate_series(0, {threads - 1}) AS g")
        begin = f"BEGIN ISOLATION LEVEL SERIALIZABLE; {TRANSACTION_LIMITS}"

        def work(row: int, count: int) -> None:
            for _ in range(count):
                conn = database.getconn()
                try:
                    conn.execute(begin)
                    conn.execute("UPDATE counters SET n = n + 1 WHERE id = %s", (row,))
                    conn.execute("COMMIT")
                finally:
                    database.putconn(conn)

        per_thread = max(1, transactions // threads)
        workers = [threading.Thread(target=work, args=(i, per_thread)) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return per_thread * threads / (time.perf_counter() - start)
    finally:
        database.close()
        server.drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=100)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--ops", type=int, default=60, help="operations per worker of the concurrency check")
    parser.add_argument("--no-concurrency", action="store_true", help="only the conformance rows")
    args = parser.parse_args()
    server, _ = shared_server()

    traces = runner.corpus_traces() + list(runner.generated_traces(args.traces, args.seed))
    for mode, full_every in (("full", 1), ("incremental", FULL_EVERY)):
        steps, commands, transactions, seconds, backend_seconds = conformance(traces, full_every)
        base = baseline(server, transactions, 1)
        step_rate, command_rate = steps / seconds, commands / backend_seconds
        print(f"conformance ({mode}): {len(traces)} traces, {steps} steps in {seconds:.2f} s = {step_rate:.0f} "
              f"steps/s (model, snapshot read-back and comparisons included); {commands} commands ({transactions} "
              f"writing transactions) at {command_rate:.0f} commands/s inside the backend")
        print(f"  baseline: {base:.0f} trivial SERIALIZABLE transactions/s (1 thread, {transactions} transactions)")
        print(f"  ratios:   steps/s ÷ baseline = {step_rate / base:.3f}; backend commands/s ÷ baseline = "
              f"{command_rate / base:.3f}")
    print(f"{'K':>2} {'commits':>8} {'retries':>8} {'exhausted':>9} {'conflicts':>9} {'commits/s':>10} "
          f"{'baseline/s':>11} {'ratio':>6}  verdict")
    for k in () if args.no_concurrency else (2, 4, 8):
        report = concurrency_check(k=k, ops=args.ops, seed=args.seed, server=server)
        base_k = baseline(server, report.commits, k)
        print(f"{k:>2} {report.commits:>8} {sum(report.retries.values()):>8} {report.exhausted:>9} "
              f"{report.conflicts:>9} {report.throughput:>10.0f} {base_k:>11.0f} {report.throughput / base_k:>6.3f}  "
              f"{'PASS' if report.passed else 'FAIL'}")


if __name__ == "__main__":
    main()
