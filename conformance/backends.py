"""Registry of conformance backends: `--backend NAME` resolves here.

A backend factory opens a fresh, empty store per trace (`open()`) and releases shared resources
at the end of a run (`shutdown()`). Factories are registered by import path and imported lazily,
so a backend whose driver is missing does not break the others. `open()` returns a
`qlwf.impl.port.CommandPort` whose clock is a `FixedClock`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from qlwf.impl.port import CommandPort


class BackendFactory(Protocol):
    def open(self) -> CommandPort: ...

    def shutdown(self) -> None: ...


@dataclass(frozen=True)
class BackendSpec:
    name: str
    # "module:attribute" of a zero-argument callable returning a BackendFactory (imported lazily),
    # or that callable itself
    target: str | Callable[[], BackendFactory]
    description: str

    def create(self) -> BackendFactory:
        if callable(self.target):
            return self.target()
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)()


class SqliteBackend:
    """A private in-memory SQLite database per trace (storage.md §6.1)."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path

    def open(self) -> CommandPort:
        from qlwf.impl.sqlite.adapter import SqliteAdapter

        return SqliteAdapter(self.path)

    def shutdown(self) -> None:
        pass


class ModelBackend:
    """The model behind the port (a self-check of the harness and of recorded traces)."""

    def open(self) -> CommandPort:
        from .model_port import ModelPort

        return ModelPort()

    def shutdown(self) -> None:
        pass


_REGISTRY: dict[str, BackendSpec] = {}


def register(name: str, target: str | Callable[[], BackendFactory], description: str) -> None:
    _REGISTRY[name] = BackendSpec(name, target, description)


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> BackendSpec:
    if name not in _REGISTRY:
        raise KeyError(f"unknown backend {name!r} (known: {', '.join(names())})")
    return _REGISTRY[name]


register("sqlite", "qlwf.conformance.backends:SqliteBackend", "SQLite, one in-memory database per trace")
register("model", "qlwf.conformance.backends:ModelBackend", "the reference model itself")
register("postgres", "qlwf.impl.postgres.conformance:PostgresBackend",
         "PostgreSQL (QLWF_PG_DSN or a throwaway cluster), one database emptied per trace")
register("exec", "qlwf.conformance.exec_port:unconfigured",
         "an external driver speaking qlwf-backend@1 over stdin/stdout (--driver CMD)")
register("exec-sqlite", "qlwf.conformance.exec_port:sqlite_driver",
         "the SQLite reference driver (python -m qlwf.impl.sqlite.driver) over qlwf-backend@1")
register("exec-postgres", "qlwf.conformance.exec_port:postgres_driver",
         "the PostgreSQL reference driver (python -m qlwf.impl.postgres.driver) over qlwf-backend@1")
