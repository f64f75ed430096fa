"""The import graph of the distribution, read off its source (tests/repo/test_layers.py checks it).

Modules are found from pyproject.toml's `[tool.setuptools] package-dir`: every `.py` file of every
package directory under each mapped root, named as it installs (`model/records.py` is
`qlwf.model.records`). An edge is one place where a module makes the interpreter load another module
of the distribution, wherever it stands:

* `import` and `from … import` statements, at module level or inside a function, relative ones
  resolved against the importing module's package; `from pkg import name` is an edge to the
  submodule `pkg.name` when there is one, else to `pkg`;
* string-loaded imports: `importlib.import_module(…)`, `__import__(…)`, `sys.modules.get(…)`,
  `sys.modules[…]` with an argument the scanner can evaluate (a literal, an f-string matched
  against the module names, a name bound in the same module to literals, a loop variable over
  such a name) — a call it cannot evaluate is listed in `Graph.dynamic`;
* module names written as data: a string constant that is exactly a module's dotted name, or
  `module:attribute` (the backend registry's lazy targets, `python -m` command lines, the tables
  of the self-test and of the mutants);
* `load_script(<path>, …)` of a repository script (`REPO / "docs" / "generate.py"`): an edge to
  the script, whose own imports are scanned as well.

An import inside `if TYPE_CHECKING:` is marked `type_checking`: it counts for the layers, not for
cycles (it never runs).
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

IMPORT_FUNCTIONS = {"import_module", "__import__"}
SCRIPT_LOADERS = {"load_script"}
_ANY = "\0"  # a formatted part of an f-string
_NAME = "[A-Za-z0-9_.]+"
_COPIES = {"list", "tuple", "set", "frozenset", "sorted", "fromkeys", "reversed"}
_MODULE_TEXT = re.compile(r"^qlwf(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?$")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module (dotted) or script (repository-relative path)
    target: str  # a module of the distribution (dotted) or a script (path)
    path: str  # repository-relative file of the import
    line: int
    kind: str  # "import" (a statement), "string" (loaded by name), "script" (load_script)
    type_checking: bool = False

    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Graph:
    modules: dict[str, Path]  # dotted name -> file (a package is its __init__.py)
    packages: set[str]
    scripts: dict[str, Path] = field(default_factory=dict)  # path -> file, for scripts reached by load_script
    imports: list[Import] = field(default_factory=list)
    dynamic: list[tuple[str, str]] = field(default_factory=list)  # (file:line, source text) not evaluated

    def out_of(self, source: str) -> list[Import]:
        return [i for i in self.imports if i.source == source]


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """pyproject.toml's package-dir: package name -> its directory."""
    config = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return {name: repo / directory for name, directory in mapping.items()}


def declared_packages(repo: Path = REPO) -> list[str]:
    """pyproject.toml's `[tool.setuptools] packages` list."""
    config = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    packages: list[str] = config["tool"]["setuptools"]["packages"]
    return packages


def discover(repo: Path = REPO) -> tuple[dict[str, Path], set[str]]:
    """Every module and every package of the distribution, as pyproject.toml's package-dir maps them."""
    roots = package_dirs(repo)
    modules: dict[str, Path] = {}
    packages: set[str] = set()

    def walk(name: str, directory: Path) -> None:
        if not (directory / "__init__.py").is_file():
            return
        packages.add(name)
        for path in sorted(directory.iterdir()):
            if path.is_dir() and path.name != "__pycache__":
                child = f"{name}.{path.name}"
                if child not in roots:  # a mapped subpackage is walked from its own root
                    walk(child, path)
            elif path.suffix == ".py":
                modules[name if path.stem == "__init__" else f"{name}.{path.stem}"] = path

    for name, directory in roots.items():
        walk(name, directory)
    return modules, packages


def scan(repo: Path = REPO) -> Graph:
    modules, packages = discover(repo)
    graph = Graph(modules, packages)
    pending = [(name, path, name in packages) for name, path in modules.items()]
    seen_scripts: set[str] = set()
    while pending:
        name, path, is_package = pending.pop()
        scanner = _Scanner(graph, repo, name, path, is_package)
        scanner.run()
        for script in scanner.scripts:
            if script not in seen_scripts:
                seen_scripts.add(script)
                graph.scripts[script] = repo / script
                pending.append((script, repo / script, False))
    graph.imports.sort(key=lambda i: (i.path, i.line, i.target))
    return graph


def imports_of(source: str, module: str, *, is_package: bool = False,
               known: Iterable[str] = ()) -> list[Import]:
    """The edges of one module's source (for the scanner's own tests): `known` are the other modules."""
    graph = Graph({m: Path(m) for m in {*known, module}}, {module} if is_package else set())
    scanner = _Scanner(graph, REPO, module, Path(f"{module}.py"), is_package, source=source)
    scanner.run()
    return graph.imports


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _is_sys_modules(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


class _Scanner(ast.NodeVisitor):
    def __init__(self, graph: Graph, repo: Path, name: str, path: Path, is_package: bool,
                 source: str | None = None) -> None:
        self.graph = graph
        self.repo = repo
        self.name = name
        self.path = path
        self.is_script = "/" in name
        self.package = name if is_package else name.rpartition(".")[0]
        try:
            self.rel = path.relative_to(repo).as_posix()
        except ValueError:
            self.rel = path.as_posix()
        self.source = path.read_text(encoding="utf-8") if source is None else source
        self.tree = ast.parse(self.source, filename=str(path))
        self.type_checking = 0
        self.scripts: list[str] = []
        self.bindings = self._bindings()

    def run(self) -> None:
        self.visit(self.tree)

    # ---- recording ------------------------------------------------------------------------------
    def add(self, target: str, node: ast.AST, kind: str) -> None:
        if target == self.name:
            return
        self.graph.imports.append(Import(self.name, target, self.rel, getattr(node, "lineno", 0), kind,
                                         self.type_checking > 0))

    def module_of(self, dotted: str) -> str | None:
        """The deepest module of the distribution that `dotted` names or lies in (None: not ours)."""
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):
            candidate = ".".join(parts[:n])
            if candidate in self.graph.modules:
                return candidate
        return None

    def absolute(self, name: str, level: int) -> str:
        if not level:
            return name
        base = self.package.split(".")
        base = base[: len(base) - level + 1]
        return ".".join([*base, *([name] if name else [])])

    # ---- statements -----------------------------------------------------------------------------
    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            target = self.module_of(alias.name)
            if target is not None:
                self.add(target, node, "import")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self.is_script and node.level:
            return
        base = self.absolute(node.module or "", node.level)
        for alias in node.names:
            target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in self.graph.modules else self.module_of(base)
            if target is not None:
                self.add(target, node, "import")

    # ---- string-loaded imports ------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node.func)
        if name in IMPORT_FUNCTIONS and node.args:
            package = self._package_argument(node)
            self._load_by_name(node, node.args[0], package)
        elif (isinstance(node.func, ast.Attribute) and node.func.attr == "get" and _is_sys_modules(node.func.value)
              and node.args):
            self._load_by_name(node, node.args[0], None)
        elif name in SCRIPT_LOADERS and node.args:
            self._load_script(node, node.args[0])
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_sys_modules(node.value):
            self._load_by_name(node, node.slice, None)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _MODULE_TEXT.match(node.value):
            module = node.value.partition(":")[0]
            if module in self.graph.modules:
                self.add(module, node, "string")

    def _package_argument(self, node: ast.Call) -> str | None:
        given = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "package"), None)
        if isinstance(given, ast.Name) and given.id in ("__name__", "__package__"):
            return self.name if given.id == "__name__" and self.package == self.name else self.package
        if isinstance(given, ast.Constant) and isinstance(given.value, str):
            return given.value
        return None

    def _load_by_name(self, node: ast.AST, argument: ast.expr, package: str | None) -> None:
        templates = self._texts(argument)
        if templates is None:
            self.graph.dynamic.append((f"{self.rel}:{getattr(node, 'lineno', 0)}", ast.unparse(node)))
            return
        for template in templates:
            level = len(template) - len(template.lstrip("."))
            if level:
                if package is None:
                    continue
                base = package.split(".")
                template = ".".join([*base[: len(base) - level + 1], template[level:]])
            regex = re.compile(_NAME.join(re.escape(part) for part in template.split(_ANY)))
            for module in self.graph.modules:
                if regex.fullmatch(module):
                    self.add(module, node, "string")

    def _texts(self, node: ast.expr) -> list[str] | None:
        """The module names `node` may evaluate to (`_ANY` stands for a formatted part), or None if unknown."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            out = [""]
            for value in node.values:
                if isinstance(value, ast.Constant):
                    choices = [str(value.value)]
                elif (isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name)
                      and value.value.id in self.bindings):
                    choices = self.bindings[value.value.id]
                else:
                    choices = [_ANY]
                out = [prefix + choice for prefix in out for choice in choices]
            return out
        if isinstance(node, ast.Name) and node.id in self.bindings:
            return self.bindings[node.id]
        return None

    def _load_script(self, node: ast.Call, argument: ast.expr) -> None:
        parts: list[str] = []

        def path_parts(expr: ast.expr) -> None:  # `base / "docs" / "generate.py"`: the literal parts, in order
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
                path_parts(expr.left)
                path_parts(expr.right)
            elif isinstance(expr, ast.Constant) and isinstance(expr.value, str):
                parts.append(expr.value)

        path_parts(argument)
        target = self.repo.joinpath(*parts) if parts else None
        if target is None or not target.is_file():
            self.graph.dynamic.append((f"{self.rel}:{node.lineno}", ast.unparse(node)))
            return
        script = target.relative_to(self.repo).as_posix()
        self.scripts.append(script)
        self.add(script, node, "script")

    # ---- names bound to literal module names ----------------------------------------------------
    def _bindings(self) -> dict[str, list[str]]:
        """name -> the strings it may hold, for names bound only to literals (or collections of them,
        or loop variables over such names) anywhere in the module."""
        values: dict[str, list[str]] = {}
        unknown: set[str] = set()

        def strings(expr: ast.expr) -> list[str] | None:
            if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
                return [expr.value]
            if isinstance(expr, ast.Name) and expr.id in values and expr.id not in unknown:
                return values[expr.id]
            if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in (
                    "values", "keys", "items", "get"):  # of a dict of names (`.get` may also give its default)
                found = strings(expr.func.value)
                default = strings(expr.args[1]) if expr.func.attr == "get" and len(expr.args) > 1 else []
                return None if found is None or default is None else found + default
            if isinstance(expr, ast.Call) and _call_name(expr.func) in _COPIES and len(expr.args) == 1:
                return strings(expr.args[0])
            if isinstance(expr, ast.Subscript):  # an element of a collection of names
                return strings(expr.value)
            if isinstance(expr, ast.IfExp):
                body, orelse = strings(expr.body), strings(expr.orelse)
                return None if body is None or orelse is None else body + orelse
            if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
                out: list[str] = []
                for element in expr.elts:
                    got = strings(element)
                    if got is None:
                        return None
                    out += got
                return out
            if isinstance(expr, ast.Dict):
                out = []
                for item in [*expr.keys, *expr.values]:  # a key is None for `**other`
                    got = strings(item) if item is not None else None
                    if got is not None:
                        out += got
                return out
            return None

        def bind(target: ast.expr, value: list[str] | None) -> None:
            if isinstance(target, (ast.Tuple, ast.List)):  # unpacking: each name may hold any of the values
                for element in target.elts:
                    bind(element, value)
            elif isinstance(target, ast.Name):
                if value is None:
                    unknown.add(target.id)
                else:
                    values.setdefault(target.id, []).extend(value)

        for _ in range(2):  # twice: a loop may come before the assignment it iterates in the text
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        bind(target, strings(node.value))
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    bind(node.target, strings(node.value))
                elif isinstance(node, (ast.For, ast.comprehension)):
                    bind(node.target, strings(node.iter))
        return {k: sorted(set(v)) for k, v in values.items() if k not in unknown}


def cycles(graph: Graph) -> Iterator[list[str]]:
    """Every import cycle of runtime edges (TYPE_CHECKING-only imports never run), one per strongly
    connected component, as a shortest cycle through its smallest module."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_edges_from((i.source, i.target) for i in graph.imports if not i.type_checking)
    for component in nx.strongly_connected_components(g):
        if len(component) < 2:
            continue
        start = min(component)
        sub = g.subgraph(component)
        best: list[str] | None = None
        for successor in sub.successors(start):
            path = nx.shortest_path(sub, successor, start)
            if best is None or len(path) < len(best):
                best = path
        assert best is not None
        yield [start, *best]
