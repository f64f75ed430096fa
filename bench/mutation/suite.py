"""The behavioural test selection a mutation tool runs against each mutant of impl/ (fail fast).

In order, stopping at the first failure (exit 1 = the mutant is killed, 0 = it survived):
1. the golden conformance corpus on SQLite in lockstep with the model (the whole durable state
   compared after every step), invariants on each trace's final state (`--every-step`: on every step);
2. seeded generated traces on SQLite, the same way;
3. every SQLite case of tests/test_cas_guards.py (a change underneath must fail the command with
   Conflict `concurrent_change` and roll back).
Every part is a behavioural check (a lockstep divergence, an invariant, a contract); none pins a
count or a file. Run: python bench/mutation/suite.py [--traces N]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from qlwf.conformance import runner
from qlwf.conformance.lockstep import load_invariant_check, run_lockstep
from qlwf.impl.sqlite.adapter import SqliteAdapter

REPO = Path(__file__).resolve().parents[2]
SEED = 20261129


def _fail(what: str) -> int:
    print(f"killed by {what}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=12, help="generated traces (default 12)")
    parser.add_argument("--every-step", action="store_true", help="invariants after every step, not only at the end")
    args = parser.parse_args(argv)
    check = load_invariant_check()
    for trace in runner.corpus_traces():
        with SqliteAdapter() as port:
            result = run_lockstep(trace, port, invariants=check, invariants_every_step=args.every_step)
        if not result.passed:
            return _fail(f"corpus trace {trace.name}")
    for trace in runner.generated_traces(args.traces, SEED):
        with SqliteAdapter() as port:
            result = run_lockstep(trace, port, invariants=check, invariants_every_step=args.every_step)
        if not result.passed:
            return _fail(f"generated trace {trace.name}")
    sys.path.insert(0, str(REPO / "tests"))
    cas = importlib.import_module("test_cas_guards")
    for case in cas.CASES:
        ports: list[Any] = []
        try:
            cas.test_a_change_underneath_fails_the_command_and_rolls_back(case, "sqlite", None, ports)
        except BaseException as e:  # an assertion, an unexpected error: either way the guard is broken
            return _fail(f"CAS case {case.id}: {type(e).__name__}")
        finally:
            for port in ports:
                port.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
