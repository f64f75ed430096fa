"""Frontier and cancellation resolution on 128-step plans (chain, wide fan-out, random DAG).

Reproducible: fixed shapes and seed; reports the median wall time per call over REPEAT calls.
Run: python bench/bench_resolution.py [--repeat N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from generate import demo_plan
from qlwf.model.cancellation import resolve_cancellation
from qlwf.model.frontier import resolve_frontier
from qlwf.model.records import shared_plan, shared_step_run
from qlwf.model.system import WorkflowSystem

N = 128
SEED = 20261129


def shapes() -> dict[str, list[tuple[str, list[str]]]]:
    keys = [f"s{i:03d}" for i in range(N)]
    rng = random.Random(SEED)
    return {
        "chain": [(k, [keys[i - 1]] if i else []) for i, k in enumerate(keys)],
        "fan-out": [(k, [keys[0]] if i else []) for i, k in enumerate(keys)],
        "random-dag": [(k, sorted(rng.sample(keys[:i], min(i, rng.randint(0, 3))))) for i, k in enumerate(keys)],
    }


def snapshots(name: str, steps: list[tuple[str, list[str]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A frontier snapshot (admitted, now later) and a cancellation snapshot (intent recorded)."""
    w = WorkflowSystem(clock=1000)
    plan = demo_plan(f"run-{name}", f"plan-{name}", steps)
    assert w.apply("admit_workflow", plan=plan).ok
    w.advance(1000)
    run_id = plan["runId"]
    frontier = {"plan": plan, "run": w.state.runs[run_id], "stepRuns": w.state.steps_of_run(run_id),
                "observedAtMs": w.state.clock}
    assert w.apply("request_cancel", runId=run_id, reason="user", actor={"type": "user"}).ok
    cancel = {"run": w.state.runs[run_id], "stepRuns": w.state.steps_of_run(run_id), "activeTaskAttempts": [],
              "observedAtMs": w.state.clock}
    return frontier, cancel


def median_ms(fn: Callable[[], Any], repeat: int, cold: bool) -> float:
    """Median ms per call; `cold` empties the normalization memo before every call (decisions Q-7)."""
    fn()
    samples = []
    for _ in range(repeat):
        if cold:
            shared_plan.clear()
            shared_step_run.clear()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"median ms per call over {args.repeat} calls, {N}-step plans; warm = repeated snapshot "
          "(normalization memo hit), cold = memo emptied before each call")
    print(f"{'shape':<12} {'frontier warm':>14} {'frontier cold':>14} {'cancel warm':>12} {'cancel cold':>12}")
    for name, steps in shapes().items():
        frontier, cancel = snapshots(name, steps)
        cells = [median_ms(lambda f=fn, s=snap: f(s), args.repeat, cold)
                 for fn, snap in ((resolve_frontier, frontier), (resolve_cancellation, cancel))
                 for cold in (False, True)]
        print(f"{name:<12} {cells[0]:>14.3f} {cells[1]:>14.3f} {cells[2]:>12.3f} {cells[3]:>12.3f}")


if __name__ == "__main__":
    main()
