"""What an exploration found and counted: findings (with their counterexample traces), per-shape and
total counts, and the counts the manifest (conformance/checkers/explore_manifest.json) pins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qlwf.model.records import Record

from .alphabet import TraceStep
from .shapes import INITIAL_CLOCK, SELECTED, shape_name


@dataclass
class Finding:
    shape: str
    kind: str  # "invariant" | "LIVE-1" | "no-write" | "postcondition" | "incremental"
    message: str
    trace_steps: list[TraceStep]

    def trace(self) -> Record:
        return {"format": "qlwf-trace", "version": 1,
                "description": f"explorer counterexample, shape {self.shape}: {self.kind}: {self.message}",
                "initialClock": INITIAL_CLOCK, "steps": self.trace_steps}


@dataclass
class ShapeReport:
    shape: str
    distinct_states: int = 0
    transitions: int = 0
    refusals: int = 0
    checked_variants: int = 0  # detailed variants of explored states, invariant-checked but not expanded
    depth: int = 0
    cross_checked: int = 0  # states whose incremental evaluation was compared with a full one (Config.cross_check)
    drains: int = 0  # LIVE-1 drains run; the other explored states took a passed verdict from LivenessMemo
    slept: int = 0  # choices not taken because asleep (Config.reduction "sleep")
    reexpanded: int = 0  # states expanded again because reached with a smaller sleep set
    seconds: float = 0.0  # wall time of this shape's search (in its worker process)
    findings: list[Finding] = field(default_factory=list)
    rules: set[str] = field(default_factory=set)
    observed: set[str] = field(default_factory=set)


@dataclass
class ExploreReport:
    max_steps: int
    shapes: list[ShapeReport]
    seconds: float

    @property
    def distinct_states(self) -> int:
        return sum(s.distinct_states for s in self.shapes)

    @property
    def transitions(self) -> int:
        return sum(s.transitions for s in self.shapes)

    @property
    def refusals(self) -> int:
        return sum(s.refusals for s in self.shapes)

    @property
    def checked_variants(self) -> int:
        return sum(s.checked_variants for s in self.shapes)

    @property
    def depth(self) -> int:
        return max((s.depth for s in self.shapes), default=0)

    @property
    def slept(self) -> int:
        return sum(s.slept for s in self.shapes)

    @property
    def reexpanded(self) -> int:
        return sum(s.reexpanded for s in self.shapes)

    @property
    def cross_checked(self) -> int:
        return sum(s.cross_checked for s in self.shapes)

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.shapes for f in s.findings]

    @property
    def rules(self) -> set[str]:
        return set().union(*(s.rules for s in self.shapes)) if self.shapes else set()

    @property
    def observed(self) -> set[str]:
        return set().union(*(s.observed for s in self.shapes)) if self.shapes else set()

    def summary(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "shapes": len(self.shapes), "distinct_states": self.distinct_states,
                "transitions": self.transitions, "refusals": self.refusals, "checked_variants": self.checked_variants,
                "depth": self.depth,
                "seconds": round(self.seconds, 3),
                "states_per_second": round(self.distinct_states / self.seconds, 1) if self.seconds else None,
                "violations": len(self.findings)}


COUNT_KEYS = ("distinct_states", "transitions", "refusals", "checked_variants", "depth")


def shape_size(name: str) -> int:
    return int(name.split(":", 1)[0])


def manifest_counts(report: ExploreReport) -> dict[str, Any]:
    """Per-shape counts, the totals for every K up to report.max_steps, the totals of the selected
    families of larger K the report explored, and the multi-workflow scopes' counts ("workflows")
    (conformance/checkers/explore_manifest.json)."""
    counts = {r.shape: {k: getattr(r, k) for k in COUNT_KEYS} for r in report.shapes}
    return counts_of_shapes({name: c for name, c in counts.items() if "x" not in name}, report.max_steps,
                            {name: c for name, c in counts.items() if "x" in name})


def _total(rows: list[dict[str, int]]) -> dict[str, int]:
    total = {key: (max if key == "depth" else sum)(c[key] for c in rows) for key in COUNT_KEYS}
    total["shapes"] = len(rows)
    return total


def counts_of_shapes(shapes: dict[str, dict[str, int]], max_steps: int,
                     workflows: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """The manifest's totals for K = 1..max_steps over per-shape counts (every shape of K steps or fewer),
    for each selected K beyond max_steps whose family is all among the shapes that family's totals,
    and the multi-workflow scopes' counts as given."""
    totals = {str(k): _total([c for name, c in shapes.items() if shape_size(name) <= k])
              for k in range(1, max_steps + 1)}
    selected = {}
    for k, (family, members) in sorted(SELECTED.items()):
        names = [shape_name(s) for s in members(k)]
        if k > max_steps and all(n in shapes for n in names):
            selected[str(k)] = {"family": family, **_total([shapes[n] for n in names])}
    return {"totals": totals, **({"selected": selected} if selected else {}), "shapes": shapes,
            **({"workflows": workflows} if workflows else {})}
