"""Model-checking throughput: explorer states/s (per K) and stateful-machine examples/s.

Reproducible: the explorer is deterministic; the stateful campaign is derandomized with a fixed
budget. Reports wall time and CPU time (the machine may be shared). The explorer is measured in both
modes in the same run: full invariant evaluation in one process, and incremental on J processes.
Run: python bench/bench_model_checking.py [--min-steps K0] [--max-steps K] [--examples N] [--jobs J] [--no-stateful]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from qlwf.conformance.checkers.explore import Config, dag_shapes, explore


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (the explorer's worker processes), so a
    per-CPU-second rate stays comparable between modes when the machine is shared."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


# Explorer modes side by side in one run: the full evaluation of every state in one process (how the
# explorer ran before issue 15), then the incremental evaluation on `--jobs` processes.
MODES = (("full, 1 job", False, 1), ("incremental", True, None))


def bench_explorer(max_steps: int, jobs: int, min_steps: int = 1) -> list[dict[str, Any]]:
    rows = []
    scopes = [(f"{k}-step shapes", k, tuple(dag_shapes(k))) for k in range(min_steps, max_steps + 1)]
    if max_steps > min_steps:  # the whole scope at once, as the gate explores it (what two jobs can share)
        scopes.append((f"K = {min_steps}..{max_steps}", max_steps,
                       tuple(s for n in range(min_steps, max_steps + 1) for s in dag_shapes(n))))
    for scope, k, shapes in scopes:
        for label, incremental, mode_jobs in MODES:
            n_jobs = mode_jobs or jobs
            wall, cpu = time.perf_counter(), _cpu()
            report = explore(Config(max_steps=k, shapes=shapes, incremental=incremental), jobs=n_jobs)
            wall, cpu = time.perf_counter() - wall, _cpu() - cpu
            if report.findings:
                raise SystemExit(f"the explorer found {len(report.findings)} violation(s) at K={k}")
            rows.append({"what": f"explorer {scope} ({len(shapes)}), {label}"
                                 + (f", {n_jobs} jobs" if mode_jobs is None else ""),
                         "count": report.distinct_states, "unit": "states", "transitions": report.transitions,
                         "wall": wall, "cpu": cpu})
    return rows


def bench_stateful(examples: int, steps: int) -> dict[str, Any]:
    import conftest  # noqa: F401  (registers the settings profiles)
    from support import stateful_run as test_stateful

    done = [0]

    class Counted(test_stateful.WorkflowMachine):
        coverage = None

        def teardown(self) -> None:
            done[0] += 1
            super().teardown()

    wall, cpu = time.perf_counter(), time.process_time()
    test_stateful.run_machine(Counted, max_examples=examples, stateful_step_count=steps, derandomize=True,
                              database=None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"what": f"stateful machine, <= {steps} steps per example", "count": done[0], "unit": "examples",
            "transitions": None, "wall": wall, "cpu": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--min-steps", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="processes of the incremental explorer mode")
    parser.add_argument("--no-stateful", action="store_true", help="explorer rows only")
    args = parser.parse_args()
    rows = bench_explorer(args.max_steps, args.jobs, args.min_steps)
    if not args.no_stateful:
        rows.append(bench_stateful(args.examples, args.steps))
    print(f"{'workload':<52} {'count':>8} {'unit':<9} {'wall s':>8} {'cpu s':>8} {'per wall s':>11} {'per cpu s':>10}")
    for r in rows:
        print(f"{r['what']:<52} {r['count']:>8} {r['unit']:<9} {r['wall']:>8.2f} {r['cpu']:>8.2f} "
              f"{r['count'] / r['wall']:>11.1f} {r['count'] / max(r['cpu'], 1e-9):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
