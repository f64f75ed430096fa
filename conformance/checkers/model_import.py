"""Import another copy's model (and proofs) under the names `qlwf.model` / `qlwf.proofs`.

`qlwf diff` evaluates two models that share one package name. Each is evaluated in its own
process whose import system maps `qlwf.model` (and, for proofs, `qlwf.proofs`) onto that tree's
directories, as the tree's own pyproject.toml lays them out; everything else (`qlwf`,
`qlwf.conformance`) stays the running installation's. A finder in front of `sys.meta_path` is
needed because the editable install's finder resolves the mapped packages' children itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import tomllib
from pathlib import Path

MAPPED = ("qlwf.model", "qlwf.proofs")
DEFAULT_DIRS = {"qlwf.model": "model", "qlwf.proofs": "proofs"}


class TreeError(ValueError):
    """A tree that does not hold a model laid out as a qlwf repository."""


def package_dirs(pyproject_text: str | None) -> dict[str, str]:
    """Where `qlwf.model` and `qlwf.proofs` live in a tree, relative to its root (pyproject.toml's
    [tool.setuptools] package-dir; the historical layout when the file or the key is absent)."""
    mapping: dict[str, str] = {}
    if pyproject_text is not None:
        try:
            mapping = tomllib.loads(pyproject_text).get("tool", {}).get("setuptools", {}).get("package-dir", {})
        except tomllib.TOMLDecodeError as e:
            raise TreeError(f"pyproject.toml does not parse: {e}") from e
    return {name: str(mapping.get(name, default)) for name, default in DEFAULT_DIRS.items()}


def tree_dirs(root: Path) -> dict[str, Path]:
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else None
    dirs = {name: root / rel for name, rel in package_dirs(text).items()}
    if not (dirs["qlwf.model"] / "system.py").is_file():
        raise TreeError(f"{root}: no model (expected {dirs['qlwf.model']}/system.py)")
    return dirs


class _TreeFinder(importlib.abc.MetaPathFinder):
    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        for package, directory in self.dirs.items():
            if fullname == package:
                init = directory / "__init__.py"
                if init.is_file():
                    return importlib.util.spec_from_file_location(fullname, init,
                                                                  submodule_search_locations=[str(directory)])
                spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
                spec.submodule_search_locations = [str(directory)]
                return spec
            if fullname.startswith(package + "."):
                return importlib.machinery.PathFinder.find_spec(fullname, [str(directory)])
        return None


def use_tree(root: Path, packages: tuple[str, ...] = MAPPED) -> dict[str, Path]:
    """From now on, this process imports `packages` from `root`. Call before anything imports them."""
    dirs = {name: path for name, path in tree_dirs(root).items() if name in packages}
    loaded = [m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in dirs)]
    if loaded:
        raise RuntimeError(f"already imported from elsewhere: {sorted(loaded)[:3]}")
    sys.meta_path.insert(0, _TreeFinder(dirs))
    return dirs
