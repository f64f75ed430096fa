"""Generated documents list the model's rows (their currency: tests/app/gate/test_artifacts.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_tables_doc_lists_every_decision_row() -> None:
    from qlwf.model import tables as T

    text = (REPO / "docs" / "tables.md").read_text(encoding="utf-8")
    assert all(r.rule in text for r in T.COMPLETION_RULES)
    assert text.count("| claimed |") >= len([k for k in T.CANCEL_ATTEMPT_TABLE if k[0] == "claimed"])
