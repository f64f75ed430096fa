"""The surfaces of ql3's two storage adapters as the harness reads them: the `hello` wire form of
impl/ql3_surfaces.py (the facts, stated once, with their sources in docs/ql3-adapters.md) parsed into
`Surface`s. A driver over one of them declares its profile's surface in `hello` (docs/protocol.md);
`qlwf conform --profile NAME` generates traces inside it.
"""

from __future__ import annotations

from typing import Final

from qlwf.conformance.generate.surface import Surface
from qlwf.impl.ql3_surfaces import CLUSTER_COMMANDS, CLUSTER_SURFACE, EDGE_COMMANDS, EDGE_SURFACE

EDGE: Final = Surface.from_hello(EDGE_COMMANDS, EDGE_SURFACE)
CLUSTER: Final = Surface.from_hello(CLUSTER_COMMANDS, CLUSTER_SURFACE)

PROFILES: Final = {"edge": EDGE, "cluster": CLUSTER}


def profile(name: str) -> Surface:
    """The named profile's surface; KeyError names the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"no profile {name!r}; known: {', '.join(PROFILES)}") from None
