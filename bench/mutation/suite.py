"""The behavioural test selection a mutation tool runs against each mutant of impl/ (fail fast).

In order, on one backend, stopping at the first failure (exit 1 = the mutant is killed, 0 = it survived):
1. the golden conformance corpus in lockstep with the model (the whole durable state compared after
   every step), invariants on each trace's final state (`--every-step`: on every step);
2. seeded generated traces, the same way;
3. every case of tests/impl/test_cas_guards.py for the backend (a change underneath must fail the command
   with Conflict `concurrent_change` and roll back).
Every part is a behavioural check (a lockstep divergence, an invariant, a contract); none pins a
count or a file. PostgreSQL uses $QLWF_PG_DSN (bench_mutation.py starts one cluster for the job) or
a throwaway cluster of its own.
Run: python bench/mutation/suite.py [--backend sqlite|postgres] [--traces N]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import load_invariant_check, run_lockstep
from qlwf.impl.sqlite.adapter import SqliteAdapter

REPO = Path(__file__).resolve().parents[2]
SEED = 20261129


def _fail(what: str) -> int:
    print(f"killed by {what}", file=sys.stderr)
    return 1


class _Fixtures:
    """What tests/impl/test_cas_guards.py asks pytest's `request` for: the PostgreSQL backend factory."""

    def __init__(self, pg_backend: Any) -> None:
        self.pg_backend = pg_backend

    def getfixturevalue(self, name: str) -> Any:
        if name != "pg_backend":
            raise LookupError(name)
        return self.pg_backend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--traces", type=int, default=12, help="generated traces (default 12)")
    parser.add_argument("--every-step", action="store_true", help="invariants after every step, not only at the end")
    args = parser.parse_args(argv)
    pg: Any = None
    if args.backend == "postgres":
        from qlwf.conformance.backends.postgres import PostgresBackend

        pg = PostgresBackend(pool_size=1)
    try:
        return _judge(args, pg)
    finally:
        if pg is not None:
            pg.shutdown()


def _judge(args: argparse.Namespace, pg: Any) -> int:
    check = load_invariant_check()
    open_port = pg.open if pg is not None else SqliteAdapter
    for kind, traces in (("corpus", runner.corpus_traces()), ("generated", runner.generated_traces(args.traces, SEED))):
        for trace in traces:
            port = open_port()
            try:
                result = run_lockstep(trace, port, invariants=check, invariants_every_step=args.every_step)
            finally:
                port.close()
            if not result.passed:
                return _fail(f"{kind} trace {trace.name}")
    sys.path.insert(0, str(REPO / "tests"))
    cas = importlib.import_module("test_cas_guards")
    for case in (c for c in cas.CASES if args.backend in c.backends):
        ports: list[Any] = []
        try:
            cas.test_a_change_underneath_fails_the_command_and_rolls_back(case, args.backend, _Fixtures(pg), ports)
        except BaseException as e:  # an assertion, an unexpected error: either way the guard is broken
            return _fail(f"CAS case {case.id}: {type(e).__name__}")
        finally:
            for port in ports:
                port.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
