"""The breadth-first search over the explored identities of one shape, and the driver over many shapes.

Every reachable explored state is invariant-checked (INV-1..31) and drained for LIVE-1
(conformance/checkers/liveness.py); merged detailed variants are invariant-checked but not expanded.
With Config.reduction = "sleep" the search skips choices that commute with one already taken
(sleep sets, docs/explorer-reduction.md); the identities it visits and checks stay the same.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from qlwf.model.invariants import Violation, check_invariants, reusing_record_checks
from qlwf.model.state import State
from qlwf.model.system import advance_time, apply

from ..liveness import drain, lease_horizon
from .abstraction import Key, Symmetry, abstract_state, collapse, detailed_state
from .alphabet import (
    LEASE_MS,
    TIMEOUT_MS,
    Action,
    Alphabet,
    TraceStep,
    action_label,
    action_run,
    actions,
    alphabet_name,
    attempt_ordinals,
    default_alphabet,
    independent,
    take,
)
from .report import Finding, ShapeReport
from .shapes import (
    INITIAL_CLOCK,
    Shape,
    build_plan,
    scope_name,
    shape_needs,
    workflow_ids,
)

# "sleep": sleep sets (skip choices that commute with one taken); "runs": states up to permutations of the
# identical Runs of a multi-workflow scope; "sleep+runs" both. The default is "runs" (REDUCED): sleep sets
# are sound here but cost more CPU than the transitions they skip save (docs/explorer-reduction.md).
REDUCTIONS = ("none", "sleep", "runs", "sleep+runs")
REDUCED = "runs"
Label = tuple[Any, ...]  # an action as alphabet.action_label names it
NO_WRITE = frozenset({"existing", "idempotent", "leased", "not_eligible", "already_released", "already_starting",
                      "already_running", "already_terminal", "settled", "unchanged", "retry", "manual"})


@dataclass(frozen=True)
class Config:
    max_steps: int
    max_depth: int | None = None
    check_liveness: bool = True
    stop_on_violation: bool = False
    alphabet: Callable[[int], Alphabet] = default_alphabet
    shapes: tuple[Shape, ...] | None = None  # explore exactly these (default: every shape of 1..max_steps)
    lease_ms: int = LEASE_MS
    timeout_ms: int = TIMEOUT_MS
    # Evaluate the invariants incrementally: per-record parts are reused for the records a step left
    # untouched (model/invariants.py `reusing_record_checks`); False evaluates every state in full.
    incremental: bool = True
    # Also evaluate every checked state in full and report a disagreement as an `incremental` finding;
    # likewise drain every state whose LIVE-1 verdict was taken from the memo (reuse_liveness).
    cross_check: bool = False
    # LIVE-1 verdicts by the explored identity of the drain's starting point (see LivenessMemo).
    reuse_liveness: bool = True
    # REDUCTIONS: "sleep" skips choices that commute with one already taken, "runs" explores states up
    # to permutations of the Runs (docs/explorer-reduction.md); "none" takes every choice in every state
    # and keeps Runs apart. With one Run every reduction is the same search as "none", so the default
    # changes nothing there; "none" is the reference the reductions are tested against.
    reduction: str = REDUCED
    # Runs of the shape admitted side by side (run-x, run-y, ...): more than one is where the
    # reductions have work to skip (within one Run every choice is dependent, and nothing to swap).
    workflows: int = 1
    # Multi-workflow scopes ("2x1:-", shapes.WORKFLOW_SCOPES) explored after the shapes, in the same pool.
    workflow_scopes: tuple[str, ...] = ()


def _path(parents: dict[Key, tuple[Key | None, TraceStep]], key: Key) -> list[TraceStep]:
    steps: list[TraceStep] = []
    cur: Key | None = key
    while cur is not None:
        parent, step = parents[cur]
        steps.append(step)
        cur = parent
    return steps[::-1]


def _invariants(state: State, cfg: Config, report: ShapeReport) -> tuple[list[Violation], str | None]:
    """The violations of `state` and, under cfg.cross_check, how the full evaluation disagrees."""
    found = check_invariants(state)
    if not cfg.cross_check:
        return found, None
    with reusing_record_checks(False):
        full = check_invariants(state)
    report.cross_checked += 1
    if full == found:
        return found, None
    return found, f"incremental evaluation {[str(v) for v in found]} != full {[str(v) for v in full]}"


Identified = TypeVar("Identified", bound=Hashable)  # what LivenessMemo keys its verdicts by


class LivenessMemo(Generic[Identified]):
    """LIVE-1 verdicts of one shape, by the explored identity of the state the drain starts from.

    The drain first moves the clock to T* (every `leased` lease expired) and is a function of the
    state it reaches there; the explorer's abstraction is exact (module docstring), which is what
    lets it drain one representative per explored identity and not its merged variants. States
    whose T*-state has an identity already drained with a passing verdict therefore pass without a
    drain of their own: states that differ only in a live or expired lease, or a pending or passed
    deadline, reach the same T*-state. Only passing verdicts are kept, so every failure is found by
    a drain of its own state and reported with that drain's steps. `Config.cross_check` drains
    every reused state as well and reports a disagreement."""

    def __init__(self, identity: Callable[[State], Identified]) -> None:
        self.identity = identity
        self.passed: set[Identified] = set()

    def check(self, state: State, cfg: Config, report: ShapeReport) -> list[tuple[str, str, list[TraceStep]]]:
        start = None
        if cfg.reuse_liveness:
            start = self.identity(advance_time(state, lease_horizon(state) - state.clock))
            if start in self.passed and not cfg.cross_check:
                return []
        drained = drain(state)
        report.drains += 1
        if drained.ok:
            if start is not None:
                self.passed.add(start)
            return []
        found = [("LIVE-1", drained.explain(), list(drained.steps))]
        if start in self.passed:  # only under cross_check: the memo would have passed this state
            found.append(("incremental", f"LIVE-1 reused a passing verdict, the state's own drain fails: "
                                         f"{drained.failures}", list(drained.steps)))
        return found


def _check_state(state: State, cfg: Config, report: ShapeReport,
                 liveness: LivenessMemo[Any]) -> list[tuple[str, str, list[TraceStep]]]:
    violations, disagreement = _invariants(state, cfg, report)
    found: list[tuple[str, str, list[TraceStep]]] = [("invariant", str(v), []) for v in violations]
    if disagreement is not None:
        found.append(("incremental", disagreement, []))
    if cfg.check_liveness:
        found += liveness.check(state, cfg, report)
    return found


# `observer(state, step, outcome)` sees every committed command transition; what it returns is
# collected in ShapeReport.observed. A module-level function, so that it also works in --jobs workers.
Observer = Callable[[State, TraceStep, Any], Iterable[str]]
# `checker(state, step, outcome)` returns the postconditions one command transition violates (for
# example the harness's restatement of the command contracts); each becomes a finding.
Checker = Callable[[State, TraceStep, Any], list[str]]


def explore_shape(shape: Shape, cfg: Config, observer: Observer | None = None,
                  checker: Checker | None = None) -> ShapeReport:
    """Breadth-first search over every reachable explored state of one shape."""
    start = time.perf_counter()
    with reusing_record_checks(cfg.incremental):  # the explorer never mutates a record it holds
        report = _explore_shape(shape, cfg, observer, checker)
    report.seconds = time.perf_counter() - start
    return report


class _Sleep:
    """Sleep sets (docs/explorer-reduction.md), per explored identity, in the labels of `action_label`.

    `asleep[key]` holds the choices not (yet) taken from the identity: until its first expansion the
    intersection of the sleep sets of every arrival (BFS brings most arrivals before it), afterwards
    the sleep set it was expanded with, shrunk by later arrivals. An arrival after the expansion whose
    sleep set lacks some of those labels has the identity expanded again for exactly those choices
    (the standard fix for sleep sets under state caching)."""

    def __init__(self) -> None:
        self.asleep: dict[Key, frozenset[Label]] = {}
        self.expanded: set[Key] = set()

    def arrive(self, key: Key, labels: frozenset[Label]) -> frozenset[Label] | None:
        """Record an arrival with sleep set `labels`; the labels to take again, if any."""
        old = self.asleep.get(key)
        if old is None:
            self.asleep[key] = labels
            return None
        self.asleep[key] = old & labels
        missing = old - labels
        return missing if missing and key in self.expanded else None


def _check_reduction(cfg: Config) -> None:
    if cfg.reduction not in REDUCTIONS:
        raise ValueError(f"reduction {cfg.reduction!r}: expected one of {', '.join(REDUCTIONS)}")


def admit_scope(shape: Shape, cfg: Config, report: ShapeReport,
                observer: Observer | None) -> tuple[State, list[TraceStep]]:
    """Admit every Run of the scope (run-x, run-y, ...): the root of the search, the state after the
    last admission, and the admissions' trace steps, which start every path."""
    state = State(clock=INITIAL_CLOCK)
    steps: list[TraceStep] = []
    for run_id, plan_id in workflow_ids(cfg.workflows):
        plan = build_plan(run_id, plan_id, shape_needs(shape), INITIAL_CLOCK)
        admit: TraceStep = {"op": "command", "name": "admit_workflow", "args": {"plan": plan}}
        out = apply(state, {"name": "admit_workflow", "args": {"plan": plan}})
        if out.error is not None:
            raise RuntimeError(f"shape {report.shape} does not admit: {out.error}")
        report.rules |= set(out.rules)
        if observer is not None:
            report.observed.update(observer(state, admit, out))
        steps.append(admit)
        state = out.state
    return state, steps


# The identities cache keeps two generations of this many entries each: a full generation becomes the
# old one, and an entry found there is carried into the new one (it is only a cache: a miss recomputes
# the same keys, and an entry holds a few KB, so an unbounded cache outgrows the search itself).
IDENTITY_CACHE_GENERATION = 60_000

Identity = tuple[Key, Key, dict[str, str], bytes, bytes]


class Identities:
    """A state's identities in the search of one scope: (explored key, detailed key, the explored key's
    renaming, and both keys as bytes), the keys canonical under `symmetry` (abstraction.py). The bytes
    are the keys' reprs, exact for these tuples of str, int, bool and None: the partitioned search
    (parallel.py) keeps and ships them in place of the nested tuples."""

    def __init__(self, shape: Shape, cfg: Config) -> None:
        ids = workflow_ids(cfg.workflows)
        self.symmetry = Symmetry(shape, tuple(run_id for run_id, _ in ids),
                                 swap_runs="runs" in cfg.reduction.split("+"))
        self._new: dict[Key, Identity] = {}
        self._old: dict[Key, Identity] = {}

    def __call__(self, s: State) -> Identity:
        # Most transitions reach a detailed state seen before, often in the same labelling: one
        # lookup then replaces the two searches over the shape's automorphisms.
        detailed = detailed_state(s)
        keys = self._new.get(detailed)
        if keys is None:
            keys = self._old.get(detailed)
            if keys is None:
                keys = self._compute(detailed)
            if len(self._new) >= IDENTITY_CACHE_GENERATION:
                self._old, self._new = self._new, {}
            self._new[detailed] = keys
        return keys

    def _compute(self, detailed: Key) -> Identity:
        symmetry = self.symmetry
        explored = collapse(detailed)
        names = symmetry.renaming(explored)  # the explored identity's labelling
        explored = explored if symmetry.trivial else symmetry.rename(explored, names)
        canonical = symmetry.canonical(detailed)
        return explored, canonical, names, repr(explored).encode(), repr(canonical).encode()


def _explore_shape(shape: Shape, cfg: Config, observer: Observer | None, checker: Checker | None) -> ShapeReport:
    _check_reduction(cfg)
    report = ShapeReport(_report_name(shape, cfg))
    alphabet = cfg.alphabet(shape[0] * cfg.workflows)  # richness by the steps of every Run together
    state0, admissions = admit_scope(shape, cfg, report, observer)
    # The admissions before the last one sit in `parents` under synthetic keys, so that every path
    # starts with all of them.
    parents: dict[Key, tuple[Key | None, TraceStep]] = {}
    previous: Key | None = None
    for i, step in enumerate(admissions[:-1], start=1):
        parents[("admission", i)] = (previous, step)
        previous = ("admission", i)
    admit = admissions[-1]
    parts = set(cfg.reduction.split("+"))
    sleep = _Sleep() if "sleep" in parts and cfg.workflows > 1 else None  # one Run: nothing is independent
    identities = Identities(shape, cfg)
    symmetry = identities.symmetry

    def labels(s: State, names: dict[str, str], acts: Iterable[Action]) -> list[Label]:
        ordinals = attempt_ordinals(s)
        return [action_label(s, a, names, ordinals) for a in acts]

    liveness = LivenessMemo(lambda s: symmetry.canonical(abstract_state(s)))
    root, root_detail, root_names = identities(state0)[:3]
    parents[root] = (previous, admit)
    checked: set[Key] = {root_detail}
    if sleep is not None:
        sleep.arrive(root, frozenset())
    # (state, explored key, detailed key, its renaming, depth, labels to take again: None on the first expansion)
    queue: deque[tuple[State, Key, Key, dict[str, str], int, frozenset[Label] | None]] = deque(
        [(state0, root, root_detail, root_names, 0, None)])
    depths: dict[Key, int] = {root: 0}
    while queue:
        state, key, state_detail, names, depth, again = queue.popleft()
        if again is None:
            report.distinct_states += 1
            report.depth = max(report.depth, depth)
            for kind, message, extra in _check_state(state, cfg, report, liveness):
                report.findings.append(Finding(report.shape, kind, message, _path(parents, key) + extra))
            if report.findings and cfg.stop_on_violation:
                return report
        else:
            report.reexpanded += 1
        if cfg.max_depth is not None and depth >= cfg.max_depth:
            continue
        offered = actions(state, alphabet, cfg.lease_ms, cfg.timeout_ms)
        chosen: list[tuple[Action, list[Action]]] = [(a, []) for a in offered]
        if sleep is not None:
            # Skip the asleep choices (or, expanding again, take only the ones asked for); each taken
            # choice hands on the asleep and earlier taken choices that are independent of it.
            sleep.expanded.add(key)
            asleep_labels = sleep.asleep[key]
            runs = {id(a): action_run(state, a) for a in offered}
            asleep: list[Action] = []
            taken: list[Action] = []
            chosen = []
            # labels only matter when something is asleep or asked for (never within one Run)
            offered_labels = labels(state, names, offered) if asleep_labels or again else [()] * len(offered)
            for action, label in zip(offered, offered_labels, strict=True):
                if label in asleep_labels:
                    asleep.append(action)
                    report.slept += again is None
                    continue
                if again is None or label in again:
                    run = runs[id(action)]
                    chosen.append((action, [u for u in (*asleep, *taken) if independent(run, runs[id(u)])]))
                taken.append(action)
        for action, handed_on in chosen:
            new, outcome = take(state, action)
            report.transitions += 1
            if outcome is not None and checker is not None:
                report.findings += [Finding(report.shape, "postcondition", p, [*_path(parents, key), action.step])
                                    for p in checker(state, action.step, outcome)]
            if outcome is not None:
                if outcome.error is not None:
                    report.refusals += 1
                    if new is not state:
                        report.findings.append(Finding(report.shape, "no-write", f"error {outcome.error} changed "
                                                       "the state", [*_path(parents, key), action.step]))
                    continue
                report.rules |= set(outcome.rules)
                if observer is not None:
                    report.observed.update(observer(state, action.step, outcome))
                status = outcome.result.get("status") if outcome.result else None
                if status in NO_WRITE and new is not state:
                    report.findings.append(Finding(report.shape, "no-write", f"{status} changed the state",
                                                   [*_path(parents, key), action.step]))
            # A refusal or a replay hands back the very State it was given (model/system.py apply):
            # same identities, and nothing to check again (nor to expand again: a self-loop reaches
            # nothing the state's own expansion does not).
            again_labels = None
            if new is state:
                new_key, detail, new_names = key, state_detail, names
            else:
                new_key, detail, new_names = identities(new)[:3]
                if sleep is not None:  # the handed-on choices are enabled in `new` too: label them there
                    handed = frozenset(labels(new, new_names, handed_on)) if handed_on else frozenset()
                    again_labels = sleep.arrive(new_key, handed)
            if new_key not in parents:
                parents[new_key] = (key, action.step)
                depths[new_key] = depth + 1
                queue.append((new, new_key, detail, new_names, depth + 1, None))
            else:
                if detail not in checked:  # merged into an explored state: its own details are still checked
                    report.checked_variants += 1
                    violations, disagreement = _invariants(new, cfg, report)
                    path = [*_path(parents, key), action.step]
                    report.findings += [Finding(report.shape, "invariant", str(v), path) for v in violations]
                    if disagreement is not None:
                        report.findings.append(Finding(report.shape, "incremental", disagreement, path))
                if again_labels is not None:
                    queue.append((new, new_key, detail, new_names, depths[new_key], again_labels))
            checked.add(detail)
            if report.findings and cfg.stop_on_violation:
                return report
    return report


def _report_name(shape: Shape, cfg: Config) -> str:
    """The scope's name: the shape's for one Run; for several, with the alphabet when one is named."""
    return scope_name(shape, cfg.workflows, alphabet_name(cfg.alphabet) if cfg.workflows > 1 else None)
