"""`qlwf audit` on a large SQLite store: peak memory and wall time, whole-snapshot read against the
Run-by-Run read (decisions Q-121), side by side in one run.

The store holds N workflow Runs of two steps (admission, one attempt claimed, started, running,
completed, the frontier advanced: 7 events each), written once through the SQLite backend. Each mode
then runs in a fresh child process, so its peak resident set (ru_maxrss) is its own:

* whole: every workflow Run's records read into one snapshot, then audited (how `qlwf audit` read
  before Q-121, `impl/readonly.whole`);
* by Run: `qlwf audit`'s own path, one Run's records at a time (`StoredRuns.parts`).

Run: python bench/bench_audit.py [--runs N] [--keep PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
from qlwf.review.audit import audit_parts, audit_snapshot
from qlwf.impl.readonly import whole
from qlwf.impl.sqlite.readonly import open_runs
started = time.perf_counter()
with open_runs(sys.argv[2]) as stored:
    results = audit_snapshot(whole(stored)) if sys.argv[1] == "whole" else audit_parts(stored.parts())
print(json.dumps({"runs": len(results), "clean": sum(r.ok for r in results),
                  "seconds": time.perf_counter() - started,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build_store(path: Path, runs: int) -> float:
    from qlwf.conformance.checkers.explore import build_plan
    from qlwf.impl.sqlite.adapter import SqliteAdapter
    from qlwf.model.invariants import consistent_binding

    started, now = time.perf_counter(), 1_000_000
    store = SqliteAdapter(str(path))
    try:
        for i in range(runs):
            run_id = f"run-{i}"
            plan = build_plan(run_id, f"plan-{i}", {"a": (), "b": ("a",)}, now)
            store.execute("admit_workflow", {"plan": plan}, now=now)
            step = plan["steps"][0]
            receipt = store.execute("admit_task_attempt", {"runId": run_id, "stepRunId": step["stepRunId"],
                                                           "binding": consistent_binding(plan, step)}, now=now)
            fence = {"attemptId": receipt["receipt"]["attemptId"], "workerId": "w1", "leaseGeneration": 1}
            store.execute("claim_lease", {"attemptId": fence["attemptId"], "workerId": "w1", "durationMs": 600_000},
                          now=now)
            store.execute("start_attempt", {**fence, "timeoutMs": None}, now=now)
            store.execute("record_running", fence, now=now)
            store.execute("complete_attempt", {**fence, "exitCode": 0}, now=now)
            store.execute("advance_frontier", {"runId": run_id}, now=now)
    finally:
        store.close()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--keep", type=Path, help="build the store at PATH and keep it (default: a temporary file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = args.keep or Path(scratch) / "store.db"
        if path.exists():
            path.unlink()
        built = build_store(path, args.runs)
        print(f"store: {args.runs} workflow Runs, {path.stat().st_size / 2**20:.1f} MiB, built in {built:.1f} s")
        rows = {}
        for mode in ("whole", "by Run"):
            done = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True,
                                  check=True)
            rows[mode] = json.loads(done.stdout)
            if rows[mode]["clean"] != args.runs:
                raise SystemExit(f"{mode}: {rows[mode]['clean']} of {args.runs} Runs clean")
        print(f"{'mode':8} {'Runs':>6} {'seconds':>8} {'peak MiB':>9}")
        for mode, row in rows.items():
            print(f"{mode:8} {row['runs']:>6} {row['seconds']:>8.2f} {row['peak_mib']:>9.0f}")
        print(f"peak memory, whole / by Run: {rows['whole']['peak_mib'] / rows['by Run']['peak_mib']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
