"""Per-step cost of the process boundary: lockstep over the SQLite driver vs in-process SQLite.

The same traces (fixed seeds) run in lockstep against the in-process SQLite backend and against
`python -m qlwf.impl.sqlite.driver` over qlwf-backend@1: the default (changes in the apply response,
the next step sent ahead while the harness checks this one), then without sending ahead, each
read-back of the state: the changes, the full snapshot in the apply response, or a snapshot request
of its own (the naive protocol, two round trips per step). Driver start-up is measured
apart: each run starts its driver before the clock starts. The sets are interleaved and repeated,
and the best of the repeats is reported (the machine is shared).

Run: python bench/bench_exec.py [--traces N] [--seed S] [--repeats R]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from qlwf.conformance.backends import SqliteBackend
from qlwf.conformance.exec import port as exec_port
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import load_invariant_check, run_lockstep
from qlwf.conformance.traces.format import Trace

SEED = 20261129


def steps_per_second(factory: SqliteBackend | exec_port.ExecBackend, traces: list[Trace],
                     invariants: bool) -> tuple[float, int]:
    check = load_invariant_check() if invariants else None
    first = factory.open()  # starts the driver (exec): start-up is not a per-step cost
    first.close()
    steps = 0
    start = time.perf_counter()
    try:
        for trace in traces:
            port = factory.open()
            try:
                result = run_lockstep(trace, port, invariants=check)
            finally:
                port.close()
            if not result.passed:
                raise SystemExit(f"{trace.name} diverged: {result.divergence.render() if result.divergence else ''}")
            steps += result.steps
    finally:
        seconds = time.perf_counter() - start
        factory.shutdown()
    return steps / seconds, steps


def startup_seconds() -> float:
    t0 = time.perf_counter()
    factory = exec_port.sqlite_driver()
    try:
        factory.open().close()
        return time.perf_counter() - t0
    finally:
        factory.shutdown()


def _driver_reading_back(mode: str) -> Callable[[], exec_port.ExecBackend]:
    """The driver without sending ahead, reading the state back by `mode`."""
    return lambda: exec_port.ExecBackend(exec_port.reference_driver("sqlite"), read_back=mode, ahead=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=60)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    traces = runner.corpus_traces() + list(runner.generated_traces(args.traces, args.seed))
    variants: dict[str, Callable[[], SqliteBackend | exec_port.ExecBackend]] = {
        "in-process": SqliteBackend,
        "driver (default)": lambda: exec_port.ExecBackend(exec_port.reference_driver("sqlite")),
        **{f"driver, {mode}": _driver_reading_back(mode) for mode in exec_port.READ_BACK},
    }
    print(f"corpus + {args.traces} generated traces (seed {args.seed}), best of {args.repeats}")
    print(f"driver start-up (spawn + hello + reset): {min(startup_seconds() for _ in range(3)) * 1000:.0f} ms")
    print(f"{'invariants':<11} {'backend':<20} {'steps':>6} {'steps/s':>8} {'slowdown':>9} {'ms/step added':>14}")
    for invariants in (False, True):
        best: dict[str, float] = {}
        count = 0
        for _ in range(args.repeats):
            for name, make in variants.items():
                rate, count = steps_per_second(make(), traces, invariants)
                best[name] = max(best.get(name, 0.0), rate)
        base = best["in-process"]
        for name, rate in best.items():
            added = (1 / rate - 1 / base) * 1000
            print(f"{'every step' if invariants else 'off':<11} {name:<20} {count:>6} {rate:>8.0f} "
                  f"{base / rate:>8.2f}x {added:>14.3f}")


if __name__ == "__main__":
    main()
