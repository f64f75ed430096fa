"""PostgreSQL backend throughput against a trivial-transaction baseline on the same server, in one run.

The baseline is a loop of trivial transactions — `BEGIN ISOLATION LEVEL SERIALIZABLE`, the same SET
LOCAL limits, `UPDATE` of one counter row, `COMMIT` — on pooled connections of the same server. It
swings by 1.6× and more from one run to the next on a shared 2-core machine, so one baseline next
to one measurement says little. The baseline is therefore interleaved with the measurement: after
every trace, as many trivial transactions as the trace logged writing transactions, timed apart;
and the figures reported are the medians over several such rounds:

1. Conformance: the golden corpus plus N generated traces in lockstep (invariants off, the default
   incremental harness; `--full` reads the whole store after every step), single threaded;
   reported as lockstep steps/s and backend commands/s, each also divided by the round's baseline,
   and the CPU milliseconds per step of this process and of the server (its postmaster's processes,
   from /proc), which depend far less on the machine's load than any rate.
2. Round trips and statements per command kind, from one extra untimed pass: the backend's own
   account (`PostgresAdapter.wire`) or, for a checkout that has none, every `Connection.execute`
   (one statement and one round trip each in the backend before docs/decisions.md Q-62).
3. Concurrency (unless `--no-concurrency`): the concurrency check for K = 2, 4, 8 workers against
   a K-thread baseline; reported as commits/s.

`--before REPO` alternates with another checkout (its `.venv`, e.g. a `git archive` of main): every
round runs this same script there (`--rounds 1 --json`) on the same server, right after this
checkout's round, so both sides share the machine's load as closely as two processes can.

Run: python bench/bench_postgres.py [--traces N] [--rounds R] [--before REPO] [--seed S] [--ops N]
Uses QLWF_PG_DSN when set, otherwise a throwaway cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool
from qlwf.conformance import backends
from qlwf.conformance.backends.postgres import shared_server
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import FULL_EVERY, run_lockstep
from qlwf.conformance.provision import DSN_ENV, PgServer, unique_database_name
from qlwf.conformance.traces.format import Trace
from qlwf.impl.postgres.adapter import TRANSACTION_LIMITS, PostgresAdapter, TransactionLog

SEED = 20261129


@dataclass
class Round:
    baseline: float  # trivial SERIALIZABLE transactions/s, interleaved with the run (one chunk per trace)
    steps: int
    commands: int
    transactions: int  # writing transactions logged
    seconds: float
    backend_seconds: float
    cpu_seconds: float  # this process's CPU time over the run
    server_cpu_seconds: float  # the server's CPU time over the run (every process of its postmaster)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds

    @property
    def commands_per_s(self) -> float:
        return self.commands / self.backend_seconds


def _proc_cpu(pid: int, children: bool) -> float:
    """CPU seconds of a process (utime + stime, and with `children` those of its reaped children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def postmaster(server: PgServer) -> int | None:
    """The server's postmaster pid, when it runs on this machine and /proc shows it."""
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        with open(f"/proc/{row[0] if row else 0}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, psycopg.Error):
        return None


def server_cpu(pid: int | None) -> float:
    """CPU seconds the server has used so far: its postmaster, the backends it reaped, the ones alive."""
    if pid is None:
        return 0.0
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    alive.append(int(entry))
    return _proc_cpu(pid, True) + sum(_proc_cpu(child, False) for child in alive)


class Baseline:
    """Trivial SERIALIZABLE single-row transactions on a database and pool of their own.

    The pool has psycopg's defaults (automatic preparation on), not the backend's PgDatabase, so the
    baseline is the same code whichever checkout runs it. A serialization failure (SSI can refuse
    even disjoint rows of a one-page table) is rolled back and tried again; only commits count."""

    def __init__(self, server: PgServer, threads: int) -> None:
        self.server = server
        self.name = unique_database_name("qlwf_bench")
        dsn = server.create_database(self.name)
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            dsn, min_size=threads, max_size=threads, kwargs={"autocommit": True}, open=True)
        with self.pool.connection() as conn:
            conn.execute("CREATE TABLE counters (id integer PRIMARY KEY, n bigint NOT NULL); "
                         f"INSERT INTO counters SELECT g, 0 FROM generate_series(0, {threads - 1}) AS g")
        self.begin = f"BEGIN ISOLATION LEVEL SERIALIZABLE; {TRANSACTION_LIMITS}"

    def _work(self, row: int, count: int) -> None:
        done = 0
        while done < count:
            with self.pool.connection() as conn:
                try:
                    conn.execute(self.begin)
                    conn.execute("UPDATE counters SET n = n + 1 WHERE id = %s", (row,))
                    conn.execute("COMMIT")
                    done += 1
                except psycopg.errors.SerializationFailure:
                    conn.execute("ROLLBACK")

    def run(self, transactions: int, threads: int = 1) -> float:
        """Seconds for `transactions` commits (spread over `threads` workers, one counter row each)."""
        per_thread = max(1, transactions // threads)
        if threads == 1:
            start = time.perf_counter()
            self._work(0, per_thread)
            return time.perf_counter() - start
        workers = [threading.Thread(target=self._work, args=(i, per_thread)) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return time.perf_counter() - start

    def close(self) -> None:
        self.pool.close()
        self.server.drop_database(self.name)


def measure_round(server: PgServer, traces: list[Trace], full_every: int) -> Round:
    """The conformance run, with the baseline interleaved: after each trace, as many trivial
    transactions as the trace logged writing transactions. Both share the machine's load over the
    same seconds, which a baseline run before or after the whole run does not."""
    factory = backends.get("postgres").create()
    base = Baseline(server, 1)
    steps = commands = transactions = 0
    seconds = backend_seconds = cpu = base_seconds = 0.0
    server_seconds = 0.0
    per_trace: list[int] = []
    pid = postmaster(server)
    try:
        for trace in traces:
            port = factory.open()
            assert isinstance(port, PostgresAdapter)
            log: list[TransactionLog] = []
            port.observer = log.append
            server0 = server_cpu(pid)
            start, cpu0 = time.perf_counter(), time.process_time()
            result = run_lockstep(trace, port, full_every=full_every)
            seconds += time.perf_counter() - start
            cpu += time.process_time() - cpu0
            server_seconds += server_cpu(pid) - server0
            port.close()
            if result.divergence is not None:
                raise SystemExit(f"trace {trace.name} diverged:\n{result.divergence.render()}")
            steps += result.steps
            commands += sum(1 for s in trace.steps if s["op"] == "command")
            transactions += len(log)
            per_trace.append(len(log))
            backend_seconds += result.backend_seconds
            base_seconds += base.run(max(1, len(log)))
    finally:
        base.close()
        factory.shutdown()
    trivial = sum(max(1, n) for n in per_trace)
    return Round(trivial / base_seconds, steps, commands, transactions, seconds, backend_seconds, cpu, server_seconds)


# ---- round trips per command kind ------------------------------------------------------------------
@contextlib.contextmanager
def _counting_executes(counts: dict[str, Counter[str]], label: list[str]) -> Iterator[None]:
    """Count `Connection.execute` per command (for a backend that sends one statement per call)."""
    original = psycopg.Connection.execute

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[label[0]]["round_trips"] += 1
        counts[label[0]]["statements"] += 1
        return original(self, *args, **kwargs)

    psycopg.Connection.execute = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        psycopg.Connection.execute = original  # type: ignore[method-assign]


def wire_counts(traces: list[Trace]) -> dict[str, dict[str, float]]:
    """Mean round trips and statements per command kind over one pass of `traces` (untimed)."""
    counts: dict[str, Counter[str]] = {}
    label = ["read-back"]
    factory = backends.get("postgres").create()
    try:
        with contextlib.ExitStack() as stack:
            counting = False
            for trace in traces:
                port = factory.open()
                assert isinstance(port, PostgresAdapter)
                wire = getattr(port, "wire", None)
                if wire is None and not counting:  # a backend without its own account (before Q-62)
                    stack.enter_context(_counting_executes(counts, label))
                    counting = True
                execute = port.execute

                def labelled(name: str, args: Any, now: int | None = None, _execute: Any = execute) -> Any:
                    label[0] = name
                    counts.setdefault(name, Counter())["commands"] += 1
                    try:
                        return _execute(name, args, now)
                    finally:
                        label[0] = "read-back"

                counts.setdefault("read-back", Counter())
                port.execute = labelled  # type: ignore[method-assign]
                run_lockstep(trace, port)
                if wire is not None:
                    for name in wire.round_trips:
                        counts.setdefault(name, Counter())
                        counts[name]["round_trips"] += wire.round_trips[name]
                        counts[name]["statements"] += wire.statements[name]
                port.close()
    finally:
        factory.shutdown()
    return {name: {"commands": c["commands"], "round_trips": c["round_trips"] / max(1, c["commands"]),
                   "statements": c["statements"] / max(1, c["commands"])}
            for name, c in sorted(counts.items()) if c["commands"]}


# ---- reporting ----------------------------------------------------------------------------------------
def _median(rounds: list[Round], key: str) -> float:
    return statistics.median(float(getattr(r, key)) for r in rounds)


def _row(side: str, rounds: list[Round]) -> str:
    return (f"{side:<7} {_median(rounds, 'baseline'):>10.0f} {_median(rounds, 'steps_per_s'):>8.0f} "
            f"{_median(rounds, 'commands_per_s'):>11.0f} "
            f"{statistics.median(r.steps_per_s / r.baseline for r in rounds):>12.3f} "
            f"{statistics.median(r.commands_per_s / r.baseline for r in rounds):>14.3f} "
            f"{statistics.median(1000 * r.cpu_seconds / r.steps for r in rounds):>11.2f} "
            f"{statistics.median(1000 * r.server_cpu_seconds / r.steps for r in rounds):>11.2f}")


def _other_round(repo: Path, args: argparse.Namespace, dsn: str, counts: bool) -> dict[str, Any]:
    python = repo / ".venv" / "bin" / "python"
    command = [str(python), str(Path(__file__).resolve()), "--json", "--rounds", "1", "--traces", str(args.traces),
               "--seed", str(args.seed), "--no-concurrency", *(["--full"] if args.full else []),
               *(["--counts"] if counts else [])]
    out = subprocess.run(command, cwd=repo, env=os.environ | {DSN_ENV: dsn}, check=True, capture_output=True,
                         text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=30)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--rounds", type=int, default=5, help="baseline + measurement pairs; medians are reported")
    parser.add_argument("--before", type=Path, help="another checkout (with .venv) to alternate with, round by round")
    parser.add_argument("--full", action="store_true", help="read the whole store after every step (full_every=1)")
    parser.add_argument("--ops", type=int, default=60, help="operations per worker of the concurrency check")
    parser.add_argument("--no-concurrency", action="store_true", help="only the conformance rows")
    parser.add_argument("--json", action="store_true", help="print the rounds as one JSON line (used by --before)")
    parser.add_argument("--counts", action="store_true", help="with --json: the round trips per command kind too")
    args = parser.parse_args()
    server, _ = shared_server()
    full_every = 1 if args.full else FULL_EVERY
    traces = runner.corpus_traces() + list(runner.generated_traces(args.traces, args.seed))
    if args.json:
        rounds = [measure_round(server, traces, full_every) for _ in range(args.rounds)]
        print(json.dumps({"rounds": [asdict(r) for r in rounds],
                          "counts": wire_counts(traces) if args.counts else None}))
        return

    load = os.getloadavg()
    print(f"{len(traces)} traces (corpus + {args.traces} generated, seed {args.seed}), {args.rounds} rounds, "
          f"{'full' if args.full else 'incremental'} read-back; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    after: list[Round] = []
    before: list[Round] = []
    before_counts: dict[str, dict[str, float]] | None = None
    for i in range(args.rounds):
        after.append(measure_round(server, traces, full_every))
        r = after[-1]
        line = (f"round {i + 1}: this checkout {r.steps_per_s:.0f} steps/s, baseline {r.baseline:.0f} tx/s, "
                f"ratio {r.steps_per_s / r.baseline:.3f}")
        if args.before is not None:
            other = _other_round(args.before, args, server.dsn(), counts=i == 0)
            before.append(Round(**other["rounds"][0]))
            before_counts = before_counts or other["counts"]
            b = before[-1]
            line += (f"; before {b.steps_per_s:.0f} steps/s, baseline {b.baseline:.0f} tx/s, "
                     f"ratio {b.steps_per_s / b.baseline:.3f}")
        print(line, flush=True)
    load = os.getloadavg()
    print(f"\nmedians over {args.rounds} rounds ({after[0].steps} steps, {after[0].commands} commands, "
          f"{after[0].transactions} writing transactions per round); load average now {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}")
    print(f"{'':<7} {'baseline/s':>10} {'steps/s':>8} {'commands/s':>11} {'steps/s ÷ b':>12} "
          f"{'commands/s ÷ b':>14} {'client CPU':>11} {'server CPU':>11}   (CPU: ms per step)")
    print(_row("after", after))
    if before:
        print(_row("before", before))

    counts = wire_counts(traces)
    print("\nround trips and statements per command (one untimed pass)")
    print(f"{'command':<28} {'n':>5} {'round trips':>12} {'statements':>11}" +
          (f" {'before: round trips':>20} {'statements':>11}" if before_counts else ""))
    for name, c in counts.items():
        line = f"{name:<28} {c['commands']:>5.0f} {c['round_trips']:>12.2f} {c['statements']:>11.2f}"
        if before_counts and name in before_counts:
            line += f" {before_counts[name]['round_trips']:>20.2f} {before_counts[name]['statements']:>11.2f}"
        print(line)

    if args.no_concurrency:
        return
    from qlwf.conformance.concurrency.harness import concurrency_check

    print(f"\n{'K':>2} {'commits':>8} {'retries':>8} {'exhausted':>9} {'conflicts':>9} {'commits/s':>10} "
          f"{'baseline/s':>11} {'ratio':>6}  verdict")
    for k in (2, 4, 8):
        base = Baseline(server, k)
        try:
            base_k = 150 * k / base.run(150 * k, k)
        finally:
            base.close()
        report = concurrency_check(k=k, ops=args.ops, seed=args.seed, server=server)
        print(f"{k:>2} {report.commits:>8} {sum(report.retries.values()):>8} {report.exhausted:>9} "
              f"{report.conflicts:>9} {report.throughput:>10.0f} {base_k:>11.0f} {report.throughput / base_k:>6.3f}  "
              f"{'PASS' if report.passed else 'FAIL'}")


if __name__ == "__main__":
    main()
