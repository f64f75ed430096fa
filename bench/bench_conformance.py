"""Conformance throughput: lockstep steps per second, and where the time goes (harness/model vs backend).

Reproducible: fixed seeds (generated traces SEED, SEED+1, …) plus the golden corpus, one process.
Each set runs side by side: `full` reads and compares the whole store after every step (the
harness before incremental checks, full_every=1), `incremental` the default (lockstep.FULL_EVERY);
with --invariants also `evaluated`, incremental but evaluating the invariants in full at every step
(cross_check: the harness before decisions Q-60 decided exact read-backs without evaluating); on
SQLite also `fresh-store`, incremental on a fresh in-memory store per trace (the backend before
decisions Q-63: a new connection per trace compiles its statements anew).
Run: python bench/bench_conformance.py [--traces N] [--seed S] [--backend sqlite] [--invariants]
"""

from __future__ import annotations

import argparse
import time

from qlwf.conformance import backends
from qlwf.conformance.generate.sequences import GeneratorConfig
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import FULL_EVERY, LockstepResult, load_invariant_check, run_lockstep
from qlwf.conformance.traces.format import Trace

SEED = 20261129


def measure(backend: str, traces: list[Trace], invariants: bool, full_every: int = FULL_EVERY,
            cross_check: bool = False, fresh: bool = False) -> tuple[list[LockstepResult], float, float, float]:
    """Results, total seconds, seconds spent opening/closing stores, and CPU seconds of this process."""
    factory = backends.SqliteBackend(reuse=False) if fresh else backends.get(backend).create()
    check = load_invariant_check() if invariants else None
    results, opening = [], 0.0
    start, cpu = time.perf_counter(), time.process_time()
    for trace in traces:
        t0 = time.perf_counter()
        port = factory.open()
        opening += time.perf_counter() - t0
        try:
            results.append(run_lockstep(trace, port, invariants=check, full_every=full_every,
                                        cross_check=cross_check))
        finally:
            t1 = time.perf_counter()
            port.close()
            opening += time.perf_counter() - t1
    factory.shutdown()
    return results, time.perf_counter() - start, opening, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--backend", default="sqlite", choices=backends.names())
    parser.add_argument("--invariants", action="store_true", help="evaluate the invariants after every step")
    args = parser.parse_args()

    t0 = time.perf_counter()
    generated = list(runner.generated_traces(args.traces, args.seed, GeneratorConfig()))
    generation = time.perf_counter() - t0
    print(f"backend {args.backend}, {args.traces} generated traces (seed {args.seed}) + corpus, "
          f"invariants {'every step' if args.invariants else 'off'}")
    print(f"{'set':<10} {'compare':<12} {'traces':>6} {'steps':>7} {'steps/s':>9} {'model':>7} {'backend':>8} "
          f"{'read-back':>9} {'checks':>7} {'open':>6} {'steps/cpu-s':>12} {'evaluated':>10}")
    modes = ("full", *(("evaluated",) if args.invariants else ()),
             *(("fresh-store",) if args.backend == "sqlite" else ()), "incremental")
    runs = [(name, mode, traces) for name, traces in (("generated", generated), ("corpus", runner.corpus_traces()))
            for mode in modes]
    verdicts: dict[str, list[tuple[str, bool]]] = {}
    for name, mode, traces in runs:
        every = 1 if mode == "full" else FULL_EVERY
        results, total, opening, cpu = measure(args.backend, traces, args.invariants, every, mode == "evaluated",
                                               mode == "fresh-store")
        verdicts.setdefault(name, []).append(tuple((r.trace, r.passed) for r in results))  # type: ignore[arg-type]
        failed = [r for r in results if not r.passed]
        steps = sum(r.steps for r in results)
        parts = [sum(r.model_seconds for r in results), sum(r.backend_seconds for r in results),
                 sum(r.snapshot_seconds for r in results), sum(r.check_seconds for r in results), opening]
        shares = " ".join(f"{100 * p / total:>{w}.0f}%" for p, w in zip(parts, (6, 7, 8, 6, 5), strict=True))
        print(f"{name:<10} {mode:<12} {len(results):>6} {steps:>7} {steps / total:>9.0f} {shares} {steps / cpu:>12.0f}"
              f" {sum(r.invariant_evaluations for r in results):>10}" + (f"   {len(failed)} FAILED" if failed else ""))
    for name, (full, *others) in verdicts.items():
        if any(other != full for other in others):
            raise SystemExit(f"{name}: the verdicts differ between the modes")
    print(f"(generating the {args.traces} traces through the model took {generation:.2f} s, not included above; "
          "model = the model's apply in lockstep, backend = the backend's commands, read-back = its snapshot(), "
          "checks = model snapshot, comparisons, invariants and recorded expectations, open = fresh store per trace; "
          "steps/cpu-s = steps per CPU second of this process, the backend's included for SQLite, less noisy on a "
          "loaded machine; evaluated = steps whose invariants were evaluated in full, the others decided by Q-60; "
          "fresh-store = incremental on a fresh store per trace, without Q-63)")


if __name__ == "__main__":
    main()
