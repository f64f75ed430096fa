"""Conformance runs as the CLI drives them: generated traces, the golden corpus, single replays."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from qlwf.conformance.backends import registry
from qlwf.conformance.generate.sequences import GeneratorConfig, generate
from qlwf.conformance.generate.surface import FULL, Surface, generate_within
from qlwf.conformance.lockstep.compare import Divergence, LockstepResult, load_invariant_check, run_lockstep
from qlwf.conformance.lockstep.coverage import Coverage
from qlwf.conformance.processes.fork_pool import ForkPool
from qlwf.conformance.report.render import trace_dir
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import Trace, TraceFormatError, load, save


def corpus_traces(directory: Path = CORPUS_DIR) -> list[Trace]:
    return [load(p) for p in sorted(directory.glob("*.json"))]


def generated_traces(count: int, seed: int, config: GeneratorConfig | None = None,
                     surface: Surface | None = None) -> Iterator[Trace]:
    """`count` traces with seeds seed, seed+1, …; each reproducible on its own from its seed (and the
    surface it stays inside, when one is given)."""
    for i in range(count):
        yield generate(seed + i, config) if surface is None else generate_within(seed + i, surface, config)


@dataclass
class RunSummary:
    backend: str
    results: list[LockstepResult] = field(default_factory=list)
    seconds: float = 0.0
    coverage: Coverage | None = None
    # traces that need something the driver did not declare: (trace, the missing piece); never run
    not_applicable: list[tuple[str, str]] = field(default_factory=list)
    surface: Surface = FULL  # what the backend declared and was compared on

    @property
    def failures(self) -> list[LockstepResult]:
        return [r for r in self.results if not r.passed]

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.results)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def verdict(self) -> str:
        """passed, failed, or unknown: no failure but no step either (no trace selected, none applicable,
        or only empty ones), so nothing was checked, and an evidence-free run is no pass (as `qlwf audit`
        of no Run). Not-applicable traces never count either way."""
        if self.failures:
            return "failed"
        return "passed" if self.steps else "unknown"

    @property
    def exit_code(self) -> int:
        return {"passed": 0, "failed": 1, "unknown": 3}[self.verdict]

    @property
    def invariant_checks(self) -> int:
        return sum(r.invariant_checks for r in self.results)

    @property
    def invariant_evaluations(self) -> int:
        return sum(r.invariant_evaluations for r in self.results)

    def not_applicable_by_piece(self) -> dict[str, int]:
        """How many traces each missing piece made not applicable, most first."""
        return dict(Counter(piece for _, piece in self.not_applicable).most_common())

    def causes(self) -> dict[str, int]:
        """The failures by cause (command × first differing field or error kind), most first."""
        return dict(Counter(r.divergence.cause for r in self.failures if r.divergence).most_common())

    def applicability(self) -> str:
        """`N applicable, M not applicable (piece: n, …)`; empty when every trace was applicable."""
        if not self.not_applicable:
            return ""
        pieces = ", ".join(f"{piece}: {n}" for piece, n in self.not_applicable_by_piece().items())
        return f"{len(self.results)} applicable, {len(self.not_applicable)} not applicable ({pieces})"

    def line(self) -> str:
        rate = self.steps / self.seconds if self.seconds > 0 else 0.0
        applicable = f"; {self.applicability()}" if self.not_applicable else ""
        compared = f"; compared: {self.surface.describe()}" if not self.surface.full else ""
        if self.verdict == "unknown":
            return (f"conform {self.backend}: NO VERDICT — {len(self.results)} traces, 0 steps: nothing was checked"
                    f"{applicable}{compared}")
        verdict = "PASS" if self.passed else f"FAIL ({len(self.failures)} failing)"
        return (f"conform {self.backend}: {verdict} — {len(self.results)} traces, {self.steps} steps, "
                f"{self.seconds:.2f} s, {rate:.0f} steps/s{applicable}{compared}")

    def cause_lines(self) -> list[str]:
        """The per-cause tally of the failures, one line each."""
        return [f"  {n:4d}  {cause}" for cause, n in self.causes().items()]

    def merge(self, other: RunSummary) -> None:
        """Add `other`'s traces (another part of the same run) to this summary."""
        self.results += other.results
        self.not_applicable += other.not_applicable
        self.seconds += other.seconds
        if other.results or other.not_applicable:
            self.surface = other.surface
        if self.coverage is not None and other.coverage is not None:
            self.coverage.merge(other.coverage)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "passed": self.verdict == "passed", "verdict": self.verdict,
                "traces": len(self.results), "steps": self.steps,
                "seconds": round(self.seconds, 3),
                "stepsPerSecond": round(self.steps / self.seconds, 1) if self.seconds else None,
                "timing": {"modelSeconds": round(sum(r.model_seconds for r in self.results), 3),
                           "backendSeconds": round(sum(r.backend_seconds for r in self.results), 3),
                           "snapshotSeconds": round(sum(r.snapshot_seconds for r in self.results), 3),
                           "checkSeconds": round(sum(r.check_seconds for r in self.results), 3)},
                "failures": [r.divergence.to_json() for r in self.failures if r.divergence],
                "causes": self.causes(), "compared": self.surface.describe(),
                "surface": {"commands": sorted(self.surface.commands), **self.surface.to_hello()},
                "applicable": len(self.results), "notApplicable": self.not_applicable_by_piece(),
                "coverage": self.coverage.report() if self.coverage else None}


def covered_rule_rows(parts: Iterable[RunSummary]) -> set[str]:
    """The model rule-table rows that the runs exercised (conformance/lockstep/coverage.py's vocabulary)."""
    return {row for p in parts if p.coverage is not None for row in p.coverage.report()["rules"]["covered"]}


def met_boundaries(parts: Iterable[RunSummary]) -> set[str]:
    """The boundaries of conformance/generate/boundaries.py that the runs met (steps both sides agreed on)."""
    return {b for p in parts if p.coverage is not None for b in p.coverage.report()["boundaries"]["met"]}


def evidence_counts(parts: list[RunSummary], corpus: bool) -> dict[str, int]:
    """A conformance check's gate evidence: what ran (the corpus first when `corpus`), and what it covered.
    invariant_checks counts the steps given an invariant verdict, invariant_evaluations the ones of
    them evaluated in full (the rest the exact read-back decided, decisions Q-60)."""
    return {"corpus_traces": len(parts[0].results) if corpus and parts else 0,
            "traces": sum(len(p.results) for p in parts), "steps": sum(p.steps for p in parts),
            "invariant_checks": sum(p.invariant_checks for p in parts),
            "invariant_evaluations": sum(p.invariant_evaluations for p in parts),
            "rule_rows_covered": len(covered_rule_rows(parts)),
            "boundaries_met": len(met_boundaries(parts))}


def run_traces(backend: str, traces: Iterable[Trace], *, invariants: bool = True, invariants_every_step: bool = True,
               on_result: Callable[[LockstepResult], None] | None = None) -> RunSummary:
    """Lockstep every trace against a fresh store of `backend`.

    A trace that fails as the loss of the backend's storage would make it fail (a crash, an Unavailable
    answer, a store that cannot be opened) while the storage does not answer raises BackendLost: no
    divergence is reported for it (decisions Q-107).

    A backend that declares a surface (an exec driver's hello) runs only the traces inside it, compared
    as far as it declared; a trace that needs more is counted as not applicable by its missing piece."""
    factory = registry.get(backend).create()
    check = load_invariant_check() if invariants else None
    summary = RunSummary(backend, coverage=Coverage(backend))
    start = time.perf_counter()
    try:
        for trace in traces:
            name = trace.name or trace.description
            try:
                port = factory.open()
            except Exception as e:
                _raise_if_lost(factory, f"opening a fresh store for trace {name!r}: {type(e).__name__}")
                raise
            surface = getattr(port, "surface", FULL)
            summary.surface = surface
            # the whole port too: a probe of a store that derives the binding is not for one that takes it
            missing = surface.missing_piece(trace)
            if missing is not None:
                with _unless_lost(factory, f"closing the store of trace {name!r}"):
                    port.close()
                summary.not_applicable.append((name, missing))
                continue
            try:
                # the read-back a divergence's report makes can fail too: same question then
                with _unless_lost(factory, f"trace {name!r}"):
                    result = run_lockstep(trace, port, invariants=check, invariants_every_step=invariants_every_step,
                                          coverage=summary.coverage, surface=surface)
            finally:
                with _unless_lost(factory, f"closing the store of trace {name!r}"):
                    port.close()
            if result.divergence is not None and _storage_shaped(result.divergence):
                _raise_if_lost(factory, f"trace {name!r} step {result.divergence.step_index}: "
                                        f"{result.divergence.kind}")
            summary.results.append(result)
            if on_result is not None:
                on_result(result)
    except BaseException:
        with contextlib.suppress(Exception):  # the run's own error is the news, not a failing cleanup after it
            factory.shutdown()
        raise
    # dropping the store is the run's last use of the storage: a server lost then is no verdict either,
    # not an internal error (the empty corpus run of `qlwf conform` drops its store before any trace)
    with _unless_lost(factory, "shutting the backend down"):
        factory.shutdown()
    summary.seconds = time.perf_counter() - start
    return summary


def _storage_shaped(d: Divergence) -> bool:
    """A divergence the loss of the storage explains: the backend raised, or answered Unavailable."""
    error = d.backend_outcome.get("error") if isinstance(d.backend_outcome, dict) else None
    return d.kind == "backend_crash" or (isinstance(error, dict) and error.get("class") == "Unavailable")


def _raise_if_lost(factory: registry.BackendFactory, when: str) -> None:
    lost = getattr(factory, "storage_lost", None)
    why = lost() if lost is not None else None
    if why is not None:
        raise registry.BackendLost(f"{why} ({when})")


@contextlib.contextmanager
def _unless_lost(factory: registry.BackendFactory, when: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        _raise_if_lost(factory, when)
        raise


def _generated_chunk(job: tuple[str, int, int, GeneratorConfig | None, bool, bool, Surface | None]) -> RunSummary:
    backend, count, seed, config, invariants, every_step, surface = job
    return run_traces(backend, generated_traces(count, seed, config, surface), invariants=invariants,
                      invariants_every_step=every_step)


CHUNK_TRACES = 8  # smallest work item of a parallel run


def run_generated(backend: str, count: int, seed: int, *, config: GeneratorConfig | None = None, jobs: int = 1,
                  invariants: bool = True, invariants_every_step: bool = True,
                  on_result: Callable[[LockstepResult], None] | None = None,
                  surface: Surface | None = None) -> RunSummary:
    """`count` generated traces (seeds seed…seed+count-1), split over `jobs` forked worker processes;
    with `surface`, traces that stay inside it (conformance/generate/surface.py).

    Results come back in seed order whatever `jobs` is; `on_result` sees each one (in a parallel
    run, a chunk at a time as the chunks finish in order)."""
    jobs = max(1, min(jobs, count))
    if jobs == 1:
        return run_traces(backend, generated_traces(count, seed, config, surface), invariants=invariants,
                          invariants_every_step=invariants_every_step, on_result=on_result)
    # A few chunks per worker: steady progress, yet few fresh stores (each chunk opens one backend).
    size = max(CHUNK_TRACES, -(-count // (4 * jobs)))
    work = [(backend, min(size, seed + count - start), start, config, invariants, invariants_every_step, surface)
            for start in range(seed, seed + count, size)]
    begin = time.perf_counter()
    merged = RunSummary(backend, coverage=Coverage(backend))
    # fork: workers inherit the backend registry (including backends registered at run time)
    with ForkPool(_generated_chunk, jobs) as pool:  # leaving it early (an interrupt) kills what still runs
        parts = []
        for part in pool.ordered(work):
            parts.append(part)
            if on_result is not None:
                for result in part.results:
                    on_result(result)
    for part in parts:
        merged.merge(part)
    merged.seconds = time.perf_counter() - begin
    return merged


def declared_surface(backend: str) -> Surface:
    """What a driver backend declares in hello (one store opened and closed); the full surface for
    any other backend, which declares nothing."""
    spec = registry.get(backend)
    if not spec.has("driver"):
        return FULL
    factory = spec.create()
    try:
        port = factory.open()
        port.close()
    finally:
        factory.shutdown()
    surface: Surface = getattr(port, "surface", FULL)
    return surface


def save_divergence(divergence: Divergence, backend: str, directory: Path | None = None) -> Path | None:
    """Write the diverging trace up to and including the diverging step as a counterexample trace
    ($QLWF_TRACE_DIR, default reports/counterexamples) and remember where, so the report can print
    the `qlwf show` command that renders it."""
    source = divergence.source
    if source is None:
        return None
    root = directory or trace_dir()
    root.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"conform-{backend}-{divergence.trace}")[:120]
    path = root / f"{name}.json"
    why = divergence.message.splitlines()[0][:300] if divergence.message else ""
    description = (f"conformance divergence on {backend} at step {divergence.step_index} ({divergence.kind}): {why}; "
                   f"trace {divergence.trace!r}: {source.description}")
    save(Trace(description, source.initial_clock, source.steps[: divergence.step_index + 1], name), path)
    divergence.trace_file = str(path)
    return path


def conform(backend: str, traces: int, seed: int, corpus: bool, as_json: bool, out: TextIO,
            invariants: bool = True, jobs: int = 1,
            progress: Callable[[LockstepResult], None] | None = None,
            out_dir: Path | None = None, profile: Surface | None = None) -> int:
    """`qlwf conform`: the corpus (optional) then `traces` generated traces; exit 0 iff all applicable
    traces passed, 1 on a divergence, 3 when no step ran (nothing checked, or nothing applicable: no verdict).

    `progress` sees every result as it arrives (the CLI shows it on stderr); the report goes to `out`;
    counterexamples to `out_dir` (default: trace_dir()). Generated traces stay inside `profile`, else
    inside the restricted surface the driver declared during the corpus run, if any."""

    def report(result: LockstepResult) -> None:
        if result.divergence is not None:
            save_divergence(result.divergence, backend, out_dir)
            if not as_json:
                print(result.divergence.render(), file=out)
        if progress is not None:
            progress(result)

    summary = run_traces(backend, corpus_traces() if corpus else [], invariants=invariants, on_result=report)
    within = profile
    if within is None and traces:
        declared = summary.surface if summary.results or summary.not_applicable else declared_surface(backend)
        within = None if declared.full else declared
    generated = run_generated(backend, traces, seed, jobs=jobs, invariants=invariants, on_result=report,
                              surface=within)
    summary.merge(generated)
    if as_json:
        print(json.dumps(summary.to_json(), ensure_ascii=False), file=out)
    else:
        assert summary.coverage is not None
        print(summary.coverage.render(), file=out)
        if summary.failures:
            print("failures by cause (command × first differing field or error kind):", file=out)
            print("\n".join(summary.cause_lines()), file=out)
    print(summary.line(), file=out)
    return summary.exit_code


def replay(path: str | Path, backend: str, as_json: bool, out: TextIO, invariants: bool = True) -> int:
    """`qlwf replay`: one trace file in lockstep against `backend`, checking its recorded expectations.
    A file that is not a readable trace is bad input: one line on stderr and exit 2, never a divergence."""
    try:
        trace = load(path)
    except TraceFormatError as e:
        print(f"qlwf replay: {path}: {e}", file=sys.stderr)
        return 2
    summary = run_traces(backend, [trace], invariants=invariants)
    if not summary.results:  # outside the driver's declared surface: no verdict
        print(f"replay {Path(path).name} on {backend}: NOT APPLICABLE — needs {summary.not_applicable[0][1]}, "
              f"which the driver does not declare", file=out)
        return 3
    result = summary.results[0]
    if result.divergence is not None:
        save_divergence(result.divergence, backend)
    if as_json:
        print(json.dumps(summary.to_json(), ensure_ascii=False), file=out)
    elif result.divergence is not None:
        print(result.divergence.render(), file=out)
    expectation = "with recorded expectations" if trace.recorded else "unrecorded"
    print(f"replay {Path(path).name} ({expectation}) on {backend}: " + summary.line().split(": ", 1)[1], file=out)
    return summary.exit_code  # a trace of no step is no evidence: 3, as conform's
