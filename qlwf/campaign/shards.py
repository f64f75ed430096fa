"""The shards of a campaign: what each one checks, how it is derived from the campaign seed, and running one.

A shard is named by its kind and its number within that kind; its seeds (or its DAG shape) follow
from (campaign seed, kind, number) alone, so the shards, and what each finds, are the same whatever
runs them: one process, a pool of N, or a Dask cluster. `run_shard` is a module-level function of
plain data in, plain data out, so it pickles to any of them.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("stateful", "conform-sqlite", "conform-postgres", "oracle", "explore")
# The explorer's one import site here (it may move to another package; only this name changes then).
EXPLORER = "qlwf.conformance.checkers.explore"


def explorer() -> Any:
    return importlib.import_module(EXPLORER)


@dataclass(frozen=True)
class Budget:
    """How much one shard of each kind does (small: a shard is the unit of cancellation and progress)."""

    stateful_examples: int = 4  # Hypothesis examples per stateful shard
    stateful_steps: int = 40  # steps per example (the ci profile's stateful_step_count)
    sqlite_traces: int = 8  # generated conformance traces per SQLite shard
    postgres_traces: int = 2  # PostgreSQL runs a trace several times slower than SQLite
    oracle_lines: int = 2000  # fuzzed oracle lines per shard
    explore_max_steps: int = 3  # the explorer's shards: every DAG shape of 1..this many steps
    explore_max_depth: int | None = None  # the explorer's BFS depth bound (None: exhaustive)


@dataclass(frozen=True)
class Shard:
    index: int  # position in the campaign's order (what "first" means for findings)
    kind: str
    number: int  # the n-th shard of its kind
    seeds: tuple[int, ...] = ()  # the Hypothesis seed, trace seeds or the fuzzer's seed
    shape: tuple[int, tuple[tuple[int, int], ...]] | None = None  # explore: (steps, edges)
    budget: Budget = field(default_factory=Budget)
    plant: str | None = None  # a manifest mutant planted around the shard (the campaign's self-test)
    pg_dsn: str | None = None  # conform-postgres on a Dask worker: the server it reaches

    @property
    def name(self) -> str:
        if self.shape is not None:
            return f"{self.kind}[{explorer().shape_name(self.shape)}]"
        return f"{self.kind}#{self.number}"


def derived_seed(campaign_seed: int, kind: str, number: int, part: int = 0) -> int:
    """A 32-bit seed from (campaign seed, kind, shard number, part): stable across Python versions and hosts."""
    digest = hashlib.sha256(f"qlwf-campaign:{campaign_seed}:{kind}:{number}:{part}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def explorer_shapes(campaign_seed: int, max_steps: int) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """Every DAG shape of 1..max_steps steps, smaller sizes first. The shapes of the largest size start
    at a seed-derived offset and wrap around: a campaign whose deadline ends it within that size (the
    302 shapes of 5 steps took 23 minutes of two cores here) covers a different part of it for each seed."""
    dag_shapes = explorer().dag_shapes
    last = dag_shapes(max_steps) if max_steps >= 1 else []
    start = derived_seed(campaign_seed, "explore", 0) % len(last) if last else 0
    return [s for n in range(1, max_steps) for s in dag_shapes(n)] + last[start:] + last[:start]


def plan(campaign_seed: int, kinds: tuple[str, ...], budget: Budget, plant: str | None = None,
         pg_dsn: str | None = None) -> Iterator[Shard]:
    """Every shard of the campaign in order: the kinds round-robin, the explorer's shapes until they run out."""
    shapes = explorer_shapes(campaign_seed, budget.explore_max_steps) if "explore" in kinds else []
    counts = dict.fromkeys(kinds, 0)
    index = 0
    while kinds:
        before = index
        for kind in kinds:
            n = counts[kind]
            if kind == "explore":
                if n >= len(shapes):
                    continue
                shard = Shard(index, kind, n, shape=shapes[n], budget=budget, plant=plant)
            else:
                parts = {"conform-sqlite": budget.sqlite_traces,
                         "conform-postgres": budget.postgres_traces}.get(kind, 1)
                seeds = tuple(derived_seed(campaign_seed, kind, n, p) for p in range(parts))
                shard = Shard(index, kind, n, seeds=seeds, budget=budget, plant=plant,
                              pg_dsn=pg_dsn if kind == "conform-postgres" else None)
            counts[kind] = n + 1
            index += 1
            yield shard
        if index == before:  # only explorer shards were asked for, and their shapes ran out
            return


# ------------------------------------------------------------------------------------------------
# Results
@dataclass
class Finding:
    shard: str
    kind: str
    message: str
    trace_name: str  # file name under the campaign's traces/ directory
    trace_text: str  # the counterexample: a qlwf-trace@1 document (oracle: the offending batch line)
    replay: str  # the command that replays it

    def to_json(self, path: str | None = None) -> dict[str, Any]:
        return {"shard": self.shard, "kind": self.kind, "message": self.message, "trace": path or self.trace_name,
                "replay": self.replay}


@dataclass
class ShardResult:
    index: int
    name: str
    kind: str
    seeds: tuple[int, ...]
    examples: int = 0  # stateful examples, conformance traces, oracle lines, explored shapes
    steps: int = 0  # commands and time steps executed (stateful, conformance)
    states: int = 0  # distinct explorer states
    transitions: int = 0  # explorer transitions
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None  # the shard could not run to the end (not a finding of the system)

    def counts(self) -> dict[str, int]:
        return {"examples": self.examples, "steps": self.steps, "states": self.states,
                "transitions": self.transitions}


class _Planted:
    """A Patcher (conformance/mutants/base.py) that undoes itself, so a reused worker is clean afterwards."""

    def __init__(self) -> None:
        self._undo: list[tuple[str, Any, Any, Any]] = []

    def setattr(self, target: Any, name: str, value: Any) -> None:
        self._undo.append(("attr", target, name, getattr(target, name, _MISSING)))
        setattr(target, name, value)

    def setitem(self, mapping: Any, name: Any, value: Any) -> None:
        self._undo.append(("item", mapping, name, mapping.get(name, _MISSING) if hasattr(mapping, "get") else
                           mapping[name]))
        mapping[name] = value

    def undo(self) -> None:
        for how, target, name, old in reversed(self._undo):
            if how == "attr":
                delattr(target, name) if old is _MISSING else setattr(target, name, old)
            elif old is _MISSING:
                del target[name]
            else:
                target[name] = old
        self._undo.clear()


_MISSING = object()


def error_line(e: BaseException) -> str:
    """An error as one line of a summary: its type and the first line of its message."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300]}" if text else type(e).__name__


def run_shard(shard: Shard) -> ShardResult:
    """Run one shard to its end (or its first counterexample); the same answer wherever it runs."""
    result = ShardResult(shard.index, shard.name, shard.kind, shard.seeds)
    planted = _Planted()
    start = time.perf_counter()
    try:
        if shard.plant is not None:
            from qlwf.conformance.mutants.manifest import by_name

            mutant = by_name(shard.plant)
            if mutant.plant is None:
                raise ValueError(f"mutant {shard.plant} is a proof mutant: it has nothing to plant")
            mutant.plant(planted)
        _RUNNERS[shard.kind](shard, result)
    except Exception as e:  # a broken harness or backend: the shard's evidence is incomplete, not a finding
        result.error = error_line(e)
    finally:
        planted.undo()
    result.seconds = time.perf_counter() - start
    return result


# ------------------------------------------------------------------------------------------------
# The kinds
def _stateful(shard: Shard, result: ShardResult) -> None:
    from hypothesis import HealthCheck, Phase, seed, settings
    from hypothesis.stateful import get_state_machine_test

    from qlwf.conformance.stateful.machine import WorkflowMachine
    from qlwf.support.preload import load_every_module

    load_every_module()  # the same Hypothesis constants in every process (decisions Q-113)

    # The machine writes a counterexample to a file (its shrinks overwrite it). The directory is made only
    # when a first counterexample is written: a shard killed by the campaign's end (SIGTERM, default
    # disposition, no finally) leaves nothing behind unless it was in the middle of a finding.
    scratch: list[Path] = []

    def where() -> Path:
        if not scratch:
            scratch.append(Path(tempfile.mkdtemp(prefix="qlwf-campaign-")))
        return scratch[0] / "stateful.json"

    class Campaign(WorkflowMachine):
        coverage = None  # row witnesses are the suite's business

        def __init__(self) -> None:
            super().__init__()
            result.examples += 1

        def trace_path(self) -> Path:
            return where()

        def teardown(self) -> None:
            result.steps += len(self.steps)
            super().teardown()

    budget = shard.budget
    # Parent: Hypothesis's own defaults, not whichever profile this process loaded (a test
    # session's, say), so a shard's settings and therefore its examples depend on the shard alone.
    config = settings(settings.get_profile("default"), derandomize=False, database=None, deadline=None,
                      print_blob=False,
                      max_examples=budget.stateful_examples, stateful_step_count=budget.stateful_steps,
                      phases=[Phase.generate, Phase.shrink],
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                             HealthCheck.filter_too_much])
    test = seed(shard.seeds[0])(get_state_machine_test(Campaign, settings=config))
    try:
        test()
    except AssertionError as e:
        if not scratch or not where().is_file():
            raise
        message = str(e).splitlines()[0]
        result.findings.append(_trace_finding(shard, message, where().read_text(encoding="utf-8")))
    finally:
        if scratch:
            shutil.rmtree(scratch[0], ignore_errors=True)


# Every name a campaign gives a trace file: what it may remove from a previous campaign's traces/.
TRACE_NAME = re.compile(rf"(?:{'|'.join(map(re.escape, KINDS))})-[0-9]+\.json")


def _trace_finding(shard: Shard, message: str, text: str) -> Finding:
    name = f"{shard.kind}-{shard.number}.json"
    return Finding(shard.name, shard.kind, message[:600], name, text,
                   f"qlwf replay TRACE --backend {'model' if shard.kind != 'conform-postgres' else 'postgres'}")


def _conform(backend: str, shard: Shard, result: ShardResult) -> None:
    from qlwf.conformance.generate.sequences import generate
    from qlwf.conformance.lockstep import runner
    from qlwf.conformance.traces.export import record_for_saving
    from qlwf.conformance.traces.format import Trace, dumps

    if shard.pg_dsn is not None and "QLWF_PG_DSN" not in os.environ:
        os.environ["QLWF_PG_DSN"] = shard.pg_dsn  # a Dask worker: the server the campaign was given
    summary = runner.run_traces(backend, (generate(s) for s in shard.seeds))
    result.examples += len(summary.results)
    result.steps += summary.steps
    for r in summary.failures:
        d = r.divergence
        if d is None or d.source is None:
            continue
        why = d.message.splitlines()[0] if d.message else ""
        message = f"divergence on {backend} at step {d.step_index} ({d.kind}): {why}; trace {r.trace}"
        # up to the diverging step, recorded through the model: what the backend should have done
        cut = Trace(f"campaign counterexample, {message}", d.source.initial_clock, d.source.steps[: d.step_index + 1],
                    r.trace)
        finding = _trace_finding(shard, message, dumps(record_for_saving(cut)))
        finding.replay = f"qlwf replay TRACE --backend {backend}"
        result.findings.append(finding)
        break  # the first divergence of the shard; the campaign stops on it


def _conform_sqlite(shard: Shard, result: ShardResult) -> None:
    _conform("sqlite", shard, result)


def _conform_postgres(shard: Shard, result: ShardResult) -> None:
    _conform("postgres", shard, result)


def _oracle(shard: Shard, result: ShardResult) -> None:
    from qlwf.conformance.checkers.oracle_fuzz import Fuzzer, check_answer
    from qlwf.oracle.protocol import answer_bytes

    pool = oracle_pool(shard.plant)
    fuzzer = Fuzzer(random.Random(shard.seeds[0]), [(fn, inp) for fn, inp, _ in pool])
    for n in range(shard.budget.oracle_lines):
        line, expect, i = fuzzer.line()
        result.examples += 1
        problem = check_answer(answer_bytes(line), expect, pool[i][2])
        if problem:
            message = f"oracle line {n} of seed {shard.seeds[0]} ({expect}): {problem}"
            result.findings.append(Finding(shard.name, shard.kind, message[:600], f"oracle-{shard.number}.jsonl",
                                           line.decode("utf-8", "replace") + "\n", "qlwf oracle batch < TRACE"))
            return


_POOLS: dict[str | None, list[tuple[str, Any, Any]]] = {}  # by planted mutant: its resolutions differ


def oracle_pool(plant: str | None = None) -> list[tuple[str, Any, Any]]:
    """Valid oracle requests from the installed package alone, each with its resolution: the frontier and
    cancellation snapshots of the golden corpus that the oracle resolves (a frontier request for a
    cancelling Run is rightly refused, so it is no valid line) and the plans of the explorer's shapes."""
    if plant not in _POOLS:
        from qlwf.conformance.traces.corpus import CORPUS_DIR
        from qlwf.model.errors import QlwfError
        from qlwf.model.oracle import consult
        from qlwf.review.sources import corpus_inputs

        requests = [(item["fn"], item["input"]) for item in corpus_inputs(CORPUS_DIR)]
        ex = explorer()
        requests += [("admit-workflow", ex.build_plan("run-f", "plan-f", ex.shape_needs(s), 1000))
                     for n in (1, 2, 3) for s in ex.dag_shapes(n)]
        pool = []
        for fn, inp in requests:
            try:
                pool.append((fn, inp, consult(fn, inp).resolution))
            except QlwfError:
                continue
        if {fn for fn, _, _ in pool} != {"frontier", "cancel", "admit-workflow"}:
            raise RuntimeError(f"the oracle pool lacks a function: {sorted({fn for fn, _, _ in pool})}")
        _POOLS[plant] = pool
    return _POOLS[plant]


def _explore(shard: Shard, result: ShardResult) -> None:
    from qlwf.conformance.stateful.postconditions import transition_problems
    from qlwf.conformance.traces.export import record_for_saving
    from qlwf.conformance.traces.format import Trace, dumps
    ex = explorer()
    if shard.shape is None:  # plan() gives every explorer shard its shape
        raise ValueError(f"explorer shard {shard.name} has no DAG shape")
    report = ex.explore(ex.Config(max_steps=shard.shape[0], max_depth=shard.budget.explore_max_depth,
                                  shapes=(shard.shape,), stop_on_violation=True), checker=transition_problems)
    result.examples += len(report.shapes)
    result.states += report.distinct_states
    result.transitions += report.transitions
    if report.findings:
        f = report.findings[0]
        t = f.trace()
        text = dumps(record_for_saving(Trace(t["description"], t["initialClock"], t["steps"], shard.name)))
        result.findings.append(_trace_finding(shard, f"explorer [{f.shape}] {f.kind}: {f.message}", text))


_RUNNERS = {"stateful": _stateful, "conform-sqlite": _conform_sqlite, "conform-postgres": _conform_postgres,
            "oracle": _oracle, "explore": _explore}
if set(_RUNNERS) != set(KINDS):  # a kind without a runner would be planned and never run
    raise ImportError(f"shard kinds without a runner: {sorted(set(KINDS) ^ set(_RUNNERS))}")
