"""The driver over many shapes and scopes: what `explore(cfg)` explores, in which order, in how many processes.

Several scopes are handed out whole to `jobs` forked workers, the largest first (`dispatch_order`);
a lone scope is split across them instead, level by level (parallel.py), so that `qlwf explore
--shape '3:-' --full` also uses every core.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace

from qlwf.conformance.processes.fork_pool import ForkPool

from .alphabet import ALPHABETS, default_alphabet
from .parallel import explore_shape_partitioned
from .report import ExploreReport, ShapeReport
from .search import Checker, Config, Observer, _report_name, explore_shape
from .shapes import Shape, dag_shapes, parse_scope


def splits(cfg: Config) -> bool:
    """Whether a lone scope under `cfg` can be split across processes (parallel.py): every reduction
    but the sleep sets, which keep per-state sets the partitions would have to share."""
    return cfg.workflows == 1 or "sleep" not in cfg.reduction.split("+")


def _explore_one(job: tuple[int, Shape, Config, Observer | None, Checker | None]) -> tuple[int, ShapeReport]:
    index, shape, cfg, observer, checker = job
    return index, explore_shape(shape, cfg, observer, checker)


def _pinned_transitions() -> dict[str, int]:
    """Per shape or scope, the transitions the manifest pins (only to hand out the largest ones first)."""
    from importlib import resources
    try:
        manifest = resources.files("qlwf.conformance.checkers").joinpath("explore_manifest.json")
        pinned = json.loads(manifest.read_text(encoding="utf-8"))
        return {name: int(c["transitions"]) for part in ("shapes", "workflows")
                for name, c in pinned.get(part, {}).items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def dispatch_order(work: list[tuple[Shape, Config]]) -> list[int]:
    """Indexes of `work`, largest expected work first, so that two workers finish together: the
    manifest's transitions where it pins the scope, else more steps and fewer edges first."""
    pinned = _pinned_transitions()

    def size(i: int) -> tuple[int, ...]:
        shape, cfg = work[i]
        return (-pinned.get(_report_name(shape, cfg), 1 << 40), -shape[0] * cfg.workflows, len(shape[1]), i)

    return sorted(range(len(work)), key=size)


def scope_work(cfg: Config) -> list[tuple[Shape, Config]]:
    """What `explore(cfg)` explores, in report order: every shape of 1..cfg.max_steps (or cfg.shapes)
    with cfg.workflows Runs, then each of cfg.workflow_scopes."""
    shapes = list(cfg.shapes) if cfg.shapes is not None else [s for n in range(1, cfg.max_steps + 1)
                                                               for s in dag_shapes(n)]
    work = [(s, cfg) for s in shapes]
    for name in cfg.workflow_scopes:
        scope = parse_scope(name)
        alphabet = default_alphabet if scope.alphabet is None else ALPHABETS[scope.alphabet]
        work.append((scope.shape, replace(cfg, workflows=scope.workflows, alphabet=alphabet, shapes=None,
                                          workflow_scopes=())))
    return work


def explore(cfg: Config, progress: Callable[[ShapeReport], None] | None = None,
            observer: Observer | None = None, jobs: int = 1, checker: Checker | None = None) -> ExploreReport:
    """Explore every shape of 1..cfg.max_steps steps (or cfg.shapes), then cfg.workflow_scopes, in
    `jobs` forked processes (a lone scope split across them).

    The report lists the shapes in their order whatever the number of jobs; under stop_on_violation
    it ends with the first shape (in that order) that has a finding, as a single process would."""
    start = time.perf_counter()
    todo = scope_work(cfg)
    done: dict[int, ShapeReport] = {}

    def first_failing() -> int | None:
        return min((i for i, r in done.items() if r.findings), default=None) if cfg.stop_on_violation else None

    def settled() -> bool:  # every shape before the first failing one is in: nothing later can matter
        stop = first_failing()
        return stop is not None and all(i in done for i in range(stop))

    if jobs > 1 and len(todo) == 1 and splits(todo[0][1]):
        shape, shape_cfg = todo[0]
        done[0] = explore_shape_partitioned(shape, shape_cfg, jobs, observer, checker)
        if progress is not None:
            progress(done[0])
    elif jobs > 1 and len(todo) > 1:
        work = [(i, todo[i][0], todo[i][1], observer, checker) for i in dispatch_order(todo)]
        with ForkPool(_explore_one, min(jobs, len(work))) as pool:  # leaving it kills what still runs
            for _, (i, r) in pool.unordered(work):
                done[i] = r
                if progress is not None:
                    progress(r)
                if settled():
                    break
    else:
        for i, (shape, shape_cfg) in enumerate(todo):
            done[i] = _explore_one((i, shape, shape_cfg, observer, checker))[1]
            if progress is not None:
                progress(done[i])
            if settled():
                break
    stop = first_failing()
    last = len(todo) - 1 if stop is None else stop
    shapes = [done[i] for i in range(last + 1) if i in done]
    return ExploreReport(cfg.max_steps, shapes, time.perf_counter() - start)
