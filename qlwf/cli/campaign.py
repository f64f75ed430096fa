"""`qlwf campaign`: a long verification run sharded over a local process pool or a Dask cluster."""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

from qlwf.campaign.executors import (
    ClusterUnavailable,
    DaskExecutor,
    Executor,
    PoolExecutor,
    check_scheduler_address,
)
from qlwf.campaign.run import CampaignConfig, UnusableOutput, campaign
from qlwf.campaign.shards import KINDS, Budget
from qlwf.cli.argtypes import MAX_PROCESSES, integer, output_dir, processes, up_to
from qlwf.conformance.checkers.explore import MAX_SHAPE_STEPS

DEFAULT_OUT = "reports/campaign"
MAX_MINUTES = 43_200


def _kinds(text: str) -> tuple[str, ...]:
    chosen = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown kind(s) {unknown or [text]}; choose from {', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in chosen)  # the campaign's order, whatever the order given


def _mutant(name: str) -> str:
    from qlwf.conformance.mutants.manifest import MANIFEST

    plantable = sorted(m.name for m in MANIFEST if m.plant is not None)
    if name not in plantable:
        raise argparse.ArgumentTypeError(f"no plantable manifest mutant {name!r} (conformance/mutants/)")
    return name


def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"qlwf campaign: seed {seed} (--seed {seed} repeats these shards)", file=sys.stderr)
    if args.scheduler is not None:
        try:  # bad usage before any work, and whether or not Dask is installed (the check imports none of it)
            check_scheduler_address(args.scheduler)
        except ClusterUnavailable as e:
            print(f"qlwf campaign: {e}", file=sys.stderr)
            return 2
    budget = Budget(stateful_examples=args.stateful_examples, sqlite_traces=args.traces_per_shard,
                    postgres_traces=max(1, args.traces_per_shard // 4), oracle_lines=args.oracle_lines,
                    explore_max_steps=args.explore_max_steps, explore_max_depth=args.explore_max_depth)
    cfg = CampaignConfig(minutes=args.minutes, seed=seed, out=Path(args.out), kinds=args.kinds, budget=budget,
                         max_shards=args.max_shards, plant=args.plant, on_cluster=args.scheduler is not None)

    def executor() -> Executor:
        if args.scheduler is not None:
            return DaskExecutor(args.scheduler)
        return PoolExecutor(args.workers)

    try:
        code, _ = campaign(cfg, executor)
    except (ClusterUnavailable, UnusableOutput) as e:
        print(f"qlwf campaign: {e}", file=sys.stderr)
        return 2
    return code


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "campaign", help="a long verification run in seeded shards over a process pool or a Dask cluster",
        description="Stateful-test seeds, generated conformance traces (SQLite; PostgreSQL when QLWF_PG_DSN or a "
                    "throwaway cluster is available), oracle fuzzing and explorer shapes, in shards derived from "
                    "--seed. Stops at the first counterexample (written as a replayable trace) or at the deadline; "
                    "writes DIR/summary.json. Exit 0 passed, 1 a counterexample, 3 unknown (nothing ran, or a leg "
                    "skipped or broken), 2 bad usage.")
    p.add_argument("--minutes", type=up_to(MAX_MINUTES, "minutes"), required=True,
                   help=f"deadline (fractions allowed, at most {MAX_MINUTES}: 30 days)")
    p.add_argument("--workers", type=processes(), default=min(MAX_PROCESSES, os.cpu_count() or 1),
                   help=f"local worker processes, 1..{MAX_PROCESSES} (default: the number of cores)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the shards on the Dask cluster at ADDRESS (pip install 'qlwf[cluster]')")
    p.add_argument("--seed", type=int, help="the campaign seed (default: random, printed)")
    p.add_argument("--out", type=output_dir, default=DEFAULT_OUT, metavar="DIR",
                   help=f"summary and traces (default {DEFAULT_OUT})")
    p.add_argument("--max-shards", type=integer(1), metavar="N", help="stop after the first N shards")
    p.add_argument("--kinds", type=_kinds, default=KINDS, metavar="K,K",
                   help=f"the kinds of shard to run (default all: {','.join(KINDS)})")
    p.add_argument("--plant", type=_mutant, metavar="MUTANT",
                   help="self-test: plant this manifest mutant in every shard; the campaign must fail")
    p.add_argument("--stateful-examples", type=integer(1), default=Budget.stateful_examples, metavar="N",
                   help=f"Hypothesis examples per stateful shard (default {Budget.stateful_examples})")
    p.add_argument("--traces-per-shard", type=integer(1), default=Budget.sqlite_traces, metavar="N",
                   help=f"generated traces per SQLite shard, a quarter of that per PostgreSQL shard "
                        f"(default {Budget.sqlite_traces})")
    p.add_argument("--oracle-lines", type=integer(1), default=Budget.oracle_lines, metavar="N",
                   help=f"fuzzed oracle lines per shard (default {Budget.oracle_lines})")
    p.add_argument("--explore-max-steps", type=integer(1, MAX_SHAPE_STEPS), default=Budget.explore_max_steps,
                   metavar="K", help=f"explorer shards: every DAG shape of 1..K steps (default "
                                     f"{Budget.explore_max_steps}, at most {MAX_SHAPE_STEPS}); those of K steps "
                                     "start at an offset derived from the seed")
    p.add_argument("--explore-max-depth", type=integer(1), metavar="D",
                   help="bound the explorer's search depth (default: exhaustive over each shape)")
    p.set_defaults(func=run)
