"""The mutant manifest: every deliberately wrong variant of the system and the check that must catch it.

One entry per mutant (`manifest.MANIFEST`): the spec rule it breaks, the layer it lives in, the
check that must report it and the kind of evidence that check fails with. A mutant counts as caught
only through a behavioural check (an invariant, a contract or postcondition, a lockstep conformance
divergence, a proof, the oracle corpus); a pinned count, a stale generated file or a call-order
recording is a change detector and never enough. Mutants are planted through a `Patcher`
(monkeypatching, a patched copy of SQL text, a schema variant), never by editing a file in place.

Where the mutants live: model_rules (model rules and decision-table rows), proofs/mutants.py
(encodings and proof-side tables, kept next to the encoding it subclasses), storage (impl/commands,
both adapters' SQL, both schemas). The tests that run them: tests/conformance/mutants/test_mutants.py (model),
tests/proofs/test_proofs.py (proofs), tests/conformance/mutants/test_storage_mutants.py (storage).

Layer: conformance (may import `qlwf.model`, `qlwf.impl`, `qlwf.proofs`).
"""

from .manifest import (
    BEHAVIOURAL,
    CHANGE_DETECTORS,
    CHECKS,
    LAYERS,
    MANIFEST,
    Mutant,
    NotPlanted,
    Patcher,
    by_check,
    by_name,
)

__all__ = ["BEHAVIOURAL", "CHANGE_DETECTORS", "CHECKS", "LAYERS", "MANIFEST", "Mutant", "NotPlanted", "Patcher",
           "by_check", "by_name"]
