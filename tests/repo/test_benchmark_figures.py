"""docs/benchmarks.md is generated from bench/results/figures.json, and bench/record.py changes one row of it."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest

from qlwf.gate.checks import load_script

REPO = Path(__file__).resolve().parents[2]
record = load_script(REPO / "bench" / "record.py", "qlwf_bench_record")


def test_record_replaces_one_figure_and_stamps_it(tmp_path: Path) -> None:
    path = tmp_path / "figures.json"
    shutil.copy(REPO / "bench" / "results" / "figures.json", path)
    before = json.loads(path.read_text(encoding="utf-8"))
    record.record("diff", "no behaviour change, 1 s", path)
    after = json.loads(path.read_text(encoding="utf-8"))
    changed = [(a, b) for a, b in zip(before["figures"], after["figures"], strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1]["id"] == "diff"
    assert changed[0][1]["figure"] == "no behaviour change, 1 s"
    assert changed[0][1]["measured"] == datetime.date.today().isoformat()
    with pytest.raises(SystemExit, match="no figure 'nope'"):
        record.record("nope", "x", path)


def test_the_page_shows_every_figure_once() -> None:
    figures = json.loads((REPO / "bench" / "results" / "figures.json").read_text(encoding="utf-8"))["figures"]
    assert len({f["id"] for f in figures}) == len(figures)
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for f in figures:
        assert page.count(f["figure"]) == 1, f["id"]
