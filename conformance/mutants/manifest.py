"""The one list of mutants (model, proofs, storage), checked for a well-formed entry at import."""

from __future__ import annotations

from .base import BEHAVIOURAL, CHANGE_DETECTORS, CHECKS, LAYERS, Mutant, NotPlanted, Patcher
from .model_rules import MUTANTS as MODEL_RULE_MUTANTS
from .proof_layer import MUTANTS as PROOF_MUTANTS
from .storage import MUTANTS as STORAGE_MUTANTS

__all__ = ["BEHAVIOURAL", "CHANGE_DETECTORS", "CHECKS", "LAYERS", "MANIFEST", "Mutant", "NotPlanted", "Patcher",
           "by_check", "by_name", "problems"]

# From the submodules, never through the package (`from . import model_rules`): the package's
# __init__ re-exports this module, and importing it back would be a cycle.
MANIFEST: tuple[Mutant, ...] = (*MODEL_RULE_MUTANTS, *PROOF_MUTANTS, *STORAGE_MUTANTS)


def problems(mutants: tuple[Mutant, ...] = MANIFEST) -> list[str]:
    """Why an entry cannot count: unknown layer or check, a change detector (or any other
    non-behavioural kind) as the catching evidence, a kind its check cannot produce, a duplicate name."""
    out = []
    seen: set[str] = set()
    for m in mutants:
        if m.name in seen:
            out.append(f"{m.name}: duplicate name")
        seen.add(m.name)
        if m.layer not in LAYERS:
            out.append(f"{m.name}: unknown layer {m.layer!r}")
        if m.kind not in BEHAVIOURAL:
            out.append(f"{m.name}: caught by {m.kind!r}, which is not a behavioural check")
        if m.check not in CHECKS:
            out.append(f"{m.name}: unknown check {m.check!r}")
        elif m.kind not in CHECKS[m.check]:
            out.append(f"{m.name}: {m.check} cannot fail with {m.kind!r} evidence")
        if not m.breaks.strip():
            out.append(f"{m.name}: names no rule it breaks")
    return out


def by_name(name: str) -> Mutant:
    return next(m for m in MANIFEST if m.name == name)


def by_check(*checks: str) -> tuple[Mutant, ...]:
    return tuple(m for m in MANIFEST if m.check in checks)
