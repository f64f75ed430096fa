"""Generated documents are current (they are rendered from the model's data)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_generated_docs_are_current() -> None:
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import generate
    finally:
        sys.path.pop(0)
    stale = [name for name, render in generate.OUTPUTS.items()
             if (REPO / "docs" / name).read_text(encoding="utf-8") != render()]
    assert not stale, f"run `python docs/generate.py`: stale {stale}"


def test_tables_doc_lists_every_decision_row() -> None:
    from qlwf.model import tables as T

    text = (REPO / "docs" / "tables.md").read_text(encoding="utf-8")
    assert all(r.rule in text for r in T.COMPLETION_RULES)
    assert text.count("| claimed |") >= len([k for k in T.CANCEL_ATTEMPT_TABLE if k[0] == "claimed"])
