"""Generated documents are current (they are rendered from the model's data)."""

from __future__ import annotations

from pathlib import Path

from qlwf.checks import load_script

REPO = Path(__file__).resolve().parent.parent


def test_generated_docs_are_current() -> None:
    generate = load_script(REPO / "docs" / "generate.py", "qlwf_docs_generate")
    stale = [name for name, render in generate.OUTPUTS.items()
             if (REPO / "docs" / name).read_text(encoding="utf-8") != render()]
    assert not stale, f"run `python docs/generate.py`: stale {stale}"


def test_tables_doc_lists_every_decision_row() -> None:
    from qlwf.model import tables as T

    text = (REPO / "docs" / "tables.md").read_text(encoding="utf-8")
    assert all(r.rule in text for r in T.COMPLETION_RULES)
    assert text.count("| claimed |") >= len([k for k in T.CANCEL_ATTEMPT_TABLE if k[0] == "claimed"])
