"""The layers of docs/architecture.md, read off the import graph (tests/support/import_graph.py).

`LAYERS` below is the contract, in one place: each layer (a package of pyproject.toml's package-dir)
and the other layers it may import. It is an allow-list without exemptions, checked over every import
of every module — module-level, function-local, inside `if TYPE_CHECKING:`, and loaded by name
(`importlib.import_module`, `sys.modules`, "module:attribute" registry targets, `python -m` command
lines, `load_script` of a repository script, whose own imports count as its loader's). The
import graph has no cycle either (imports inside `if TYPE_CHECKING:` never run and are left out of
that check). docs/architecture.md's layer table states the same contract; a test compares them.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from support.import_graph import (
    REPO,
    Graph,
    Import,
    cycles,
    declared_packages,
    discover,
    imports_of,
    package_dirs,
    scan,
)

# layer -> the other layers it may import (every layer may import itself). The application, `qlwf`
# (the CLI, the gate, campaigns), is every module of the distribution outside the other four.
LAYERS: dict[str, tuple[str, ...]] = {
    "qlwf.model": (),
    "qlwf.proofs": ("qlwf.model",),
    "qlwf.impl": ("qlwf.model",),
    "qlwf.conformance": ("qlwf.model", "qlwf.impl", "qlwf.proofs"),
    "qlwf": ("qlwf.model", "qlwf.proofs", "qlwf.impl", "qlwf.conformance"),
}

# Rooms inside a layer (the first package level below it; docs/architecture.md "Rooms"): room -> the sibling
# rooms it may import, or single modules of them ("backends.registry": the registry's machinery, which every
# harness room uses, while the registrations in `backends` itself import the harness). Every room may import its
# layer's own `__init__`. A room not listed here fails the test until its rules are written down.
ROOMS: dict[str, dict[str, tuple[str, ...]]] = {
    "qlwf.conformance": {
        "processes": (),
        "provision": (),
        "mutants": (),
        "checkers": ("processes", "traces.export", "traces.format"),
        "report": ("traces.format", "checkers.replay"),
        "traces": ("generate", "exec.protocol_schema", "lockstep.state_diff"),
        "generate": ("traces.format", "traces.drift_mirror"),
        "exec": ("processes", "report", "backends.registry", "drivers", "generate.surface"),
        "drivers": ("backends.postgres",),
        "lockstep": ("traces", "generate", "report", "processes", "backends.registry"),
        "faults": ("traces", "lockstep", "provision", "backends.registry", "backends.postgres"),
        "concurrency": ("generate", "lockstep", "faults", "backends.registry"),
        "stateful": ("checkers", "report", "traces"),
        "backends": ("lockstep", "faults", "concurrency", "exec", "provision"),
    },
    "qlwf": {
        "support": (),
        "oracle": (),
        "review": (),
        "gate": ("support",),
        "campaign": ("support", "oracle", "review"),
        "cli": ("support", "oracle", "review", "gate", "campaign"),
    },
}

# The word each package's docstring uses for its layer ("Layer: conformance", ...).
LAYER_NAMES = {"qlwf.model": "model", "qlwf.proofs": "proofs", "qlwf.impl": "impl",
               "qlwf.conformance": "conformance", "qlwf": "application"}

# Calls that load a module by a name the scanner cannot evaluate, each with where the names it loads
# are seen instead (file, the call as written): nothing here loads a module the graph does not show.
DYNAMIC = {
    ("conformance/mutants/storage.py", "importlib.import_module(module)"):
        "the module of a storage mutant; each `code(...)`/`constant(...)` entry names it as a string constant",
    ("conformance/backends/registry.py", "importlib.import_module(module)"):
        "a registry target's module; `register(...)` names it as a \"module:attribute\" string constant",
    ("conformance/backends/__init__.py", "importlib.import_module(module)"):
        "QLWF_BACKEND_MODULES: plugins from outside the distribution (a test's throwaway backend)",
    ("qlwf/support/preload.py", "importlib.import_module(module.name)"):
        "every module of the distribution (Hypothesis's constants, decisions Q-113): the application may",
    ("qlwf/gate/checks.py", "sys.modules[name]"):
        "load_script's own bookkeeping of the script it loads (each load_script call is an edge)",
}


def layer_of(module: str) -> str:
    """The layer of a module: the deepest package-dir package it lies in."""
    return max((name for name in LAYERS if module == name or module.startswith(name + ".")), key=len)


def violations(graph: Graph) -> list[str]:
    """Every import against the contract, as `a -> b (file:line)`. A script loaded with load_script
    runs in its loader: its imports are checked against the loader's layer."""
    out: list[str] = []

    def check(source: str, edge: Import, via: str, seen: frozenset[str]) -> None:
        if edge.target in graph.scripts:
            if edge.target not in seen:
                for inner in graph.out_of(edge.target):
                    check(source, inner, f"{via}, in {edge.target} loaded at {edge.where()}", seen | {edge.target})
            return
        allowed = {layer_of(source), *LAYERS[layer_of(source)]}
        if layer_of(edge.target) not in allowed:
            out.append(f"{source} -> {edge.target} ({edge.where()}{via})")

    for edge in graph.imports:
        if edge.source not in graph.scripts:
            check(edge.source, edge, "", frozenset())
    return sorted(set(out))


def room_of(module: str) -> tuple[str, str] | None:
    """(layer, room) of a module of a layer with rooms; None for the layer's own `__init__` or a layer without."""
    layer = layer_of(module)
    if layer not in ROOMS or module == layer:
        return None
    return layer, module[len(layer) + 1:].split(".")[0]


def room_violations(graph: Graph) -> list[str]:
    """Every import between two rooms of one layer that ROOMS does not allow, as `a -> b (file:line)`."""
    out = []
    for edge in graph.imports:
        if edge.source in graph.scripts or edge.target in graph.scripts:
            continue
        source, target = room_of(edge.source), room_of(edge.target)
        if source is None or target is None or source[0] != target[0] or source[1] == target[1]:
            continue
        layer, room = source
        inner = edge.target[len(layer) + 1:]
        allowed = ROOMS[layer][room]
        if not any(inner == a or inner.startswith(a + ".") for a in allowed):
            out.append(f"{edge.source} -> {edge.target} ({edge.where()}): room {room} may import {allowed or 'none'}")
    return sorted(set(out))


def described_cycles(graph: Graph) -> list[str]:
    """Each cycle of runtime imports, every edge as `a -> b (file:line)`."""
    out = []
    for cycle in cycles(graph):
        hops = []
        for a, b in itertools.pairwise(cycle):
            edge = next(i for i in graph.imports if i.source == a and i.target == b and not i.type_checking)
            hops.append(f"{a} -> {b} ({edge.where()})")
        out.append(" ; ".join(hops))
    return out


@pytest.fixture(scope="module")
def graph() -> Graph:
    return scan()


# ---- the contract -----------------------------------------------------------------------------------------------
def test_every_import_keeps_to_its_layer(graph: Graph) -> None:
    bad = violations(graph)
    assert not bad, "imports outside the layer contract (tests/repo/test_layers.py LAYERS):\n" + "\n".join(bad)


def test_every_import_between_rooms_is_allowed(graph: Graph) -> None:
    bad = room_violations(graph)
    assert not bad, "imports between rooms outside tests/repo/test_layers.py ROOMS:\n" + "\n".join(bad)


def test_every_room_has_rules_and_every_rule_a_room(graph: Graph) -> None:
    on_disk: dict[str, set[str]] = {layer: set() for layer in ROOMS}
    for module in graph.modules:
        found = room_of(module)
        if found is not None:
            on_disk[found[0]].add(found[1])
    for layer, rooms in ROOMS.items():
        assert on_disk[layer] == set(rooms), f"{layer}: rooms on disk {sorted(on_disk[layer])}, rules {sorted(rooms)}"
        for room, allowed in rooms.items():
            for target in allowed:
                assert target.split(".")[0] in rooms and target.split(".")[0] != room, (layer, room, target)


def test_no_module_imports_one_that_imports_it_back(graph: Graph) -> None:
    found = described_cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_the_scan_sees_the_whole_distribution(graph: Graph) -> None:
    """Every module is scanned and the packages on disk are the ones pyproject.toml installs."""
    assert set(LAYERS) == set(package_dirs()), "a layer per package-dir entry, and no other"
    _, packages = discover()
    declared = declared_packages()
    assert packages <= set(declared), f"packages missing from pyproject.toml: {sorted(packages - set(declared))}"
    assert {m for m in graph.modules if m.startswith("qlwf.conformance.provision.")} >= {
        "qlwf.conformance.provision.cluster", "qlwf.conformance.provision.security"}
    assert len(graph.modules) > 150 and len(graph.imports) > 1500
    assert graph.scripts.keys() == {"docs/generate.py", "examples/generate.py"}  # load_script in qlwf/


def test_every_load_by_name_is_seen_or_accounted_for(graph: Graph) -> None:
    """A call that loads a module by a name the scan cannot evaluate is one of the reviewed few."""
    sites = {(where.rpartition(":")[0], text) for where, text in graph.dynamic}
    assert sites == set(DYNAMIC), f"new: {sorted(sites - set(DYNAMIC))}; gone: {sorted(set(DYNAMIC) - sites)}"


def test_every_package_says_what_it_is_and_its_layer() -> None:
    """Each room's `__init__` docstring names its layer (docs/architecture.md): a newcomer reads what
    a package is, and what it may import, where it lives."""
    import ast

    modules, packages = discover()
    missing = []
    for package in sorted(packages):
        doc = ast.get_docstring(ast.parse(modules[package].read_text(encoding="utf-8"))) or ""
        layer = LAYER_NAMES[layer_of(package)]
        if f"Layer: {layer}" not in doc:
            missing.append(f"{package} ({modules[package].relative_to(REPO)}): no 'Layer: {layer}' in its docstring")
    assert not missing, "\n".join(missing)


def test_impl_is_product_code_only(graph: Graph) -> None:
    """No throwaway server, backend registry or driver harness under impl/ (they are conformance's)."""
    back = [i for i in graph.imports if i.source.startswith("qlwf.impl.") and i.target.startswith("qlwf.conformance")]
    assert not back
    assert not {"server.py", "conformance.py", "driver.py"} & {p.name for p in (REPO / "impl" / "postgres").iterdir()}


def test_the_checkers_are_not_in_the_model() -> None:
    checkers = {"explore", "liveness.py", "replay.py"}
    assert not checkers & {p.name for p in (REPO / "model").iterdir()}
    assert {p.name for p in (REPO / "conformance" / "checkers").iterdir()} >= checkers


# ---- docs/architecture.md states the same contract ---------------------------------------------------------------
def documented_layers() -> dict[str, tuple[str, ...]]:
    """The layer table of docs/architecture.md: `dir/` -> the layers of its imports column (backticked
    layer names; "nothing" for none)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("| layer | what it is | imports |", 1)[1].split("\n\n", 1)[0]
    by_dir = {str(path.relative_to(REPO)) + "/": name for name, path in package_dirs().items()}
    out: dict[str, tuple[str, ...]] = {}
    for row in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        directory = cells[0].strip("`")
        named = re.findall(r"`([a-z]+)`", cells[-1])
        out[by_dir[directory]] = tuple(by_dir[f"{n}/"] for n in named)
    return out


def test_the_architecture_doc_states_the_contract() -> None:
    documented = documented_layers()
    assert list(documented) == list(LAYERS), "one row per layer, in the contract's order"
    assert {k: set(v) for k, v in documented.items()} == {k: set(v) for k, v in LAYERS.items()}


# ---- the scanner can fail ------------------------------------------------------------------------------------------
KNOWN = ("qlwf.model", "qlwf.model.records", "qlwf.model.system", "qlwf.conformance", "qlwf.conformance.trace",
         "qlwf.conformance.checkers", "qlwf.conformance.checkers.explore", "qlwf.proofs", "qlwf.proofs.runner",
         "qlwf.impl", "qlwf.impl.sqlite", "qlwf.impl.sqlite.x", "qlwf.cli", "qlwf.conformance.provision.servers")


def targets(source: str, module: str, *, is_package: bool = False) -> set[tuple[str, str, bool]]:
    return {(i.target, i.kind, i.type_checking) for i in imports_of(source, module, is_package=is_package, known=KNOWN)}


@pytest.mark.parametrize(("source", "module", "expected"), [
    # relative imports, from a module and from a package's __init__
    ("from ..conformance import trace\n", "qlwf.model.x", ("qlwf.conformance.trace", "import", False)),
    ("from ...conformance.checkers import explore\n", "qlwf.impl.sqlite.x", ("qlwf.conformance.checkers.explore",
                                                                             "import", False)),
    ("from . import x\n", "qlwf.impl.sqlite", ("qlwf.impl.sqlite.x", "import", False)),
    ("from .records import KIND_KEYS\n", "qlwf.model.replay", ("qlwf.model.records", "import", False)),
    ("from qlwf.model import Record\n", "qlwf.impl.y", ("qlwf.model", "import", False)),  # a name, not a module
    # function-local, and TYPE_CHECKING-only
    ("def f():\n    import qlwf.proofs.runner\n", "qlwf.model.x", ("qlwf.proofs.runner", "import", False)),
    ("if TYPE_CHECKING:\n    from qlwf.cli import main\n", "qlwf.model.x", ("qlwf.cli", "import", True)),
    # loaded by name
    ("importlib.import_module('qlwf.proofs.runner')\n", "qlwf.model.x", ("qlwf.proofs.runner", "string", False)),
    ("import_module('.system', __name__)\n", "qlwf.model", ("qlwf.model.system", "string", False)),
    ("HOMES = {'apply': 'system'}\ndef g(n):\n    home = HOMES.get(n)\n"
     "    importlib.import_module(f'.{home}', __name__)\n", "qlwf.model", ("qlwf.model.system", "string", False)),
    ("MODS = ('qlwf.cli',)\nfor m in MODS:\n    importlib.import_module(m)\n", "qlwf.model.x",
     ("qlwf.cli", "string", False)),
    ("sys.modules.get('qlwf.conformance.provision.servers')\n", "qlwf.impl.y",
     ("qlwf.conformance.provision.servers", "string", False)),
    ("sys.modules['qlwf.cli']\n", "qlwf.model.x", ("qlwf.cli", "string", False)),
    ("register('x', 'qlwf.conformance.trace:Trace', 'a backend')\n", "qlwf.impl.y",
     ("qlwf.conformance.trace", "string", False)),
    ("ARGV = [sys.executable, '-m', 'qlwf.impl.sqlite.x']\n", "qlwf.model.x", ("qlwf.impl.sqlite.x", "string", False)),
    ("load_script(REPO / 'docs' / 'generate.py', 'g')\n", "qlwf.model.x", ("docs/generate.py", "script", False)),
])
def test_the_scan_resolves_every_kind_of_import(source: str, module: str, expected: tuple[str, str, bool]) -> None:
    assert expected in targets(source, module, is_package=module in ("qlwf.impl.sqlite", "qlwf.model"))


def test_the_scan_ignores_what_is_not_a_module_of_the_distribution() -> None:
    assert targets("import os\nfrom psycopg import sql\nX = 'qlwf.model.nope'\nY = 'qlwf'\n", "qlwf.model.x") == set()


def test_a_call_the_scan_cannot_evaluate_is_listed() -> None:
    graph = Graph({"qlwf.model.x": Path("x.py")}, set())
    from support import import_graph

    scanner = import_graph._Scanner(graph, REPO, "qlwf.model.x", Path("x.py"), False,
                                    source="def f(name):\n    importlib.import_module(name)\n")
    scanner.run()
    assert graph.dynamic == [("x.py:2", "importlib.import_module(name)")]


def _graph(*edges: tuple[str, str, bool]) -> Graph:
    modules = {m: Path(m) for a, b, _ in edges for m in (a, b) if "/" not in m}
    return Graph(modules, set(), imports=[Import(a, b, f"{a}.py", n + 1, "import", tc)
                                          for n, (a, b, tc) in enumerate(edges)])


def test_the_contract_check_reports_a_back_edge_with_its_place() -> None:
    graph = _graph(("qlwf.impl.postgres.x", "qlwf.conformance.backends", False),
                   ("qlwf.model.y", "qlwf.cli", True),  # TYPE_CHECKING-only imports count for the layers
                   ("qlwf.conformance.z", "qlwf.impl.port", False))
    assert violations(graph) == ["qlwf.impl.postgres.x -> qlwf.conformance.backends (qlwf.impl.postgres.x.py:1)",
                                 "qlwf.model.y -> qlwf.cli (qlwf.model.y.py:2)"]


def test_a_script_counts_as_its_loader() -> None:
    graph = _graph(("qlwf.impl.a", "docs/s.py", False), ("docs/s.py", "qlwf.conformance.trace", False))
    graph.scripts["docs/s.py"] = Path("docs/s.py")
    assert violations(graph) == ["qlwf.impl.a -> qlwf.conformance.trace (docs/s.py.py:2, in docs/s.py loaded at "
                                 "qlwf.impl.a.py:1)"]


def test_the_cycle_check_reports_a_cycle_but_not_through_type_checking() -> None:
    graph = _graph(("qlwf.conformance.a", "qlwf.conformance.b", False),
                   ("qlwf.conformance.b", "qlwf.conformance.a", False),
                   ("qlwf.model", "qlwf.model.c", True), ("qlwf.model.c", "qlwf.model", False))
    assert described_cycles(graph) == ["qlwf.conformance.a -> qlwf.conformance.b (qlwf.conformance.a.py:1) ; "
                                       "qlwf.conformance.b -> qlwf.conformance.a (qlwf.conformance.b.py:2)"]


def test_the_room_check_reports_an_import_its_room_may_not_make() -> None:
    graph = _graph(("qlwf.conformance.processes.fork_pool", "qlwf.conformance.lockstep.runner", False),
                   ("qlwf.conformance.exec.port", "qlwf.conformance.backends.registry", False),  # a listed module
                   ("qlwf.conformance.exec.port", "qlwf.conformance.backends", False),  # but not its room
                   ("qlwf.gate.checks", "qlwf.cli.explore", False),
                   ("qlwf.cli.check", "qlwf.gate.checks", False))
    assert room_violations(graph) == [
        "qlwf.conformance.exec.port -> qlwf.conformance.backends (qlwf.conformance.exec.port.py:3): room exec may "
        "import ('processes', 'report', 'backends.registry', 'drivers', 'generate.surface')",
        "qlwf.conformance.processes.fork_pool -> qlwf.conformance.lockstep.runner "
        "(qlwf.conformance.processes.fork_pool.py:1): room processes may import none",
        "qlwf.gate.checks -> qlwf.cli.explore (qlwf.gate.checks.py:4): room gate may import ('support',)"]


def test_the_architecture_doc_states_the_rooms() -> None:
    """docs/architecture.md's Rooms table: one row per room, each naming exactly what ROOMS allows."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("| room | what it is | may import (besides its layer's) |", 1)[1].split("\n\n", 1)[0]
    layers = {"conformance": "qlwf.conformance", "qlwf": "qlwf"}
    documented: dict[str, dict[str, set[str]]] = {layer: {} for layer in ROOMS}
    for row in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        top, room = cells[0].strip("`/").split("/")
        documented[layers[top]][room] = set(re.findall(r"`([a-z_.]+)`", cells[-1]))
    assert documented == {layer: {room: set(allowed) for room, allowed in rooms.items()}
                          for layer, rooms in ROOMS.items()}
