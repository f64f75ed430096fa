"""The gate: results, exit codes and the JSON / JUnit reports CI consumes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from qlwf.gate import Check, Skip, run_checks, write_json, write_junit


def _passing(_o: dict) -> str:
    return "fine"


def _failing(_o: dict) -> str:
    raise AssertionError("broken invariant\nstep 3: details")


def _skipping(_o: dict) -> str:
    raise Skip("no server")


def _crashing(_o: dict) -> str:
    raise KeyError("boom")


def test_results_and_reports(tmp_path: Path) -> None:
    results = run_checks([Check("a", "", _passing), Check("b", "", _failing), Check("c", "", _skipping),
                          Check("d", "", _crashing)], {})
    assert [r.status for r in results] == ["passed", "failed", "skipped", "failed"]
    assert results[1].summary == "broken invariant" and results[1].details == ["step 3: details"]
    assert "KeyError" in results[3].summary
    write_json(results, tmp_path / "g.json")
    assert [r["name"] for r in json.loads((tmp_path / "g.json").read_text())] == ["a", "b", "c", "d"]
    write_junit(results, tmp_path / "g.xml")
    suite = ET.parse(tmp_path / "g.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "1")


def test_check_command_exit_codes(tmp_path: Path) -> None:
    from qlwf.cli import main

    assert main(["check", "--only", "spec-vectors", "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())[0]["status"] == "passed"
    assert main(["check", "--only", "no-such-check"]) == 2
