"""Model-checking throughput: explorer states/s (per K) and stateful-machine examples/s.

Reproducible: the explorer is deterministic; the stateful campaign is derandomized with a fixed
budget. Reports wall time and CPU time (the machine may be shared).
Run: python bench/bench_model_checking.py [--max-steps K] [--examples N] [--jobs J]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from qlwf.conformance.checkers.explore import Config, dag_shapes, explore


def bench_explorer(max_steps: int, jobs: int) -> list[dict[str, Any]]:
    rows = []
    for k in range(1, max_steps + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        shapes = tuple(dag_shapes(k))  # the shapes of exactly k steps
        report = explore(Config(max_steps=k, shapes=shapes), jobs=jobs)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        rows.append({"what": f"explorer, {k}-step shapes ({len(shapes)})", "count": report.distinct_states,
                     "unit": "states", "transitions": report.transitions, "wall": wall, "cpu": cpu})
    return rows


def bench_stateful(examples: int, steps: int) -> dict[str, Any]:
    import conftest  # noqa: F401  (registers the settings profiles)
    import test_stateful

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
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    rows = [*bench_explorer(args.max_steps, args.jobs), bench_stateful(args.examples, args.steps)]
    print(f"{'workload':<40} {'count':>8} {'unit':<9} {'wall s':>8} {'cpu s':>8} {'per wall s':>11} {'per cpu s':>10}")
    for r in rows:
        print(f"{r['what']:<40} {r['count']:>8} {r['unit']:<9} {r['wall']:>8.2f} {r['cpu']:>8.2f} "
              f"{r['count'] / r['wall']:>11.1f} {r['count'] / max(r['cpu'], 1e-9):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
