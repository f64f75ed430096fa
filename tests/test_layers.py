"""The layering of docs/architecture.md, read off the import statements: the model imports nothing of
qlwf outside itself, impl does not use the model's checkers, and those checkers live outside the model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# directory -> package name, as pyproject.toml's package-dir lays them out
PACKAGES = {"model": "qlwf.model", "impl": "qlwf.impl"}
FORBIDDEN = {
    "model": ("qlwf.impl", "qlwf.proofs", "qlwf.conformance", "qlwf.cli", "qlwf.checks", "qlwf.gate", "qlwf.cmd_"),
    # impl/postgres/conformance.py is the backend's provisioner and uses the registry's types; the
    # checkers (and the record vocabulary they once held, KIND_KEYS) are not for impl
    "impl": ("qlwf.conformance.checkers", "qlwf.proofs"),
}
CHECKERS = {"explore.py", "liveness.py", "replay.py"}


def imported_modules(source: str, module: str) -> set[str]:
    """Every module the source of `module` (dotted name) imports, relative imports resolved."""
    package = module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            out |= {name} | {f"{name}.{a.name}" for a in node.names}
    return out


def module_name(layer: str, path: Path) -> str:
    rel = path.relative_to(REPO / layer).with_suffix("")
    return ".".join([PACKAGES[layer], *rel.parts])


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_it_must_not(layer: str) -> None:
    bad = [(str(p.relative_to(REPO)), m) for p in sorted((REPO / layer).rglob("*.py"))
           for m in sorted(imported_modules(p.read_text(encoding="utf-8"), module_name(layer, p)))
           if m.startswith(FORBIDDEN[layer])]
    assert bad == []


@pytest.mark.parametrize(("source", "module", "expected"), [
    ("from ..conformance import trace\n", "qlwf.model.x", "qlwf.conformance.trace"),
    ("from ...conformance.checkers import explore\n", "qlwf.impl.sqlite.x", "qlwf.conformance.checkers.explore"),
    ("def f():\n    import qlwf.proofs.runner\n", "qlwf.model.x", "qlwf.proofs.runner"),
    ("from .records import KIND_KEYS\n", "qlwf.model.replay", "qlwf.model.records.KIND_KEYS"),
])
def test_the_scan_resolves_back_edges(source: str, module: str, expected: str) -> None:
    # the layer scan must be able to fail: relative and function-local imports are resolved
    assert expected in imported_modules(source, module)


def test_the_checkers_are_not_in_the_model() -> None:
    assert not CHECKERS & {p.name for p in (REPO / "model").iterdir()}
    assert {p.name for p in (REPO / "conformance" / "checkers").iterdir()} >= CHECKERS
