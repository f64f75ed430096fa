"""Run inside a copy of the repository (tests/app/gate/test_rule_change.py): what the checks say about its model.

Prints one JSON object: the corpus lockstep on SQLite (divergences), the oracle's answer for the
timeout example, the proofs that the `pending-times-out` mutant must be refuted by, a small
encoding <-> model cross-check, and the explorer's counts for shapes 1:- and 2:a>b.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from qlwf.conformance.checkers import explore as E
from qlwf.conformance.lockstep import runner
from qlwf.model import tables as T
from qlwf.model.oracle import consult
from qlwf.proofs import crosscheck
from qlwf.proofs.mutants import BY_NAME
from qlwf.proofs.runner import Options
from qlwf.proofs.runner import run as prove
from qlwf.proofs.tables_view import Tables


def main(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"tables": T.__file__}
    corpus_dir = root / "conformance" / "traces" / "corpus"
    corpus = runner.run_traces("sqlite", runner.corpus_traces(corpus_dir), invariants=False)
    out["corpus"] = {"traces": len(corpus.results),
                     "divergences": [{"trace": r.trace, "step": r.divergence.step_index, "kind": r.divergence.kind,
                                      "text": r.divergence.render()}
                                     for r in corpus.failures if r.divergence]}
    example = json.loads((root / "examples" / "cancel-timeout-expired-lease.json").read_text(encoding="utf-8"))
    pending = {s["id"] for s in example["stepRuns"] if s["status"] == "pending"}
    res = consult("cancel", example).resolution
    out["oracle_pending_targets"] = sorted({m["stepRun"]["status"] for m in res["stepMutations"]
                                            if m["stepRun"]["id"] in pending})
    mutant = BY_NAME["pending-times-out"]
    out["mutant_equals_model"] = mutant.build_tables() == Tables.model()
    out["proofs"] = {r.name: r.result for r in prove(Options(bound=2, only=list(mutant.refuted_by)))}
    rep = crosscheck.run(seed=7, traces=12, max_steps=3)
    out["crosscheck"] = {"transitions": rep.transitions, "mismatches": len(rep.mismatches),
                         "converge_checked": rep.checked.get("converge_cancellation", 0)}
    shapes = tuple(s for n in (1, 2) for s in E.dag_shapes(n) if E.shape_name(s) in ("1:-", "2:a>b"))
    report = E.explore(E.Config(max_steps=2, shapes=shapes))
    out["explorer"] = {"findings": len(report.findings),
                       "shapes": {r.shape: {k: getattr(r, k) for k in E.COUNT_KEYS} for r in report.shapes}}
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
