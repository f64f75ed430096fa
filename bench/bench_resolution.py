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
from qlwf.model.invariants import consistent_binding
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


def late_cancel_snapshot(name: str, steps: list[tuple[str, list[str]]], done: int) -> dict[str, Any]:
    """A cancellation snapshot after `done` steps succeeded through the worker path (few open steps left)."""
    w = WorkflowSystem(clock=1000)
    plan = demo_plan(f"run-late-{name}", f"plan-late-{name}", steps)
    run_id = plan["runId"]
    assert w.apply("admit_workflow", plan=plan).ok
    by_id = {s["stepRunId"]: s for s in plan["steps"]}
    finished = 0
    while finished < done:
        w.advance(10)
        ready = [s for s in w.state.steps_of_run(run_id) if s["status"] == "ready"]
        for s in sorted(ready, key=lambda s: s["stepKey"])[: done - finished]:
            out = w.apply("admit_task_attempt", runId=run_id, stepRunId=s["id"],
                          binding=consistent_binding(plan, by_id[s["id"]]))
            fence = {"attemptId": out.result["attempt"]["id"], "workerId": "w", "leaseGeneration": 1}
            assert w.apply("claim_lease", attemptId=fence["attemptId"], workerId="w", durationMs=60000).ok
            assert w.apply("start_attempt", **fence, timeoutMs=None).ok
            assert w.apply("complete_attempt", **fence, exitCode=0).ok
            finished += 1
        w.apply("advance_frontier", runId=run_id)
    assert w.apply("request_cancel", runId=run_id, reason="user", actor={"type": "user"}).ok
    return {"run": w.state.runs[run_id], "stepRuns": w.state.steps_of_run(run_id), "activeTaskAttempts": [],
            "observedAtMs": w.state.clock}


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
    print("cancel-all: intent right after admission, all 128 StepRuns mutated; cancel-late: 120 succeeded first")
    head = ("frontier warm", "frontier cold", "cancel-all warm", "cancel-all cold", "cancel-late warm",
            "cancel-late cold")
    print(f"{'shape':<12}" + "".join(f"{h:>18}" for h in head))
    for name, steps in shapes().items():
        frontier, cancel = snapshots(name, steps)
        late = late_cancel_snapshot(name, steps, N - 8)
        cells = [median_ms(lambda f=fn, s=snap: f(s), args.repeat, cold)
                 for fn, snap in ((resolve_frontier, frontier), (resolve_cancellation, cancel),
                                  (resolve_cancellation, late))
                 for cold in (False, True)]
        print(f"{name:<12}" + "".join(f"{c:>18.3f}" for c in cells))


if __name__ == "__main__":
    main()
