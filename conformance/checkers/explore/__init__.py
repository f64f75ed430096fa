"""Exhaustive small-scope exploration of the whole-system model (README §7, state-machines.md §9–§10).

For every DAG shape with 1..K steps (isomorphic DAGs explored once, through a canonical form) a
breadth-first search admits one workflow (or `Config.workflows` side by side) and applies every
choice that matters to every reachable state, checking INV-1..31 and LIVE-1 (the drain of
conformance/checkers/liveness.py) on every explored state (`qlwf explore`; the expected counts are
pinned in conformance/checkers/explore_manifest.json).

Modules:
* `shapes`: DAG shapes up to isomorphism, their names, the selected larger families, a shape's plan;
* `abstraction`: the state identity that makes the space finite, and the symmetry reduction over a
  shape's automorphisms (canonical state keys);
* `alphabet`: the bounded choices offered in a state (the command alphabet) and the time discipline;
* `search`: the breadth-first search of one shape, with the optional sleep-set reduction (`Config`,
  `explore_shape`);
* `parallel`: the same search of one scope split across processes, level by level;
* `driver`: what `explore(cfg)` explores, in which order and how many processes;
* `report`: findings, per-shape and total counts, and the counts the manifest pins.

Every public name (and the few private ones the review and the tests reach for) is re-exported here,
so importers keep `from qlwf.conformance.checkers.explore import X`.

Layer: conformance (may import `qlwf.model`, `qlwf.proofs`; inside conformance `processes`).
"""

from __future__ import annotations

from ..liveness import drain
from .abstraction import (
    Key,
    Symmetry,
    _attempts_by_step,
    _rename,
    abstract_state,
    automorphisms,
    canonical_key,
    canonical_renaming,
    collapse,
    detailed_state,
    run_renamings,
)
from .alphabet import (
    ALPHABETS,
    CANCEL_ACTOR,
    COUPLING,
    FULL,
    LEASE_MS,
    PAIR,
    TIMEOUT_MS,
    WORKERS,
    Action,
    Alphabet,
    TraceStep,
    _timers,
    action_label,
    action_run,
    actions,
    alphabet_name,
    attempt_actions,
    attempt_ordinals,
    coupling_alphabet,
    default_alphabet,
    full_alphabet,
    independent,
    pair_alphabet,
    replay_actions,
    run_actions,
    take,
    time_actions,
)
from .driver import _explore_one, dispatch_order, explore, scope_work, splits
from .parallel import explore_shape_partitioned
from .report import COUNT_KEYS, ExploreReport, Finding, ShapeReport, counts_of_shapes, manifest_counts, shape_size
from .search import (
    NO_WRITE,
    REDUCED,
    REDUCTIONS,
    Checker,
    Config,
    Identities,
    LivenessMemo,
    Observer,
    explore_shape,
)
from .shapes import (
    INITIAL_CLOCK,
    MAX_SHAPE_STEPS,
    MAX_WORKFLOWS,
    PLAN_ID,
    RUN_ID,
    SCOPE_ALPHABETS,
    SELECTED,
    WORKFLOW_SCOPES,
    Edge,
    Scope,
    Shape,
    build_plan,
    canonical_edges,
    chain,
    chains_and_diamonds,
    dag_shapes,
    parse_scope,
    parse_shape,
    scope_name,
    scope_shapes,
    shape_name,
    shape_needs,
    step_key,
    workflow_ids,
)

__all__ = [
    "ALPHABETS",
    "CANCEL_ACTOR",
    "COUNT_KEYS",
    "COUPLING",
    "FULL",
    "INITIAL_CLOCK",
    "LEASE_MS",
    "MAX_SHAPE_STEPS",
    "MAX_WORKFLOWS",
    "NO_WRITE",
    "PAIR",
    "PLAN_ID",
    "REDUCED",
    "REDUCTIONS",
    "RUN_ID",
    "SCOPE_ALPHABETS",
    "SELECTED",
    "TIMEOUT_MS",
    "WORKERS",
    "WORKFLOW_SCOPES",
    "Action",
    "Alphabet",
    "Checker",
    "Config",
    "Edge",
    "ExploreReport",
    "Finding",
    "Identities",
    "Key",
    "LivenessMemo",
    "Observer",
    "Scope",
    "Shape",
    "ShapeReport",
    "Symmetry",
    "TraceStep",
    "_attempts_by_step",
    "_explore_one",
    "_rename",
    "_timers",
    "abstract_state",
    "action_label",
    "action_run",
    "actions",
    "alphabet_name",
    "attempt_actions",
    "attempt_ordinals",
    "automorphisms",
    "build_plan",
    "canonical_edges",
    "canonical_key",
    "canonical_renaming",
    "chain",
    "chains_and_diamonds",
    "collapse",
    "counts_of_shapes",
    "coupling_alphabet",
    "dag_shapes",
    "default_alphabet",
    "detailed_state",
    "dispatch_order",
    "drain",
    "explore",
    "explore_shape",
    "explore_shape_partitioned",
    "full_alphabet",
    "independent",
    "manifest_counts",
    "pair_alphabet",
    "parse_scope",
    "parse_shape",
    "replay_actions",
    "run_actions",
    "run_renamings",
    "scope_name",
    "scope_shapes",
    "scope_work",
    "shape_name",
    "shape_needs",
    "shape_size",
    "splits",
    "step_key",
    "take",
    "time_actions",
    "workflow_ids",
]
