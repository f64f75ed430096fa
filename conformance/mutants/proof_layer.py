"""Proof mutants as manifest entries: the encodings and proof-side tables of proofs/mutants.py.

The encodings stay in proofs/ (they subclass the encoding's rule hooks, and `qlwf prove --mutant`
builds them); the manifest adds the layer and the check. A table mutant mutates a decision table
the encoding reads, a disjunct mutant one transition rule of the encoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from qlwf.proofs import mutants as proof_mutants

from .base import Mutant, Patcher


def _planter(mutant: proof_mutants.Mutant) -> Callable[[Patcher], None]:
    def plant(mp: Patcher) -> None:
        """Every encoding the proof runner builds is the mutant's (how the self-test plants one)."""
        from qlwf.proofs import runner

        original = runner.build
        mp.setattr(runner, "build", lambda options: original(options if options.mutant is not None
                                                             else replace(options, mutant=mutant)))

    return plant


MUTANTS: tuple[Mutant, ...] = tuple(
    Mutant(m.name, m.description, "decision table" if m.tables else "proof encoding", "proofs", "proof",
           _planter(m), m)
    for m in proof_mutants.MUTANTS)
