"""Another test module of the suite, loaded by its path under tests/ (a test that reruns its cases on mutants).

Test modules are not a package: each is imported under its file name, so a module already collected in this
process is reused as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parents[1]


def load(relative: str) -> ModuleType:
    """The test module at tests/`relative` (e.g. "impl/test_cas_guards.py")."""
    path = TESTS / relative
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
