"""DAG shapes of the explored workflows, up to isomorphism, and the signed plan of a shape.

A shape is (number of steps, canonical need -> dependent edges); `dag_shapes` lists every DAG of n
steps once (through a canonical form), `SELECTED` names the families of larger K the manifest pins,
`build_plan` turns a shape into the plan the harness admits (one Run, `RUN_ID`, per shape).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from qlwf.model import tables as T
from qlwf.model.records import Record, sign_plan, task_definition_ref

Edge = tuple[int, int]
Shape = tuple[int, tuple[Edge, ...]]  # (number of steps, canonical need -> dependent edges)

INITIAL_CLOCK = 1_000_000
RUN_ID = "run-x"
PLAN_ID = "plan-x"
# A multi-workflow scope (Config.workflows) admits one Run of the shape per letter: run-x, run-y, run-z.
MAX_WORKFLOWS = 3


def workflow_ids(workflows: int) -> tuple[tuple[str, str], ...]:
    """(runId, planId) of each Run a scope of `workflows` admits; the first is (RUN_ID, PLAN_ID)."""
    if not 1 <= workflows <= MAX_WORKFLOWS:
        raise ValueError(f"{workflows} workflows: the explorer takes 1..{MAX_WORKFLOWS}")
    return tuple((f"run-{c}", f"plan-{c}") for c in "xyz"[:workflows])


def _d(c: str) -> str:
    return c * 64


def build_plan(run_id: str, plan_id: str, needs: dict[str, tuple[str, ...]], planned_at_ms: int,
               package: str = "demo-pkg") -> Record:
    """A signed plan (harness alphabet, records.md §3) whose step `k` needs `needs[k]`."""
    mrd = _d("3")
    steps = [{"stepRunId": f"{run_id}:{k}", "stepKey": k, "taskId": k, "taskDefinitionRef": task_definition_ref(mrd, k),
              "taskDefinitionDigest": _d("6"), "needs": sorted(n), "initialStatus": "pending" if n else "ready",
              "required": True} for k, n in needs.items()]
    target = {"projectId": "proj-1", "packageName": package, "installationId": "inst-1", "lockDigest": _d("1"),
              "generation": 1, "generationDigest": _d("2"), "materializedRevisionDigest": mrd,
              "publicationDigest": _d("4"), "workflowId": "nightly", "workflowDefinitionDigest": _d("5")}
    return sign_plan({"schema": T.SCHEMA_PLAN, "planId": plan_id, "runId": run_id, "target": target, "steps": steps,
                      "plannedAtMs": planned_at_ms})


# ------------------------------------------------------------------------------------------------
# DAG shapes up to isomorphism
def canonical_edges(n: int, edges: tuple[Edge, ...]) -> tuple[Edge, ...]:
    """The lexicographically least relabelling of `edges` over all permutations of n nodes."""
    return min(tuple(sorted((p[a], p[b]) for a, b in edges)) for p in itertools.permutations(range(n)))


# The largest shape the explorer takes (decisions Q-128). There are 302 shapes of 5 steps, listed in
# 0.04 s and explored to the end in about 23 minutes on two cores; 5,984 of 6, listed in about 5 s, for
# deadline-bound campaigns and --depth-bound searches; 243,668 of 7, whose listing alone relabels each in
# 5,040 ways (1.2 billion images: tens of minutes at the 6-step rate, with no output) before a search that
# could not end.
MAX_SHAPE_STEPS = 6


def dag_shapes(n: int) -> list[Shape]:
    """Every DAG on n nodes up to isomorphism (each DAG has a labelling with edges i -> j, i < j).

    Every such labelled edge set is visited in turn; the first of each isomorphism class is relabelled
    in every way, which gives its canonical form (the least image, as `canonical_edges` takes it) and
    every other labelling of the class with edges i -> j, i < j, which is then skipped (decisions Q-129)."""
    if n > MAX_SHAPE_STEPS:
        raise ValueError(f"shapes of {n} steps: the explorer takes at most {MAX_SHAPE_STEPS}")
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    bit = {pair: 1 << k for k, pair in enumerate(pairs)}
    # per relabelling, the image of each pair (by the pair's index)
    relabelled = [[(p[a], p[b]) for a, b in pairs] for p in itertools.permutations(range(n))]
    seen: set[int] = set()
    forms: list[tuple[Edge, ...]] = []
    for mask in range(1 << len(pairs)):
        if mask in seen:
            continue
        present = [k for k in range(len(pairs)) if mask >> k & 1]
        images = [sorted(map(image.__getitem__, present)) for image in relabelled]
        forms.append(tuple(min(images)))
        seen.update(sum(map(bit.__getitem__, image)) for image in images if all(a < b for a, b in image))
    return sorted(((n, f) for f in forms), key=lambda s: (len(s[1]), s[1]))


def chain(n: int) -> Shape:
    """The n-step chain a -> b -> ... (one step waits for the previous one)."""
    return n, canonical_edges(n, tuple((i, i + 1) for i in range(n - 1)))


def chains_and_diamonds(n: int) -> list[Shape]:
    """The n-step chain and the n-step diamonds: one source fanning out to m >= 2 middle steps that all
    join into one sink (1-m-1), the other n - m - 2 steps as a chain before the source, a chain after
    the sink, or free steps (each split once). For n = 5: the chain, the 1-3-1 diamond, and the 1-2-1
    diamond with a head, with a tail, or beside a free step. Ordered as dag_shapes orders shapes."""
    forms = {chain(n)[1]} if n > 1 else set()
    for m in range(2, n - 1):
        rest = n - m - 2
        for head in range(rest + 1):
            for tail in range(rest - head + 1):
                source = head
                middle = range(source + 1, source + 1 + m)
                sink = source + 1 + m
                edges = [(i, i + 1) for i in range(head)]  # the head chain ends in the source
                edges += [(source, j) for j in middle] + [(j, sink) for j in middle]
                edges += [(i, i + 1) for i in range(sink, sink + tail)]  # the rest of the nodes are free
                forms.add(canonical_edges(n, tuple(edges)))
    return sorted(((n, f) for f in forms), key=lambda s: (len(s[1]), s[1]))


def step_key(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i]


def shape_needs(shape: Shape) -> dict[str, tuple[str, ...]]:
    n, edges = shape
    return {step_key(j): tuple(sorted(step_key(a) for a, b in edges if b == j)) for j in range(n)}


def shape_name(shape: Shape) -> str:
    n, edges = shape
    return f"{n}:" + (",".join(f"{step_key(a)}>{step_key(b)}" for a, b in edges) or "-")


@functools.cache
def _shape_set(n: int) -> frozenset[Shape]:
    return frozenset(dag_shapes(n))


def parse_shape(text: str) -> Shape:
    """The shape a name describes, as `shape_name` writes it ("3:a>b,c>b", "2:-") or any relabelling of
    it ("3:b>c" is "3:a>b"): steps are the first N letters, edges need>dependent. ValueError says why
    a name describes no shape the explorer takes."""
    count, sep, edges_text = text.strip().partition(":")
    if not sep or not count.isdigit() or not 1 <= int(count) <= MAX_SHAPE_STEPS:
        raise ValueError(f"expected N:EDGES with 1 <= N <= {MAX_SHAPE_STEPS}, e.g. '2:a>b' or '3:-', got {text!r}")
    n = int(count)
    steps = {step_key(i): i for i in range(n)}
    edges: set[Edge] = set()
    for part in ([] if edges_text == "-" else edges_text.split(",")):
        need, arrow, dependent = part.strip().partition(">")
        if not arrow or need not in steps or dependent not in steps or need == dependent:
            raise ValueError(f"{part!r} in {text!r} is not an edge X>Y between two of the steps "
                             f"{', '.join(steps)}")
        edges.add((steps[need], steps[dependent]))
    form = canonical_edges(n, tuple(sorted(edges)))
    if (n, form) not in _shape_set(n):
        raise ValueError(f"{text!r} has a cycle: a workflow's steps form a DAG")
    return n, form


# Beyond every shape of K <= the manifest's largest K, chosen families of larger K (issue 15): their
# shapes' counts are pinned with the others and their totals under "selected".
SELECTED: dict[int, tuple[str, Callable[[int], list[Shape]]]] = {5: ("chains and diamonds", chains_and_diamonds)}


def scope_shapes(max_steps: int, selected: Iterable[int] = ()) -> tuple[Shape, ...]:
    """Every shape of 1..max_steps steps, then the selected families of the given larger K."""
    return (*(s for n in range(1, max_steps + 1) for s in dag_shapes(n)),
            *(s for k in selected for s in SELECTED[k][1](k)))



# ------------------------------------------------------------------------------------------------
# Multi-workflow scopes: W Runs of one shape admitted side by side (Config.workflows), named
# "WxSHAPE[@ALPHABET]" ("2x1:-", "2x1:-@coupling"). They are where Runs meet: the convergence page lists
# them all, a time step moves every lease. Without "@", the alphabet is the one for W x (the shape's
# steps) steps (alphabet.default_alphabet). The manifest pins their counts under "workflows"; which of
# them the gate explores is its choice (qlwf/gate/checks.py), the nightly job explores them all
# (docs/explorer-reduction.md "Scopes").
SCOPE_ALPHABETS: tuple[str, ...] = ("full", "pair", "coupling")  # alphabet.ALPHABETS by name
WORKFLOW_SCOPES: tuple[str, ...] = ("2x1:-@coupling", "2x1:-", "3x1:-", "2x2:-", "2x2:a>b")


def scope_name(shape: Shape, workflows: int, alphabet: str | None = None) -> str:
    """`shape_name` for one Run, "WxSHAPE" for W Runs of the shape, "@ALPHABET" when one is named."""
    name = shape_name(shape) if workflows == 1 else f"{workflows}x{shape_name(shape)}"
    return name if alphabet is None else f"{name}@{alphabet}"


@dataclass(frozen=True)
class Scope:
    """W Runs of a shape, with a named alphabet or (None) the default one for their steps together."""

    shape: Shape
    workflows: int = 1
    alphabet: str | None = None

    @property
    def name(self) -> str:
        return scope_name(self.shape, self.workflows, self.alphabet)


def parse_scope(text: str) -> Scope:
    """The scope a name describes ("2x1:-", "3x1:-@coupling"; a plain shape name is one Run); ValueError
    says why a name describes none."""
    rest, at, alphabet = text.strip().partition("@")
    if at and alphabet not in SCOPE_ALPHABETS:
        raise ValueError(f"unknown alphabet {alphabet!r} in {text!r}: expected one of {', '.join(SCOPE_ALPHABETS)}")
    count, sep, shape = rest.partition("x")
    if not sep or ":" in count:
        return Scope(parse_shape(rest), 1, alphabet or None)
    if not count.isdigit() or not 1 <= int(count) <= MAX_WORKFLOWS:
        raise ValueError(f"expected WxSHAPE with 1 <= W <= {MAX_WORKFLOWS}, e.g. '2x1:-', got {text!r}")
    return Scope(parse_shape(shape), int(count), alphabet or None)
