"""An ADR rule change is one table row plus `qlwf regenerate` (issue 12, acceptance).

In a copy of the repository, "under reason timeout, pending StepRuns become timed_out" (today they
become cancelled, cancellation.md §4) is made by editing the one CANCEL_STEP_TABLE row. The test
then shows what the checks report, run on the copy (tests/support/rule_change_probe.py):

* before regenerating, exactly the artifacts that record the behaviour are stale, and the corpus
  lockstep on SQLite diverges in exactly one trace at exactly one rule row;
* after `qlwf regenerate`, the regenerated corpus differs from the old one only in that StepRun's
  records (and the state digests after it), SQLite agrees with every trace, the oracle gives the
  new target, the proofs the old behaviour's mutant was refuted by still hold, the encoding <->
  model cross-check agrees, and the explorer's counts change only for the shape with a pending step;
  the proof mutant that encoded this very change is now identical to the model.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from qlwf.model.oracle import consult

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "tests" / "support" / "rule_change_probe.py"
TRACE = "conformance/traces/corpus/adr0228-timeout-mapping.json"
OLD_ROW = '("pending", False): _CANCELLED, ("pending", True): _CANCELLED,'
NEW_ROW = '("pending", False): _CANCELLED, ("pending", True): _TIMED_OUT,'
PACKAGES = {"model": "model", "proofs": "proofs", "impl": "impl", "conformance": "conformance"}


def copy_repository(dest: Path) -> tuple[Path, dict[str, str]]:
    """The tracked files of the checkout in `dest/repo`, importable as qlwf from there (no install)."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True,
                           timeout=60).stdout.decode().split("\0")
    root = dest / "repo"
    for name in filter(None, files):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    # qlwf's package layout (pyproject.toml package-dir) as links: qlwf/* plus qlwf.model -> model/, ...
    layout = dest / "layout" / "qlwf"
    layout.mkdir(parents=True)
    for entry in (root / "qlwf").iterdir():
        (layout / entry.name).symlink_to(entry)
    for name, directory in PACKAGES.items():
        (layout / name).symlink_to(root / directory, target_is_directory=True)
    return root, {**os.environ, "PYTHONPATH": str(dest / "layout")}


def qlwf(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # cwd: `-m` puts it first on sys.path, so it must not hold a qlwf/ (the checkout's would win).
    return subprocess.run([sys.executable, "-m", "qlwf.cli", *args], capture_output=True, text=True, env=env,
                          cwd=env["PYTHONPATH"], timeout=300, check=False)


def probe(root: Path, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(PROBE), str(root)], capture_output=True, text=True, env=env,
                         cwd=env["PYTHONPATH"], timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    assert result["tables"].startswith(str(root.parent)), "the probe must import the copy's model"
    return result


def differences(a: Any, b: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), (*path, k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, (*path, i))]
    return [] if a == b else [(path, a, b)]


def manifest_shapes() -> dict[str, Any]:
    manifest = REPO / "conformance" / "checkers" / "explore_manifest.json"
    shapes: dict[str, Any] = json.loads(manifest.read_text())["shapes"]
    return shapes


@pytest.mark.slow
def test_pending_timeout_is_one_row_and_regenerate(tmp_path: Path) -> None:
    root, env = copy_repository(tmp_path)
    tables = root / "model" / "tables_cancellation.py"  # CANCEL_STEP_TABLE
    before = tables.read_text(encoding="utf-8")
    assert before.count(OLD_ROW) == 1
    tables.write_text(before.replace(OLD_ROW, NEW_ROW), encoding="utf-8")
    changed = [line for line in difflib.unified_diff(before.splitlines(), tables.read_text().splitlines(), n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed) == 2, changed  # one line out, one line in

    # Before regenerating: exactly the artifacts that record pending-under-timeout are stale ...
    check = qlwf(env, "regenerate", "--check", "--only", "docs", "--only", "examples", "--only", "corpus")
    assert check.returncode == 1, check.stdout + check.stderr
    assert sorted(line.removeprefix("stale: ") for line in check.stdout.splitlines() if line.startswith("stale: ")) \
        == [TRACE, "docs/tables.md"]
    # ... and the old corpus diverges on SQLite in one trace, at one rule row of one step.
    stale = probe(root, env)
    divergences = stale["corpus"]["divergences"]
    assert [(d["trace"], d["kind"]) for d in divergences] == [("adr0228-timeout-mapping", "expectation")]
    assert "step:converge.pending_timed_out" in divergences[0]["text"]  # what the model fires now
    recorded = json.loads((root / TRACE).read_text())["steps"][divergences[0]["step"]]
    assert "step:converge.pending_cancelled" in recorded["rules"]  # what the trace recorded

    done = qlwf(env, "regenerate", "--only", "docs", "--only", "examples", "--only", "corpus")
    assert done.returncode == 0 and "2 file(s) changed" in done.stdout, done.stdout + done.stderr

    # The docs gain exactly the changed cells: §3.1's pending row, the derived performer row, the table cell.
    old_doc = (REPO / "docs" / "tables.md").read_text().splitlines()
    new_doc = (root / "docs" / "tables.md").read_text().splitlines()
    added = [line for line in difflib.unified_diff(old_doc, new_doc, n=0) if line.startswith("+|")]
    assert added == ["+| pending | cancelled, ready, skipped, timed_out |",
                     "+| converge.pending_timed_out | pending | timed_out | converge_cancellation |",
                     "+| pending | timeout | mutate | timed_out | workflow_timed_out | "
                     "Execution exceeded its configured timeout |"]

    # The corpus changes only in the pending StepRun's records at the convergence step (digests follow).
    old = json.loads((REPO / TRACE).read_text())
    new = json.loads((root / TRACE).read_text())
    diffs = differences(old, new)
    first = min(p[1] for p, _, _ in diffs)
    at_step = [(p, a, b) for p, a, b in diffs if p[1] == first]
    assert [(a, b) for p, a, b in at_step if p[2] == "rules"] == [
        ("step:converge.pending_cancelled", "step:converge.pending_timed_out")]
    (pending_id,) = [n["record"]["id"] for o, n in zip(old["steps"][first]["state"]["changes"],
                                                       new["steps"][first]["state"]["changes"], strict=True)
                     if n["kind"] == "stepRuns" and (o["record"]["status"], n["record"]["status"])
                     == ("cancelled", "timed_out")]
    for p, _, _ in at_step:
        if p[2:4] == ("state", "changes"):
            record = new["steps"][first]["state"]["changes"][p[4]]["record"]
            assert pending_id in json.dumps(record), (p, record)  # the StepRun, its mutation or its event
        else:
            assert p[2:] in (("rules", p[3]), ("state", "digest")), p
    assert all(p[2:] == ("state", "digest") for p, _, _ in diffs if p[1] > first)
    status_changes = {(a, b) for p, a, b in at_step if p[-1] == "status"}
    assert status_changes == {("cancelled", "timed_out")}

    after = probe(root, env)
    assert after["corpus"] == {"traces": stale["corpus"]["traces"], "divergences": []}  # SQLite follows the table
    assert after["oracle_pending_targets"] == ["timed_out"]
    assert after["proofs"] == {"TABLE-cancel-step": "proved", "LIVE-1-rank": "proved"}
    assert after["crosscheck"]["mismatches"] == 0 and after["crosscheck"]["converge_checked"] > 0
    # The proof mutant of this change is now the model itself (the mutant list must drop or replace it).
    assert after["mutant_equals_model"] is True
    explorer = after["explorer"]
    assert explorer["findings"] == 0
    manifest = manifest_shapes()
    assert explorer["shapes"]["1:-"] == manifest["1:-"]  # no pending step: unchanged
    assert explorer["shapes"]["2:a>b"] != manifest["2:a>b"]  # b is pending under a: its states change


def test_the_checkout_itself_maps_pending_to_cancelled_under_timeout() -> None:
    """The baseline the change is measured against (so the test above cannot pass on an edited tree)."""
    example = json.loads((REPO / "examples" / "cancel-timeout-expired-lease.json").read_text(encoding="utf-8"))
    pending = {s["id"] for s in example["stepRuns"] if s["status"] == "pending"}
    res = consult("cancel", example).resolution
    assert pending and {m["stepRun"]["status"] for m in res["stepMutations"] if m["stepRun"]["id"] in pending} \
        == {"cancelled"}
    assert OLD_ROW in (REPO / "model" / "tables_cancellation.py").read_text(encoding="utf-8")
