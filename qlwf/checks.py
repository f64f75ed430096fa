"""The checks `qlwf check` runs, in order. Each returns its `Evidence`; the gate judges it.

The evidence floors per check and profile are data: model/gate_evidence.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qlwf.gate import Check, Evidence, NoEvidence

REPO = Path(__file__).resolve().parent.parent


def load_script(path: Path, name: str) -> Any:
    """A repository script as a module under its own name: examples/ and docs/ both hold a
    `generate.py`, and one process (a test worker) may need both."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def spec_vectors(_opts: dict[str, Any]) -> Evidence:
    from qlwf.vectors import EXPECTED, mismatches

    bad = mismatches()
    problems = (f"{len(bad)} of {len(EXPECTED)} records.md §8 vectors differ\n" + "\n".join(bad),) if bad else ()
    return Evidence(f"{len(EXPECTED) - len(bad)} of {len(EXPECTED)} records.md §8 vectors reproduced",
                    {"vectors": len(EXPECTED) - len(bad)}, problems)


def oracle_examples(_opts: dict[str, Any]) -> Evidence:
    """Every example snapshot resolves, as does its ql3-shaped twin, and the files are what generate.py builds."""
    from qlwf.model.oracle import consult

    generate = load_script(REPO / "examples" / "generate.py", "qlwf_examples_generate")
    built = generate.build()
    problems: list[str] = []
    stale = [n for n, c in built.items() if (REPO / "examples" / n).read_text(encoding="utf-8")
             != generate.render(n, c)]
    if stale:
        problems.append(f"examples are stale (run python examples/generate.py): {stale}")
    prefixes = ("admit-workflow", "frontier", "cancel", "recover", "admit-attempt")
    resolved = twins = 0
    functions: set[str] = set()
    for name, content in built.items():
        fn = next((f for f in prefixes if name.startswith(f)), None)
        if fn is None:
            continue
        model_shaped = consult(fn, json.loads(json.dumps(content))).resolution
        resolved += 1
        functions.add(fn)
        problem = _ql3_twin_problem(fn, content, model_shaped)
        if problem is None:
            twins += 1
        else:
            problems.append(f"{name}: its ql3-shaped twin {problem}")
    return Evidence(f"{resolved} example snapshots and {twins} ql3-shaped twins resolve alike",
                    {"snapshots": resolved, "ql3_twins": twins, "functions": len(functions)}, tuple(problems))


def _ql3_twin_problem(fn: str, content: Any, model_shaped: dict[str, Any]) -> str | None:
    """The ql3 twin (generic attempt keys, no leaseVersion, reversed key order) must resolve to the
    same records, except that its attempt copies keep the input's keys (records.md §6.7)."""
    from qlwf.conformance.ql3_shape import ql3_input
    from qlwf.model.canonical import canonical_text
    from qlwf.model.errors import QlwfError
    from qlwf.model.oracle import consult

    try:
        twin = consult(fn, ql3_input(fn, json.loads(json.dumps(content)))).resolution
    except QlwfError as e:
        return f"is rejected: {e.code} {e.reason}: {e.message}"

    def comparable(res: dict[str, Any]) -> str:
        # Attempt copies legitimately differ (they keep the ql3 keys); Run copies differ in key order.
        skip = {"attemptTransitions", "attempt", "run"}
        return canonical_text({k: v for k, v in res.items() if k not in skip})

    if comparable(twin) != comparable(model_shaped):
        return "resolves differently"
    return None


def _conformance(backend: str, corpus: bool, traces: int, seed: int) -> Evidence:
    from qlwf.conformance import runner

    parts = []
    if corpus:
        parts.append(runner.run_traces(backend, runner.corpus_traces()))
    if traces:
        parts.append(runner.run_generated(backend, traces, seed, jobs=2, invariants_every_step=False))
    failures = [r for p in parts for r in p.failures]
    problems: tuple[str, ...] = ()
    if failures:
        first = failures[0]
        if first.divergence is not None:  # saved, so the report can print the `qlwf show` command
            runner.save_divergence(first.divergence, backend)
        report = first.divergence.render() if first.divergence else "diverged"
        problems = (f"{len(failures)} trace(s) diverge on {backend}; first: {first.trace}\n{report}",)
    counts = {"corpus_traces": len(parts[0].results) if corpus else 0,
              "traces": sum(len(p.results) for p in parts), "steps": sum(p.steps for p in parts),
              "invariant_checks": sum(p.invariant_checks for p in parts),
              "rule_rows_covered": len(runner.covered_rule_rows(parts))}
    return Evidence("; ".join(p.line() for p in parts) or "no traces", counts, problems)


def conform_sqlite(opts: dict[str, Any]) -> Evidence:
    """The golden corpus and seeded generated traces in lockstep with the model on SQLite."""
    return _conformance("sqlite", True, 60 if opts.get("quick") else 300, 20261129)


def faults_sqlite(opts: dict[str, Any]) -> Evidence:
    """Lost commit responses (every writing command retried) and crashes before every statement."""
    from qlwf.conformance import runner
    from qlwf.conformance.crashes import CrashStats, run_with_crashes
    from qlwf.conformance.lost_commits import replay_violations, with_lost_commits

    corpus = runner.corpus_traces()
    problems: list[str] = []
    replays = [v for t in corpus if (v := replay_violations(t))]
    if replays:
        problems.append("the model breaks the replay principle\n" + "\n".join(replays[0]))
    doubled = runner.run_traces("sqlite", [with_lost_commits(t) for t in corpus])
    if not doubled.passed:
        d = doubled.failures[0].divergence
        problems.append("lost-commit retries diverge\n" + (d.render() if d else ""))
    stats = CrashStats()
    crashed = corpus[: 2 if opts.get("quick") else 5]
    for trace in crashed:
        result = run_with_crashes(trace, stats)
        if not result.passed:
            problems.append(f"crash injection on {trace.name}\n" + (result.divergence.render()
                                                                     if result.divergence else ""))
    counts = {"lost_commit_traces": len(doubled.results), "lost_commit_steps": doubled.steps,
              "crash_traces": len(crashed), "crash_commands": stats.commands, "crash_points": stats.crash_points}
    return Evidence(f"{len(corpus)} corpus traces with every writing command retried; {stats.crash_points} crash "
                    f"points in {stats.commands} commands atomic (kill + abort)", counts, tuple(problems))


def exec_sqlite(opts: dict[str, Any]) -> Evidence:
    """The corpus and a few generated traces through `python -m qlwf.impl.sqlite.driver` (qlwf-backend@1)."""
    from qlwf.conformance.exec_process import DriverFailure

    try:
        return _conformance("exec-sqlite", True, 8 if opts.get("quick") else 24, 20261129)
    except DriverFailure as e:  # the run stops at a broken driver: a failure with the driver's report
        return Evidence("the SQLite driver broke the protocol", {}, (f"exec-sqlite: {e}",))


def proofs(opts: dict[str, Any]) -> Evidence:
    """Every Z3 property (invariants inductive, tables total/deterministic, LIVE-1, pages, BMC)."""
    from qlwf.proofs.runner import ALL_PROPERTIES, Options, run

    bound = 3 if opts.get("quick") else 5
    results = run(Options(bound=bound, depth=4))
    bad = [r for r in results if r.result != "proved"]
    problems = (f"{len(bad)} of {len(results)} properties not proved at bound {bound}\n"
                + "\n".join(f"{r.name}: {r.result}" for r in bad),) if bad else ()
    ran = [r.name for r in results]
    gaps = () if sorted(ran) == sorted(ALL_PROPERTIES) else (
        f"the properties run differ from the registry: missing {sorted(set(ALL_PROPERTIES) - set(ran))}, "
        f"extra {sorted(set(ran) - set(ALL_PROPERTIES))}",)
    return Evidence(f"{len(results) - len(bad)} properties proved for every workflow of up to {bound} steps",
                    {"properties_proved": len(results) - len(bad), "bound": bound}, problems, gaps)


def explorer_manifest(opts: dict[str, Any]) -> Evidence:
    """Exhaustive exploration of every DAG shape up to K steps matches the pinned manifest."""
    from qlwf.model.explore import Config, explore, manifest_counts

    k = 2 if opts.get("quick") else 3
    report = explore(Config(max_steps=k, stop_on_violation=True))  # one finding fails the check
    counts = manifest_counts(report)["totals"][str(k)]
    from importlib import resources

    manifest = resources.files("qlwf.model").joinpath("explore_manifest.json").read_text(encoding="utf-8")
    pinned = json.loads(manifest)["totals"][str(k)]
    problems = []
    if report.findings:
        from qlwf.cmd_explore import write_counterexamples
        from qlwf.conformance.render import show_command, trace_dir

        saved = write_counterexamples(report.findings, trace_dir())
        problems.append(f"the explorer found {len(report.findings)} violation(s)\n"
                        + "\n".join(str(f) for f in report.findings[:5])
                        + "".join(f"\nrender it: {show_command(p)}" for p in saved))
    if counts != pinned:  # a change detector: the scope explored is no longer the one pinned
        problems.append(f"explorer counts for K={k} changed: {counts} != pinned {pinned}")
    return Evidence(f"K={k}: {counts['distinct_states']} states, {counts['transitions']} transitions, "
                    "all invariants and LIVE-1",
                    {"max_steps": k, "distinct_states": counts["distinct_states"],
                     "transitions": counts["transitions"]}, tuple(problems))


def _postgres(run: Any) -> Evidence:
    """Run a PostgreSQL leg. Without a server it has no evidence: unknown (use --skip postgres to leave
    the leg out on purpose); under CI=true the message says that the machine must provide one."""
    import os

    from qlwf.impl.postgres.server import PostgresUnavailable

    try:
        summary = run()
    except PostgresUnavailable as e:
        ci = " (CI=true: the CI machine must provide PostgreSQL)" if os.environ.get("CI") == "true" else ""
        raise NoEvidence(f"PostgreSQL leg cannot run{ci}: {e}") from e
    problems = ("\n".join([summary.line, *summary.details]),) if not summary.passed else ()
    return Evidence(summary.line, summary.evidence, problems)


def conform_postgres(opts: dict[str, Any]) -> Evidence:
    """The golden corpus and seeded generated traces in lockstep with the model on PostgreSQL."""
    from qlwf.conformance import concurrency_gate

    return _postgres(lambda: concurrency_gate.conform("postgres", True, 30 if opts.get("quick") else 120, 20261129))


def concurrency_postgres(opts: dict[str, Any]) -> Evidence:
    """K concurrent workers; the committed history must be a legal serial model behaviour."""
    from qlwf.conformance import concurrency_gate

    # The quick gate runs a short K=8 too: some faults (a clock read out of lock order) show only there.
    ks, ops = ((2, 4, 8), 40) if opts.get("quick") else ((2, 4, 8), 60)
    return _postgres(lambda: concurrency_gate.concurrency(ks, ops, 20261129))


# Quick kill budget: two short corpus traces that still run admission, task admission, claim,
# release, cancellation, convergence and the convergence page (the full gate kills the whole corpus).
QUICK_KILL_TRACES = ("adr0228-attempt-two-steps-parent-atomic", "adr0228-page-isolates-drifted-workflow")
SERVER_CRASH_TRACES = ("adr0228-partial-completion-final", "adr0226-failure-skips-chain")


def faults_postgres(opts: dict[str, Any]) -> Evidence:
    """Lost commit responses, a backend killed before every statement, server crashes on a durable cluster."""
    import os

    from qlwf.conformance import runner
    from qlwf.conformance.lost_commits import with_lost_commits
    from qlwf.conformance.pg_crashes import PgCrashStats, run_with_kills, run_with_server_crashes
    from qlwf.impl.postgres.server import PostgresUnavailable, ThrowawayCluster, find_pg_bin

    quick = bool(opts.get("quick"))
    problems: list[str] = []
    gaps: list[str] = []

    def rendered(what: str, result: Any) -> str:
        return f"{what}\n" + (result.divergence.render() if result.divergence else result.trace)

    corpus = runner.corpus_traces()
    kills, crashes = PgCrashStats(), PgCrashStats()
    try:
        doubled = runner.run_traces("postgres", [with_lost_commits(t) for t in corpus], invariants=False)
        if not doubled.passed:
            problems.append(rendered("lost-commit retries diverge on PostgreSQL", doubled.failures[0]))
        traces = [t for t in corpus if t.name in QUICK_KILL_TRACES] if quick else corpus
        problems += [rendered(f"backend kill on {r.trace}", r) for r in run_with_kills(traces, kills) if not r.passed]
        if find_pg_bin() is None:  # an external server (QLWF_PG_DSN) is not ours to crash
            gaps.append("server crashes not run: no local PostgreSQL binaries to start a durable cluster")
        else:
            with ThrowawayCluster(durable=True) as cluster:
                for trace in [t for t in corpus if t.name in SERVER_CRASH_TRACES[: 1 if quick else 2]]:
                    result = run_with_server_crashes(trace, crashes, cluster, every=4 if quick else 2)
                    if not result.passed:
                        problems.append(rendered(f"server crash on {trace.name}", result))
    except PostgresUnavailable as e:
        ci = " (CI=true: the CI machine must provide PostgreSQL)" if os.environ.get("CI") == "true" else ""
        raise NoEvidence(f"PostgreSQL leg cannot run{ci}: {e}") from e
    counts = {"lost_commit_traces": len(doubled.results), "kill_commands": kills.commands,
              "kill_points": kills.crash_points, "server_crashes": crashes.server_crashes}
    summary = (f"{len(doubled.results)} corpus traces with every writing command retried; {kills.crash_points} backend "
               f"kills in {kills.commands} commands atomic; {crashes.server_crashes} server crashes (stop -m "
               "immediate, fsync on) kept every acknowledged commit and no uncommitted write")
    return Evidence(summary, counts, tuple(problems), tuple(gaps))


CHECKS: list[Check] = [
    Check("spec-vectors", "records.md §8 identifier and digest vectors", spec_vectors),
    Check("oracle-examples", "examples/ snapshots (and their ql3-shaped twins) are current and resolve",
          oracle_examples),
    Check("proofs", "Z3: invariants, decision tables, LIVE-1, page bounds", proofs),
    Check("explorer", "every reachable state of every small DAG; counts match the manifest", explorer_manifest),
    Check("conform-sqlite", "corpus + generated traces, SQLite vs model, every step", conform_sqlite),
    Check("faults-sqlite", "lost commit responses and crashes at every statement boundary", faults_sqlite),
    Check("exec-sqlite", "corpus + generated traces through the SQLite driver process (qlwf-backend@1)", exec_sqlite),
    Check("conform-postgres", "corpus + generated traces, PostgreSQL vs model, every step", conform_postgres,
          leg="postgres"),
    Check("concurrency-postgres", "K = 2, 4, 8 workers; history replays through the model", concurrency_postgres,
          leg="postgres"),
    Check("faults-postgres", "lost commit responses, backend kills at every statement, server crashes",
          faults_postgres, leg="postgres"),
]
LEGS = tuple(sorted({c.leg for c in CHECKS}))
