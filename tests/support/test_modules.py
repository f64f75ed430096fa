"""Another test module of the suite, loaded by its path under tests/ (a test that reruns its cases on mutants).

Test modules are not a package: pytest imports each under its file name with its folder on sys.path, so
this does the same (through the import system, so pytest's assertion rewriting applies and a failing
assert keeps its message), and a module already collected in this process is reused as it is.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parents[1]


def load(relative: str) -> ModuleType:
    """The test module at tests/`relative` (e.g. "impl/test_cas_guards.py")."""
    path = TESTS / relative
    loaded = sys.modules.get(path.stem)
    if loaded is not None:
        assert Path(getattr(loaded, "__file__", "") or "").resolve() == path, (path, loaded)
        return loaded
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    return importlib.import_module(path.stem)


def load_by_name(name: str) -> ModuleType:
    """The test module named `name` wherever it lies under tests/ (test file names are unique)."""
    (path,) = TESTS.glob(f"**/{name}.py")
    return load(path.relative_to(TESTS).as_posix())
