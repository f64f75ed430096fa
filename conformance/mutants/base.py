"""What a manifest entry is: the layers, the checks and the kinds of evidence a mutant may be caught by."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Patcher(Protocol):
    """How a mutant is planted: pytest's MonkeyPatch fits (undone at teardown), as does a plain assigner
    in a forked child that dies with the mutant."""

    def setattr(self, target: Any, name: str, value: Any) -> None: ...

    def setitem(self, mapping: Any, name: Any, value: Any) -> None: ...


class NotPlanted(Exception):
    """The mutant's target (text, attribute, row) no longer exists: the manifest must be updated."""


LAYERS = ("model rule", "decision table", "proof encoding", "impl command sequence", "SQLite storage",
          "PostgreSQL storage", "schema")

# Evidence that a behaviour is wrong. Only these count as catching a mutant.
BEHAVIOURAL = frozenset({"invariant", "contract", "conformance", "proof", "oracle corpus"})
# Evidence that something changed. Useful, never sufficient (issue 11 §3).
CHANGE_DETECTORS = frozenset({"pinned count", "generated doc", "call order"})

# The checks that run manifest entries, with the kind of evidence each can fail with.
CHECKS: dict[str, frozenset[str]] = {
    "explorer": frozenset({"invariant", "contract"}),  # INV-n, LIVE-1, no-write and postconditions
    "stateful": frozenset({"invariant", "contract"}),  # the Hypothesis machine: invariants, postconditions
    "proofs": frozenset({"proof"}),  # Z3: the named property violated, decoded counterexample
    "conformance:sqlite": frozenset({"conformance"}),  # lockstep divergence (state, outcome or invariant)
    "conformance:postgres": frozenset({"conformance"}),
    "contract-test:sqlite": frozenset({"contract"}),  # a named test of tests/ asserting the spec's answer
    "cas-race:sqlite": frozenset({"contract"}),  # a change underneath must fail with concurrent_change
    "cas-race:postgres": frozenset({"contract"}),
    "schema-refusal:sqlite": frozenset({"contract"}),  # storage.md: the database refuses the violating row
    "schema-refusal:postgres": frozenset({"contract"}),
}


@dataclass(frozen=True)
class Mutant:
    """One manifest entry. `plant` applies the mutant through a patcher (None for proof mutants, which
    their check builds from `subject`); `subject` is the check's own handle on it (a proofs mutant,
    a CAS case id, a schema refusal case)."""

    name: str
    breaks: str  # the spec rule the mutant violates
    layer: str
    check: str  # the check that must catch it
    kind: str  # the evidence it must fail with (one of BEHAVIOURAL)
    plant: Callable[[Patcher], None] | None = None
    subject: Any = None

    @property
    def backend(self) -> str | None:
        return self.check.split(":", 1)[1] if ":" in self.check else None
