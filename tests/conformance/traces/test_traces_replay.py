"""Exported traces replay without qlwf: a replayer of `json` and the port alone, against the SQLite backend.

The replayer (tests/support/trace_replayer.py) is what another project would write: it reads the
file's record keys, times, outcomes and states, drives the port, and compares. These tests show
every step of the exported corpus and of generated traces matching on SQLite, in both state
forms, and that the same replayer catches a broken backend at the very step the lockstep harness
(which does use the model) reports.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.lockstep.compare import run_lockstep
from qlwf.conformance.traces.export import corpus_inputs, export, selected
from qlwf.conformance.traces.format import load
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.store import SqliteStore
from support import trace_replayer
from support.trace_replayer import Mismatch, replay

GENERATED = 6  # seeds 0..5, besides the corpus


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("exported")
    traces = selected(corpus=True, generated=GENERATED, seed=0)
    return {form: [e.path for e in export(traces, root / form, form)] for form in ("changes", "snapshot")}


def test_the_replayer_imports_nothing_but_json() -> None:
    tree = ast.parse(Path(trace_replayer.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"__future__", "json", "typing"}


def test_export_covers_the_corpus_and_the_generated_seeds(exported: dict[str, list[Path]]) -> None:
    names = [p.stem for p in exported["changes"]]
    generated = [generate(s).name for s in range(GENERATED)]
    assert names == [t.name for t in corpus_inputs()] + generated
    assert all(n.startswith("generated-") and n.endswith(f"-{s}") for s, n in enumerate(generated))
    assert [p.name for p in exported["snapshot"]] == [p.name for p in exported["changes"]]


@pytest.mark.parametrize("form", ["changes", "snapshot"])
def test_every_exported_step_matches_on_sqlite(form: str, exported: dict[str, list[Path]]) -> None:
    total = commands = 0
    for path in exported[form]:
        doc = json.loads(path.read_text(encoding="utf-8"))
        with SqliteAdapter() as port:
            evidence = replay(path.read_text(encoding="utf-8"), port)
        assert [e["index"] for e in evidence] == list(range(len(doc["steps"]))), path.name
        assert [e["outcome"] for e in evidence] == [s["op"] == "command" for s in doc["steps"]]
        total += len(evidence)
        commands += sum(e["outcome"] for e in evidence)
    assert total > 400 and commands > 300  # the corpus alone has more; a silent empty export fails here


def test_replay_compares_real_records(exported: dict[str, list[Path]]) -> None:
    """Not vacuous: the last expected state of a corpus trace holds records of several kinds."""
    path = next(p for p in exported["snapshot"] if p.stem == "adr0228-timeout-mapping")
    last = json.loads(path.read_text(encoding="utf-8"))["steps"][-1]["state"]["snapshot"]
    assert all(last[kind] for kind in ("runs", "stepRuns", "events", "attempts", "leases", "mutations"))


class FrontierLedgerSkippingStore(SqliteStore):
    """Broken: forgets the ledger entries of frontier mutations."""

    def insert_mutation(self, entry: dict[str, Any]) -> None:
        if not entry["mutationId"].startswith("workflow-frontier:"):
            super().insert_mutation(entry)


@pytest.mark.parametrize("name", ["adr0226-dependency-readied", "adr0226-failure-skips-chain"])
def test_the_replayer_catches_a_broken_backend_where_lockstep_does(name: str,
                                                                   exported: dict[str, list[Path]]) -> None:
    path = next(p for p in exported["changes"] if p.stem == name)
    with SqliteAdapter(store_factory=FrontierLedgerSkippingStore) as port:
        lockstep = run_lockstep(load(path), port)
    assert lockstep.divergence is not None
    with SqliteAdapter(store_factory=FrontierLedgerSkippingStore) as port, pytest.raises(Mismatch) as caught:
        replay(path.read_text(encoding="utf-8"), port)
    assert caught.value.index == lockstep.divergence.step_index
    assert "mutations" in caught.value.what


def test_the_replayer_catches_an_edited_outcome(exported: dict[str, list[Path]]) -> None:
    path = next(p for p in exported["changes"] if p.stem == "adr0228-timeout-mapping")
    doc = json.loads(path.read_text(encoding="utf-8"))
    k = max(i for i, s in enumerate(doc["steps"]) if s["op"] == "command" and "ok" in s["outcome"])
    doc["steps"][k]["outcome"]["ok"]["status"] = "something_else"
    with SqliteAdapter() as port, pytest.raises(Mismatch) as caught:
        replay(json.dumps(doc), port)
    assert (caught.value.index, caught.value.what) == (k, "outcome")
