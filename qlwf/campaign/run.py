"""One campaign: shards in order over an executor until the deadline, the shard limit or the first counterexample.

What is reported does not depend on the number of workers (decisions Q-45):
* shards are submitted in their fixed order, at most one per free worker, so nothing queues;
* a counterexample in shard j stops submission; the shards before j still finish, those after it
  are cancelled or, if they finished already, discarded; the findings are those of the first
  failing shard in order, and the shards counted are 0…j;
* at the deadline the shards still running are cancelled and not counted (a deadline campaign
  is reproduced with `--max-shards` = its complete prefix).
* a shard the executor loses (its worker killed, the cluster gone) is counted with an error and no
  evidence, which makes the verdict unknown; when the executor itself is gone the campaign stops
  there (decisions Q-105).
Timing-dependent figures (seconds, rates, discarded and cancelled shards, where it ran) live under
the summary's "timing" key only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from qlwf.conformance.report.visible import visible
from qlwf.support import stdio
from qlwf.support.progress import Progress

from .executors import Executor, ShardLost
from .shards import KINDS, TRACE_NAME, Budget, Finding, Shard, ShardResult, plan

SUMMARY_FORMAT = "qlwf-campaign"
COUNT_KEYS = ("examples", "steps", "states", "transitions")


@dataclass(frozen=True)
class CampaignConfig:
    minutes: float
    seed: int
    out: Path
    kinds: tuple[str, ...] = KINDS
    budget: Budget = field(default_factory=Budget)
    max_shards: int | None = None
    plant: str | None = None
    on_cluster: bool = False  # --scheduler: workers do not share this process's PostgreSQL server


@dataclass
class Legs:
    """Which kinds run, and why any selected one cannot (a skipped leg makes the verdict unknown)."""

    active: tuple[str, ...]
    skipped: dict[str, str]
    pg_dsn: str | None = None


def prepare_legs(cfg: CampaignConfig) -> Legs:
    """Provision what the selected kinds need, before any worker exists (forked workers inherit it)."""
    from qlwf.conformance import backends

    skipped: dict[str, str] = {}
    pg_dsn = None
    if "conform-postgres" in cfg.kinds:
        if cfg.on_cluster:
            pg_dsn = os.environ.get("QLWF_PG_DSN", "").strip() or None
            if pg_dsn is None:
                skipped["conform-postgres"] = ("on a Dask cluster the PostgreSQL leg needs QLWF_PG_DSN (a server "
                                               "every worker reaches)")
        if "conform-postgres" not in skipped:
            try:
                backends.get("postgres").provisioner.prepare()
            except backends.BackendUnavailable as e:
                skipped["conform-postgres"] = f"PostgreSQL unavailable: {e}"
            except backends.BackendMisconfigured as e:  # a cluster that will not start: no evidence
                skipped["conform-postgres"] = f"PostgreSQL cannot start: {e}"
    return Legs(tuple(k for k in cfg.kinds if k not in skipped), skipped, pg_dsn)


class CampaignProgress(Progress):
    """The shared progress line (qlwf/support/progress.py), counting shards, steps, states and findings."""

    def __init__(self, cfg: CampaignConfig, stream: TextIO | None = None, live: bool | None = None) -> None:
        super().__init__("campaign", cfg.max_shards or 0, stream, live=live)
        self.minutes = cfg.minutes
        self.states = 0
        self.findings = 0

    def add(self, r: ShardResult) -> None:
        self.states += r.states
        self.findings += len(r.findings)
        self.advance(1, r.steps)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        total = f"/{self.total}" if self.total else ""
        return (f"{self.label}: {self.done}{total} shards, {self.steps} steps ({self.steps / elapsed:.0f}/s), "
                f"{self.states} states ({self.states / elapsed:.0f}/s), {self.findings} finding(s), "
                f"{elapsed:.0f}/{self.minutes * 60:.0f} s")

    def _show(self, *, final: bool) -> None:
        if not self.live:
            super()._show(final=final)
            return
        elapsed = time.monotonic() - self.start
        fraction = self.done / self.total if self.total else elapsed / max(self.minutes * 60, 1e-9)
        width = 24
        filled = width if final else min(width, int(width * fraction))
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.line()}" + ("\n" if final else ""))
        self.stream.flush()


@dataclass
class Outcome:
    results: dict[int, ShardResult]
    stopped: str
    first_failing: int | None
    discarded: int = 0
    cancelled: int = 0
    seconds: float = 0.0


def drive(cfg: CampaignConfig, legs: Legs, executor: Executor, progress: CampaignProgress | None = None,
          clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Run shards in order on `executor` until a stop condition; see the module docstring for the rules."""
    shards = plan(cfg.seed, legs.active, cfg.budget, cfg.plant, legs.pg_dsn)
    start = clock()
    deadline = start + cfg.minutes * 60
    in_flight: dict[Any, Shard] = {}
    results: dict[int, ShardResult] = {}
    out = Outcome(results, "", None)
    submitted = 0
    exhausted = False
    try:
        while True:
            while (not out.stopped and not exhausted and len(in_flight) < executor.workers
                   and (cfg.max_shards is None or submitted < cfg.max_shards) and clock() < deadline):
                shard = next(shards, None)
                if shard is None:
                    exhausted = True
                    break
                in_flight[executor.submit(shard)] = shard
                submitted += 1
            if not in_flight:
                break
            for handle in executor.wait_any(in_flight, timeout=max(0.01, min(0.5, deadline - clock()))):
                if handle not in in_flight:  # cancelled by a counterexample earlier in this batch
                    continue
                shard = in_flight.pop(handle)
                try:
                    r = executor.result(handle)
                except ShardLost as lost:  # no evidence from this shard, and no finding either
                    r = ShardResult(shard.index, shard.name, shard.kind, shard.seeds, error=f"lost: {lost}")
                    if lost.executor_gone:
                        out.stopped = out.stopped or "executor-lost"
                        executor.cancel(list(in_flight))
                        out.cancelled += len(in_flight)
                        in_flight.clear()
                if out.first_failing is not None and r.index > out.first_failing:
                    out.discarded += 1
                    continue
                results[r.index] = r
                if progress is not None:
                    progress.add(r)
                if r.findings and (out.first_failing is None or r.index < out.first_failing):
                    out.first_failing = r.index
                    out.stopped = "counterexample"
                    later = [h for h, s in in_flight.items() if s.index > r.index]
                    executor.cancel(later)
                    for h in later:
                        del in_flight[h]
                    out.cancelled += len(later)
                    for i in [i for i in results if i > r.index]:
                        del results[i]
                        out.discarded += 1
            if in_flight and clock() >= deadline:
                executor.cancel(list(in_flight))
                out.cancelled += len(in_flight)
                in_flight.clear()
                out.stopped = out.stopped or "deadline"
        if not out.stopped:
            out.stopped = ("deadline" if clock() >= deadline else "exhausted" if exhausted else "max-shards")
    finally:
        executor.cancel(list(in_flight))
        out.seconds = clock() - start
        if progress is not None:
            progress.close()
    return out


def grouped_errors(errors: list[dict[str, str]]) -> list[tuple[str, str]]:
    """Shard errors with the same text as one entry (a server that died fails every later shard of its
    leg alike), in order of first appearance: ("shard", error) or ("N shards, first … last", error)."""
    by_error: dict[str, list[str]] = {}
    for e in errors:
        by_error.setdefault(e["error"], []).append(e["shard"])
    return [(names[0] if len(names) == 1 else f"{len(names)} shards, {names[0]} … {names[-1]}", error)
            for error, names in by_error.items()]


def summarize(cfg: CampaignConfig, legs: Legs, outcome: Outcome, where: str, workers: int) -> dict[str, Any]:
    """The JSON summary: everything but the "timing" key is the same for the same seed and shard limit."""
    results = [outcome.results[i] for i in sorted(outcome.results)]
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        mine = [r for r in results if r.kind == kind]
        entry: dict[str, Any] = {"shards": len(mine), **{k: sum(getattr(r, k) for r in mine) for k in COUNT_KEYS}}
        if kind in legs.skipped:
            entry["status"], entry["reason"] = "skipped", legs.skipped[kind]
        elif kind not in cfg.kinds:
            entry["status"], entry["reason"] = "not selected", "left out by --kinds"
        elif mine:
            entry["status"] = "ran"
        else:
            entry["status"] = "not reached" if outcome.first_failing is not None else "no shard completed"
        kinds[kind] = entry
    findings: list[Finding] = [f for r in results for f in r.findings]
    errors = [{"shard": r.name, "error": r.error} for r in results if r.error]
    reasons: list[str] = []
    if findings:
        verdict = "failed"
        reasons.append(f"{len(findings)} counterexample(s) in shard {results[-1].name}")
    else:
        if not results:
            reasons.append("no shard completed")
        reasons += [f"{k}: skipped ({why})" for k, why in legs.skipped.items()]
        reasons += [f"{k}: no shard completed" for k, e in kinds.items()
                    if e["status"] == "no shard completed" and results]
        reasons += [f"{shards}: {error}" for shards, error in grouped_errors(errors)]
        verdict = "unknown" if reasons else "passed"
    prefix = 0
    while prefix in outcome.results:
        prefix += 1

    def rate(n: int) -> float | None:
        return round(n / outcome.seconds, 1) if outcome.seconds > 0 else None

    return {
        "format": SUMMARY_FORMAT, "version": 1, "seed": cfg.seed, "verdict": verdict, "reasons": reasons,
        "stopped": outcome.stopped, "plant": cfg.plant, "maxShards": cfg.max_shards,
        "shards": {"run": len(results), "completePrefix": prefix,
                   "list": [{"index": r.index, "name": r.name, "seeds": list(r.seeds), **r.counts(),
                             "findings": len(r.findings), **({"error": r.error} if r.error else {})}
                            for r in results]},
        "kinds": kinds,
        "findings": [f.to_json(f"traces/{f.trace_name}") for f in findings],
        "errors": errors,
        "timing": {"seconds": round(outcome.seconds, 3), "where": where, "workers": workers,
                   "minutes": cfg.minutes, "discarded": outcome.discarded, "cancelled": outcome.cancelled,
                   "stepsPerSecond": rate(sum(r.steps for r in results)),
                   "statesPerSecond": rate(sum(r.states for r in results)),
                   "shardSeconds": round(sum(r.seconds for r in results), 3)},
    }


class UnusableOutput(ValueError):
    """--out names a directory the campaign cannot make its own (exit 2, before any work)."""


LOCK_NAME = ".campaign.lock"


@contextlib.contextmanager
def owned(out: Path) -> Iterator[None]:
    """Hold `out`/.campaign.lock (an flock) while the campaign runs: a second campaign on the same
    directory is refused (exit 2) instead of clearing and overwriting the first one's results. The
    lock file is never followed through a symlink, nor opened if it is not a regular file."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as e:
        raise UnusableOutput(f"cannot use {visible(str(path))} as the campaign's lock: {e.strerror}") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnusableOutput(f"{visible(str(path))} is not a regular file; choose another --out or remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise UnusableOutput(f"another campaign{f' (pid {holder})' if holder.isdigit() else ''} is writing "
                                 f"to {visible(str(out))}; wait for it or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def clear_previous(out: Path, check_only: bool = False) -> None:
    """Remove what an earlier campaign wrote to `out` (summary.json, traces/ and its trace files), so
    that afterwards `out` holds this campaign's results or nothing (decisions Q-125): a campaign that
    passes, or dies before its summary, leaves no earlier counterexample or verdict to be read as its
    own. Anything there that a campaign does not write is left alone and refused, before any work."""
    summary, traces = out / "summary.json", out / "traces"
    strays: list[Path] = []
    if summary.is_symlink() or (summary.exists() and not summary.is_file()):
        strays.append(summary)
    trace_files: list[Path] = []
    if traces.is_symlink() or (traces.exists() and not traces.is_dir()):
        strays.append(traces)
    elif traces.is_dir():
        for entry in sorted(traces.iterdir()):
            ours = entry.is_file() and not entry.is_symlink() and TRACE_NAME.fullmatch(entry.name)
            (trace_files if ours else strays).append(entry)
    if strays:
        raise UnusableOutput(f"{out} holds {', '.join(visible(str(p)) for p in strays[:5])}"
                             f"{f' and {len(strays) - 5} more' if len(strays) > 5 else ''}, which a campaign does "
                             "not write; choose another --out or move them")
    if check_only:
        return
    try:
        for path in trace_files:
            path.unlink()
        if traces.is_dir():
            traces.rmdir()
        summary.unlink(missing_ok=True)
    except OSError as e:
        raise UnusableOutput(f"cannot clear the previous campaign's results in {out}: {e.strerror}") from e


def write(summary: dict[str, Any], findings: list[Finding], out: Path) -> Path:
    """The traces under out/traces/ and the summary as out/summary.json; returns the summary's path."""
    out.mkdir(parents=True, exist_ok=True)
    traces = out / "traces"
    if findings:
        traces.mkdir(exist_ok=True)
    for f in findings:
        stdio.write_report(traces / f.trace_name, f.trace_text)
    path = out / "summary.json"
    stdio.write_report(path, json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def report(summary: dict[str, Any], summary_path: Path, out: TextIO | None = None) -> None:
    out = out if out is not None else sys.stdout
    t = summary["timing"]
    print(f"qlwf campaign: seed {summary['seed']} on {t['where']}, stopped by {summary['stopped']} after "
          f"{t['seconds']:.1f} s", file=out)
    for kind, e in summary["kinds"].items():
        if e["status"] == "ran":
            counts = ", ".join(f"{e[k]} {k}" for k in COUNT_KEYS if e[k])
            print(f"  {kind:17} {e['shards']} shard(s): {counts}", file=out)
        else:
            why = e.get("reason", "stopped at the counterexample" if e["status"] == "not reached" else "")
            print(f"  {kind:17} {e['status']}" + (f": {why}" if why else ""), file=out)
    root = summary_path.parent
    for f in summary["findings"]:
        path = root / f["trace"]
        print(f"  COUNTEREXAMPLE {f['shard']}: {f['message']}", file=out)
        print(f"    trace:  {path}", file=out)
        print(f"    replay: {f['replay'].replace('TRACE', str(path))}", file=out)
    for shards, error in grouped_errors(summary["errors"]):
        print(f"  ERROR {shards}: {error}", file=out)
    why = f" ({'; '.join(summary['reasons'])})" if summary["reasons"] else ""
    print(f"qlwf campaign: {summary['verdict'].upper()}{why}; summary {summary_path}", file=out)


EXIT = {"passed": 0, "failed": 1, "unknown": 3}


def campaign(cfg: CampaignConfig, make_executor: Callable[[], Executor], out: TextIO | None = None,
             progress_stream: TextIO | None = None, live: bool | None = None) -> tuple[int, dict[str, Any]]:
    """Provision, clear the previous results, drive, summarize, write; the exit code and the summary.

    What would stop the campaign as bad usage (files it does not own in `out`, a cluster it cannot
    use) stops it before `out` is touched; the previous results are cleared only under the lock."""
    clear_previous(cfg.out, check_only=True)
    legs = prepare_legs(cfg)
    with contextlib.ExitStack() as stack:
        executor = make_executor()
        stack.callback(executor.close)
        stack.enter_context(owned(cfg.out))
        clear_previous(cfg.out)
        outcome = drive(cfg, legs, executor, CampaignProgress(cfg, progress_stream, live=live))
        summary = summarize(cfg, legs, outcome, executor.where, executor.workers)
        findings = [f for i in sorted(outcome.results) for f in outcome.results[i].findings]
        path = write(summary, findings, cfg.out)
    report(summary, path, out)
    return EXIT[summary["verdict"]], summary
