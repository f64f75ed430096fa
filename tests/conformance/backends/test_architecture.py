"""docs/architecture.md's "how to add a backend", followed with a throwaway backend: registered by a
plugin module (QLWF_BACKEND_MODULES), it runs through `qlwf conform`, `qlwf replay`, the
backend-parametrised suite and the gate, and is gone once unregistered."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from qlwf.conformance import backends

REPO = Path(__file__).resolve().parents[3]
SUPPORT = REPO / "tests" / "support"
PLUGIN = "throwaway_backend"


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, "QLWF_BACKEND_MODULES": PLUGIN}


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, check=False,
                          env=_env(), cwd=REPO)


def test_the_architecture_doc_has_the_five_steps() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## How to add a backend", 1)[1]
    assert [int(n) for n in re.findall(r"^(\d)\. \*\*", section, re.M)] == [1, 2, 3, 4, 5]
    for layer in ("model/", "proofs/", "impl/", "conformance/", "qlwf/"):
        assert f"`{layer}`" in text


def test_a_plugin_backend_runs_through_qlwf_conform_and_replay(tmp_path: Path) -> None:
    out = _run("-m", "qlwf.cli", "conform", "--backend", "throwaway", "--traces", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"conform throwaway: PASS — 3 traces, \d+ steps", out.stdout), out.stdout
    trace = next((REPO / "conformance" / "traces" / "corpus").glob("*.json"))
    replay = _run("-m", "qlwf.cli", "replay", str(trace), "--backend", "throwaway")
    assert replay.returncode == 0 and "on throwaway: PASS" in replay.stdout, replay.stdout + replay.stderr
    # without the plugin module the name is unknown: nothing else was edited to add it
    bare = subprocess.run([sys.executable, "-m", "qlwf.cli", "conform", "--backend", "throwaway", "--traces", "1"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
                          env={k: v for k, v in os.environ.items() if k != "QLWF_BACKEND_MODULES"})
    assert bare.returncode == 2 and "invalid choice: 'throwaway'" in bare.stderr


@pytest.mark.slow
def test_a_plugin_backend_runs_through_the_parametrised_suite() -> None:
    suite = REPO / "tests" / "conformance" / "backends" / "test_backends.py"
    out = _run("-m", "pytest", str(suite), "-k", "throwaway", "-n", "0", "-q",
               "-p", "no:cacheprovider", "-p", "no:randomly", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    # conformance, lost commits and concurrency: the capabilities it declares; no crash harness
    assert re.search(r"\b3 passed\b", out.stdout), out.stdout[-2000:]


def test_a_registered_backend_joins_the_gate_and_is_unknown_without_floors() -> None:
    from qlwf.gate import checks
    from qlwf.gate.verdict import run_checks

    sys.path.insert(0, str(SUPPORT))
    try:
        plugin = importlib.import_module(PLUGIN)
        plugin = importlib.reload(plugin)  # registers again if an earlier test imported it
        entry = [c for c in checks.backend_checks() if c.name == plugin.CHECK]
        assert len(entry) == 1 and entry[0].leg == "core"
        result = run_checks(entry, {"quick": True})[0]
        assert result.status == "unknown", result
        assert result.evidence["traces"] == 3 and any("no evidence floor" in g for g in result.gaps)
    finally:
        backends.unregister(PLUGIN.removesuffix("_backend"))
        sys.path.remove(str(SUPPORT))
    assert "throwaway" not in backends.names()
    assert all(c.name != "conform-throwaway" for c in checks.backend_checks())
