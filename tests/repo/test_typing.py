"""The whole distribution, the tests, the benchmarks and the example generator type-check under mypy's
strict mode (pyproject.toml [tool.mypy]).

mypy cannot follow the editable install's import hook, which maps `qlwf.model` to `model/` and so on
(pyproject's `package-dir`), so the test lays out the import tree the distribution installs as
symlinks into the checkout and checks the package `qlwf` there, and the other code against it."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_tree(dest: Path) -> Path:
    """Symlinks under `dest` that import as the installed distribution does; returns `dest`."""
    mapping: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["setuptools"]["package-dir"]
    top = dest / "qlwf"
    top.mkdir(parents=True)
    remapped = {name.removeprefix("qlwf."): ROOT / path for name, path in mapping.items() if name != "qlwf"}
    assert all("." not in name for name in remapped), "only top-level subpackages are remapped"
    for entry in (ROOT / mapping["qlwf"]).iterdir():
        if entry.name not in remapped and entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, path in remapped.items():
        (top / name).symlink_to(path)
    return dest


def test_the_package_tree_mirrors_the_install(tmp_path: Path) -> None:
    tree = package_tree(tmp_path / "tree") / "qlwf"
    assert (tree / "model" / "state.py").resolve() == ROOT / "model" / "state.py"
    assert (tree / "cli" / "entry.py").resolve() == ROOT / "qlwf" / "cli" / "entry.py"
    assert {p.name for p in tree.iterdir()} >= {"model", "proofs", "impl", "conformance", "campaign"}


# Checked beside the package: the tests import their helpers as top-level modules (tests/ and
# examples/ are on their path), the benchmarks and the example generator are scripts.
BESIDE = ("tests", "bench", "examples/generate.py")


def test_every_module_passes_mypy_strict(tmp_path: Path) -> None:
    tree = package_tree(tmp_path / "tree")
    env = {**os.environ, "MYPYPATH": os.pathsep.join(str(ROOT / d) for d in ("tests", "examples"))}
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "qlwf",
                           *(str(ROOT / p) for p in BESIDE)],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, f"mypy --strict found problems:\n{done.stdout}{done.stderr}"
