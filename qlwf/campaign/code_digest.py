"""Which qlwf a process runs: a digest of the source it imports (decisions Q-120).

A campaign's shards must all run the checkout that planned them: a Dask worker with another qlwf
installed would return results of another model under this campaign's seed. The digest covers what
the distribution ships (pyproject.toml: the five package roots, their Python modules and package data),
read from where each package was imported, so an editable checkout and a wheel of the same tree agree.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path

ROOTS = ("qlwf", "qlwf.model", "qlwf.impl", "qlwf.conformance", "qlwf.proofs")
SHIPPED = frozenset({".py", ".json", ".sql"})


def _package_files(root: Path) -> list[Path]:
    """The shipped files under one package root: in directories that are packages, no caches."""
    return sorted(p for p in root.rglob("*")
                  if p.suffix in SHIPPED and p.is_file() and "__pycache__" not in p.parts
                  and (p.parent / "__init__.py").is_file())


@functools.cache
def code_digest() -> str:
    """sha256 over every shipped file's package-relative name and bytes, in name order."""
    h = hashlib.sha256()
    for name in ROOTS:
        module = importlib.import_module(name)
        root = Path(module.__file__ or "").parent
        for path in _package_files(root):
            h.update(f"{name}:{path.relative_to(root).as_posix()}".encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()
