"""Gate entry points of the backend checks (`qlwf check` calls these for every registered backend).

* `conform(backend, corpus=True, traces=N, seed=S)` — the golden corpus and N generated traces in
  lockstep with the model;
* `concurrency(ks=(2, 4, 8), ops=60, seed=S, backend=...)` — the concurrency check for each K
  (`qlwf.conformance.concurrency.harness.concurrency_check` for a single K), for a backend with the
  `concurrency` capability.

Both return a `GateSummary` (`passed`, a one-line `line`, `details`, and the `evidence` counts the
gate judges). A backend whose storage cannot be provided raises its provisioner's errors
(`BackendSpec.provisioner.guard()` turns them into `BackendUnavailable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from qlwf.conformance.concurrency.harness import concurrency_check
from qlwf.conformance.lockstep import runner


@dataclass
class GateSummary:
    passed: bool
    line: str
    details: list[str] = field(default_factory=list)
    evidence: dict[str, int] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)  # per K, why the server left its run unfinished


def conform(backend: str = "postgres", corpus: bool = True, traces: int = 100, seed: int = 0,
            jobs: int = 1) -> GateSummary:
    parts = []
    if corpus:
        parts.append(runner.run_traces(backend, runner.corpus_traces()))
    if traces:
        parts.append(runner.run_generated(backend, traces, seed, jobs=jobs))
    failures = [r for p in parts for r in p.failures]
    details = [failures[0].divergence.render()] if failures and failures[0].divergence else []
    evidence = runner.evidence_counts(parts, corpus)
    return GateSummary(not failures, "; ".join(p.line() for p in parts), details, evidence)


def concurrency(ks: Sequence[int] = (2, 4, 8), ops: int = 60, seed: int = 0, backend: str = "postgres") -> GateSummary:
    reports = [concurrency_check(k=k, ops=ops, seed=seed, backend=backend) for k in ks]
    details = [p for r in reports for p in r.problems]
    evidence = {"histories": len(reports), "max_workers": max((r.config.k for r in reports), default=0),
                "commits": sum(r.commits for r in reports), "transactions": sum(r.transactions for r in reports),
                # what the judge granted beyond `now` order: shown, never a threshold (concurrency_history)
                "placed_earlier": sum(r.placed_earlier for r in reports),
                "assumed_committed": sum(r.assumed_committed for r in reports)}
    unreachable = [f"K={r.config.k}: storage unreachable: {r.unreachable}" for r in reports if r.unreachable]
    # a run of no worker operation found nothing wrong: its (missing) evidence is for the floors to judge
    return GateSummary(all(r.passed or r.unchecked for r in reports), "; ".join(r.line() for r in reports), details,
                       evidence, unreachable)
