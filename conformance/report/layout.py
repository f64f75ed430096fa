"""Node positions for a workflow DAG: Graphviz's `dot` where installed, a layered layout otherwise.

Both return {node: (x, y)} in points with y growing downwards (SVG's convention), each node's
centre; callers draw boxes of NODE_W x NODE_H around it. `dot` is run as a program (`-Tplain`), so
no Python binding to Graphviz is needed; any failure of it falls back to the layered layout.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Sequence

import networkx as nx

NODE_W = 132.0
NODE_H = 44.0
GAP_X = 28.0
GAP_Y = 56.0
POINTS_PER_INCH = 72.0

Positions = dict[str, tuple[float, float]]


def dag(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return g


def layered(g: nx.DiGraph) -> Positions:
    """Longest-path layers top to bottom (a need above its dependants), nodes sorted within a layer."""
    pos: Positions = {}
    layers: Sequence[list[str]] = [sorted(layer) for layer in nx.topological_generations(g)]
    width = max((len(layer) for layer in layers), default=0)
    for row, layer in enumerate(layers):
        offset = (width - len(layer)) * (NODE_W + GAP_X) / 2
        for col, node in enumerate(layer):
            pos[node] = (offset + col * (NODE_W + GAP_X) + NODE_W / 2, row * (NODE_H + GAP_Y) + NODE_H / 2)
    return pos


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot(g: nx.DiGraph, timeout_s: float = 20.0) -> Positions | None:
    """Positions from `dot -Tplain`, or None when dot is missing or fails."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    w, h = NODE_W / POINTS_PER_INCH, NODE_H / POINTS_PER_INCH
    lines = ["digraph G {", f"  node [shape=box, fixedsize=true, width={w:.3f}, height={h:.3f}];",
             f"  nodesep={GAP_X / POINTS_PER_INCH:.3f}; ranksep={GAP_Y / POINTS_PER_INCH:.3f};"]
    lines += [f"  {_quote(n)};" for n in sorted(g.nodes)]
    lines += [f"  {_quote(a)} -> {_quote(b)};" for a, b in sorted(g.edges)]
    lines.append("}")
    try:
        done = subprocess.run([exe, "-Tplain"], input="\n".join(lines), capture_output=True, text=True,
                              timeout=timeout_s, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return _parse_plain(done.stdout, set(g.nodes))


def _unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] == '"':
        return token[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return token


def _parse_plain(text: str, names: set[str]) -> Positions | None:
    """`graph scale W H` then `node NAME X Y ...` lines (inches, y up); flipped to y down."""
    height = 0.0
    raw: dict[str, tuple[float, float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["graph"] and len(parts) >= 4:
            height = float(parts[3])
        elif parts[:1] == ["node"] and len(parts) >= 4:
            raw[_unquote(parts[1])] = (float(parts[2]), float(parts[3]))
    if set(raw) != names:
        return None  # a name dot spelled differently than we did: do not guess
    return {n: (x * POINTS_PER_INCH, (height - y) * POINTS_PER_INCH) for n, (x, y) in raw.items()}


def positions(g: nx.DiGraph, engine: str = "auto") -> tuple[Positions, str]:
    """(positions, engine used): engine "dot", "layered" or "auto" (dot if it works, else layered)."""
    if engine not in ("auto", "dot", "layered"):
        raise ValueError(f"unknown layout engine {engine!r}")
    if engine != "layered":
        found = dot(g)
        if found is not None:
            return found, "dot"
        if engine == "dot":
            raise RuntimeError("Graphviz `dot` is not installed or failed")
    return layered(g), "layered"
