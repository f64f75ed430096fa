"""The checks `qlwf check` runs, in order. Each returns its `Evidence`; the gate judges it.

The evidence floors per check and profile are data: qlwf/gate/evidence_floors.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qlwf.gate.verdict import Check, Evidence, NoEvidence

if TYPE_CHECKING:  # the checks import their machinery when they run
    from qlwf.conformance.lockstep.compare import LockstepResult

REPO = Path(__file__).resolve().parents[2]


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
    from qlwf.gate.vectors import EXPECTED, mismatches

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
    from qlwf.conformance.generate.ql3_shape import ql3_input
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


def _conformance(backend: str, corpus: bool, traces: int, seed: int, jobs: int = 2, *,
                 fail_fast: bool = False, seen: list[LockstepResult] | None = None) -> Evidence:
    """`fail_fast` (the self-test's): a corpus that already diverges settles the verdict, so the
    generated traces are not run. `seen` collects the diverging results as they arrive (they
    outlive a run that a broken backend aborts)."""
    from qlwf.conformance.lockstep import runner

    def keep(result: LockstepResult) -> None:
        if seen is not None and not result.passed:
            seen.append(result)

    parts = []
    if corpus:
        parts.append(runner.run_traces(backend, runner.corpus_traces(), on_result=keep))
    if traces and not (fail_fast and parts and parts[0].failures):
        parts.append(runner.run_generated(backend, traces, seed, jobs=jobs, on_result=keep))
    failures = [r for p in parts for r in p.failures]
    problems = (_divergence_problem(backend, failures),) if failures else ()
    counts = runner.evidence_counts(parts, corpus)
    return Evidence("; ".join(p.line() for p in parts) or "no traces", counts, problems)


def _divergence_problem(backend: str, failures: list[LockstepResult]) -> str:
    from qlwf.conformance.lockstep import runner

    first = failures[0]
    if first.divergence is not None:  # saved, so the report can print the `qlwf show` command
        runner.save_divergence(first.divergence, backend)
    report = first.divergence.render() if first.divergence else "diverged"
    return f"{len(failures)} trace(s) diverge on {backend}; first: {first.trace}\n{report}"


# ---- the backend checks: one per GateEntry of every registered backend (conformance/backends/) ----

def _conform_kind(backend: str, params: Mapping[str, Any], fail_fast: bool) -> Evidence:
    """The golden corpus (unless `corpus` is False) and seeded generated traces in lockstep with the model."""
    from qlwf.conformance.backends import SEED, BackendBroken

    seen: list[LockstepResult] = []
    try:
        return _conformance(backend, bool(params.get("corpus", True)), int(params.get("traces", 0)), SEED,
                            int(params.get("jobs", 1)), fail_fast=fail_fast, seen=seen)
    except BackendBroken as e:  # the run stops at a broken backend (a driver): a failure with its report
        # what diverged before it broke comes first: it is the earlier symptom, with its step and diff
        earlier = (_divergence_problem(backend, seen),) if seen else ()
        return Evidence(f"the {backend} backend broke its port", {}, (*earlier, f"{backend}: {e}"))


def _faults_kind(backend: str, params: Mapping[str, Any], quick: bool) -> Evidence:
    """Lost commit responses (every writing command retried), then the backend's crash harness, if any."""
    from qlwf.conformance import backends
    from qlwf.conformance.faults.lost_commits import replay_violations, with_lost_commits
    from qlwf.conformance.lockstep import runner

    spec = backends.get(backend)
    corpus = runner.corpus_traces()
    problems: list[str] = []
    replays = [v for t in corpus if (v := replay_violations(t))]
    if replays:
        problems.append("the model breaks the replay principle\n" + "\n".join(replays[0]))
    doubled = runner.run_traces(backend, [with_lost_commits(t) for t in corpus],
                                invariants=bool(params.get("invariants", True)))
    if not doubled.passed:
        d = doubled.failures[0].divergence
        problems.append(f"lost-commit retries diverge on {backend}\n"
                        + (d.render() if d else doubled.failures[0].trace))
    counts = {"lost_commit_traces": len(doubled.results), "lost_commit_steps": doubled.steps}
    summary = f"{len(doubled.results)} corpus traces with every writing command retried"
    gaps: tuple[str, ...] = ()
    if spec.has("crash_points"):
        crashes = spec.crash_harness()(quick)
        counts |= crashes.counts
        problems += crashes.problems
        gaps = tuple(crashes.gaps)
        summary += f"; {crashes.summary}"
    return Evidence(summary, counts, tuple(problems), gaps)


def _concurrency_kind(backend: str, params: Mapping[str, Any]) -> Evidence:
    """K concurrent workers; the committed history must be a legal serial model behaviour."""
    from qlwf.conformance.backends import SEED, BackendLost
    from qlwf.conformance.concurrency import gate as concurrency_gate

    summary = concurrency_gate.concurrency(tuple(params.get("ks", (2, 4, 8))), int(params.get("ops", 60)), SEED,
                                           backend=backend)
    if summary.unreachable and not summary.details:  # no history judged wrong, one the server left unfinished
        raise BackendLost("; ".join(summary.unreachable))
    problems = ("\n".join([summary.line, *summary.details]),) if not summary.passed else ()
    return Evidence(summary.line, summary.evidence, problems)


def _backend_check(backend: str, entry: Any) -> Callable[[dict[str, Any]], Evidence]:
    """The gate's run function of one GateEntry. Storage the backend cannot get or start here is no
    evidence (unknown; `--skip LEG` leaves the leg out on purpose); for storage that is not there at
    all, under CI=true, the message says that the machine must provide it."""
    from qlwf.conformance import backends

    def run(opts: dict[str, Any]) -> Evidence:
        spec = backends.get(backend)
        quick = bool(opts.get("quick"))
        params = entry.params(quick)
        try:
            with spec.provisioner.guard():
                if entry.kind == "conform":
                    return _conform_kind(backend, params, bool(opts.get("fail_fast")))
                if entry.kind == "faults":
                    return _faults_kind(backend, params, quick)
                return _concurrency_kind(backend, params)
        except backends.BackendUnavailable as e:
            raise NoEvidence(spec.requirement(f"{spec.name} leg cannot run: {e}")[1]) from e
        except backends.BackendMisconfigured as e:  # e.g. a throwaway cluster that will not start: no
            raise NoEvidence(f"{spec.name} leg cannot run: {e}") from e  # implementation ran
        except backends.BackendLost as e:  # the server went away mid-run: what it was doing is no evidence
            raise NoEvidence(f"{spec.name} leg lost its storage: {e}") from e

    run.__doc__ = entry.description
    return run


def backend_checks() -> list[Check]:
    """Every registered backend's gate checks, in registration order."""
    from qlwf.conformance import backends

    return [Check(entry.check, entry.description, _backend_check(spec.name, entry), leg=spec.leg,
                  owns_server=spec.provisioner is not backends.LOCAL)
            for spec in backends.specs() for entry in spec.gate]


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


EXPLORER_QUICK_K = 3
# multi-workflow scopes (explore.WORKFLOW_SCOPES, pinned under the manifest's "workflows"): the nightly job
# explores them all, the gate these (docs/explorer-reduction.md "Scopes")
EXPLORER_QUICK_WORKFLOWS = ("2x1:-@coupling",)  # two Runs meeting at the page, at the cost of a shape of K = 3
EXPLORER_FULL_WORKFLOWS = ("2x1:-", "3x1:-")
EXPLORER_JOBS = 2  # the report does not depend on it (explore() orders shapes as one process would)


def explorer_manifest(opts: dict[str, Any]) -> Evidence:
    """Exhaustive exploration of every DAG shape up to K steps (and, in the full profile, the selected
    families of larger K) matches the pinned manifest."""
    from importlib import resources

    from qlwf.conformance.checkers.explore import Config, explore, manifest_counts, scope_shapes
    from qlwf.conformance.stateful.postconditions import transition_problems

    path = resources.files("qlwf.conformance.checkers").joinpath("explore_manifest.json")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    totals, pinned_selected = manifest["totals"], manifest.get("selected", {})
    # quick: K=3 (incremental invariants on both cores; K=2 before issue 15); full: the manifest's largest K
    # over every shape, and its selected families of larger K (chains and diamonds of K=5)
    k = EXPLORER_QUICK_K if opts.get("quick") else max(int(n) for n in totals)
    selected = () if opts.get("quick") else tuple(sorted(int(n) for n in pinned_selected))
    jobs = min(EXPLORER_JOBS, os.cpu_count() or 1)
    # one finding fails the check; every committed transition is checked against its command's
    # postconditions too (the explorer's contract evidence, conformance/mutants: Q-84)
    scopes = EXPLORER_QUICK_WORKFLOWS if opts.get("quick") else EXPLORER_FULL_WORKFLOWS
    report = explore(Config(max_steps=k, shapes=scope_shapes(k, selected), workflow_scopes=scopes,
                            stop_on_violation=True), jobs=jobs, checker=transition_problems)
    explored = manifest_counts(report)
    counts = explored["totals"][str(k)]
    problems = []
    if report.findings:
        from qlwf.conformance.checkers.counterexamples import write_counterexamples
        from qlwf.conformance.report.render import show_command, trace_dir

        saved = write_counterexamples(report.findings, trace_dir())
        problems.append(f"the explorer found {len(report.findings)} violation(s)\n"
                        + "\n".join(str(f) for f in report.findings[:5])
                        + "".join(f"\nrender it: {show_command(p)}" for p in saved))
    # a change detector: the scope explored is no longer the one pinned
    if counts != totals[str(k)]:
        problems.append(f"explorer counts for K={k} changed: {counts} != pinned {totals[str(k)]}")
    beyond = [explored.get("selected", {}).get(str(n), {}) for n in selected]
    for n, got in zip(selected, beyond, strict=True):
        want = pinned_selected[str(n)]
        if got != want:
            problems.append(f"explorer counts for the selected K={n} changed: {got} != pinned {want}")
    pinned_workflows, got_workflows = manifest.get("workflows", {}), explored.get("workflows", {})
    for name in scopes:
        if not report.findings and got_workflows.get(name) != pinned_workflows.get(name):
            problems.append(f"explorer counts for the scope {name} changed: {got_workflows.get(name)} != pinned "
                            f"{pinned_workflows.get(name)}")
    parts = [*beyond, *(got_workflows.get(name, {}) for name in scopes)]
    summary = f"K={k}: {counts['distinct_states']} states, {counts['transitions']} transitions"
    summary += "".join(f"; K={n} {c['family']}: {c['distinct_states']} states, {c['transitions']} transitions"
                       for n, c in zip(selected, beyond, strict=True) if c)
    summary += "".join(f"; {name}: {got_workflows[name]['distinct_states']} states" for name in scopes
                       if name in got_workflows)
    return Evidence(f"{summary}; all invariants, postconditions and LIVE-1",
                    {"max_steps": k, "selected_max_steps": max(selected, default=k),
                     "distinct_states": counts["distinct_states"] + sum(c.get("distinct_states", 0) for c in parts),
                     "transitions": counts["transitions"] + sum(c.get("transitions", 0) for c in parts),
                     "workflow_scopes": sum(name in got_workflows for name in scopes)},
                    tuple(problems))


MODEL_CHECKS: list[Check] = [
    Check("spec-vectors", "records.md §8 identifier and digest vectors", spec_vectors),
    Check("oracle-examples", "examples/ snapshots (and their ql3-shaped twins) are current and resolve",
          oracle_examples),
    Check("proofs", "Z3: invariants, decision tables, LIVE-1, page bounds", proofs),
    Check("explorer", "every reachable state of every small DAG; counts match the manifest", explorer_manifest),
]
# The model's checks, then each registered backend's (conformance/backends/: GateEntry).
CHECKS: list[Check] = MODEL_CHECKS + backend_checks()
LEGS = tuple(sorted({c.leg for c in CHECKS}))
