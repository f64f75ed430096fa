"""The public facade of qlwf.model: `__all__` is exactly the documented list, and each name imports."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import qlwf.model as model

SPEC_DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def documented_names() -> list[str]:
    text = SPEC_DOC.read_text(encoding="utf-8")
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, flags=re.M)


def test_all_is_exactly_the_documented_api() -> None:
    names = documented_names()
    assert len(names) >= 10 and len(set(names)) == len(names)
    assert sorted(model.__all__) == sorted(names)


@pytest.mark.parametrize("name", model.__all__)
def test_each_public_name_imports_from_the_facade(name: str) -> None:
    value = getattr(model, name)
    assert value is not None
    namespace: dict[str, object] = {}
    exec(f"from qlwf.model import {name} as got", namespace)  # the documented spelling
    assert namespace["got"] is value


def test_other_names_are_not_part_of_the_facade() -> None:
    with pytest.raises(AttributeError, match="public API"):
        model.__getattr__("CommandContext")
    assert "CommandContext" not in dir(model)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from qlwf.model import *", namespace)
    assert sorted(k for k in namespace if not k.startswith("__")) == sorted(model.__all__)


def test_the_facade_loads_lazily() -> None:
    """Importing one table module does not load the command system."""
    code = "import sys, qlwf.model.tables; print('qlwf.model.system' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
    assert importlib.import_module("qlwf.model").apply is model.apply
