"""The registry's machinery: what an entry says (`BackendSpec`), the errors a backend's storage raises,
and `register` / `get` over the entries. The entries themselves are registered by the package
(`qlwf.conformance.backends`), which names each backend's factory by "module:attribute".

Modules of the harness import this module, never the package: the backends' own modules (the
registry's lazy targets) use these types, so the package importing them back would be a cycle.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from qlwf.impl.port import CommandPort

# What a backend may declare. `lost_commits`: every writing command retried after a lost response
# answers from durable state; `crash_points`: a crash harness kills it before every statement
# (needs `crashes`); `concurrency`: K workers share one store and the history is replayed (needs
# `concurrency` and `transaction_log`); `transaction_log`: its adapter reports every writing
# transaction to an observer; `snapshot`: it reads back its durable state; `driver`: an external
# process configured with --driver.
CAPABILITIES = frozenset({"snapshot", "lost_commits", "crash_points", "concurrency", "transaction_log", "driver"})
GATE_KINDS = ("conform", "faults", "concurrency")


class BackendFactory(Protocol):
    """Opens a fresh store per trace. A factory whose storage can go away under a run (a server) may
    also offer `storage_lost() -> str | None`: None while the storage answers, else why it does not;
    the runner asks when a step fails in a way that the storage's loss would explain (decisions Q-107)."""

    def open(self) -> CommandPort: ...

    def shutdown(self) -> None: ...


class BackendUnavailable(Exception):
    """The backend's storage cannot be provided here (no server binaries, no DSN): skip, or fail under CI."""


class BackendMisconfigured(Exception):
    """The backend was configured wrongly (a malformed DSN, a server that does not start): bad usage."""


class BackendLost(Exception):
    """The backend's storage went away during a run (its server killed or stopped): the step it was on
    is no evidence either way, and the run stops. Unknown in the gate, exit 3 in `qlwf conform`."""


class BackendBroken(Exception):
    """The backend stopped speaking its port (e.g. a driver process that died): the run is aborted.

    `report()` is the machine-readable account of it; `what` names the broken part in messages."""

    what = "backend"

    def report(self) -> dict[str, Any]:
        return {"message": str(self)}


class Provisioner:
    """Storage that is simply there (in-memory, a file, a child process): nothing to start or skip."""

    required_in_ci = False
    description = "nothing to provision"

    def prepare(self) -> None:
        """Start or check the storage up front, raising BackendUnavailable / BackendMisconfigured."""

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Around any use of the backend: its own 'no storage' errors become BackendUnavailable."""
        yield


LOCAL = Provisioner()


@dataclass(frozen=True)
class GateEntry:
    check: str  # the check's name in the gate (and in qlwf/gate/evidence_floors.json)
    kind: str  # one of GATE_KINDS
    description: str
    quick: Mapping[str, Any] = field(default_factory=dict)  # the kind's parameters in the quick profile
    full: Mapping[str, Any] = field(default_factory=dict)

    def params(self, quick: bool) -> Mapping[str, Any]:
        return self.quick if quick else self.full


def _resolve(target: str | Callable[..., Any]) -> Any:
    if callable(target):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class BackendSpec:
    name: str
    # "module:attribute" of a zero-argument callable returning a BackendFactory (imported lazily),
    # or that callable itself
    target: str | Callable[[], BackendFactory]
    description: str
    provisioner: Provisioner = LOCAL
    capabilities: frozenset[str] = frozenset({"snapshot"})
    crashes: str | Callable[..., Any] | None = None  # a CrashHarness
    concurrency: str | Callable[..., Any] | None = None  # (server=None) -> ConcurrencyHost
    gate: tuple[GateEntry, ...] = ()
    leg: str = "core"

    def create(self) -> BackendFactory:
        factory: BackendFactory = _resolve(self.target)()
        return factory

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def crash_harness(self) -> CrashHarness:
        if self.crashes is None:
            raise LookupError(f"backend {self.name} declares no crash harness")
        harness: CrashHarness = _resolve(self.crashes)
        return harness

    def concurrency_host(self, **options: Any) -> Any:
        if self.concurrency is None:
            raise LookupError(f"backend {self.name} does not support the concurrency check")
        return _resolve(self.concurrency)(**options)

    def requirement(self, message: str) -> tuple[str, str]:
        """The skip policy: ("fail" | "skip", message) for storage that is not there.

        Under CI=true a backend that CI must provide fails loudly; elsewhere it is skipped."""
        if self.provisioner.required_in_ci and os.environ.get("CI") == "true":
            return "fail", f"{message} (CI=true: the CI machine must provide the {self.name} backend)"
        return "skip", message


class CrashHarness(Protocol):
    """A backend's crash injection: `(quick, traces=None) -> CrashEvidence`, over the backend's choice
    of corpus traces for the gate (quick or full), or over `traces` when given."""

    def __call__(self, quick: bool, traces: list[Any] | None = None) -> CrashEvidence: ...


@dataclass(frozen=True)
class CrashEvidence:
    summary: str
    counts: Mapping[str, int]
    problems: tuple[str, ...] = ()
    gaps: tuple[str, ...] = ()


_REGISTRY: dict[str, BackendSpec] = {}


def _check(spec: BackendSpec) -> None:
    unknown = spec.capabilities - CAPABILITIES
    if unknown:
        raise ValueError(f"backend {spec.name}: unknown capabilities {sorted(unknown)}")
    if spec.has("crash_points") and spec.crashes is None:
        raise ValueError(f"backend {spec.name} declares crash_points without a crash harness")
    if spec.has("concurrency") and (spec.concurrency is None or not spec.has("transaction_log")):
        raise ValueError(f"backend {spec.name} declares concurrency without a host and a transaction log")
    for entry in spec.gate:
        if entry.kind not in GATE_KINDS:
            raise ValueError(f"backend {spec.name}: gate check {entry.check} has unknown kind {entry.kind!r}")
        needs = {"faults": "lost_commits", "concurrency": "concurrency"}.get(entry.kind)
        if needs is not None and not spec.has(needs):
            raise ValueError(f"backend {spec.name}: gate check {entry.check} needs the {needs} capability")


def register(name: str, target: str | Callable[[], BackendFactory], description: str, **fields: Any) -> BackendSpec:
    """Add (or replace) backend `name`; `fields` are BackendSpec's other fields."""
    spec = BackendSpec(name, target, description, **fields)
    _check(spec)
    _REGISTRY[name] = spec
    return spec


def retarget(name: str, target: str | Callable[[], BackendFactory], description: str) -> None:
    """Give a registered backend another factory, keeping what it declares (or register it plainly)."""
    if name in _REGISTRY:
        _REGISTRY[name] = replace(_REGISTRY[name], target=target, description=description)
    else:
        register(name, target, description)


def restore(spec: BackendSpec) -> None:
    """Put back an entry saved with get() (a run-scoped reconfiguration ends)."""
    _REGISTRY[spec.name] = spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> list[str]:
    return sorted(_REGISTRY)


def specs() -> list[BackendSpec]:
    """Every backend in registration order (the gate's order of backend checks)."""
    return list(_REGISTRY.values())


def get(name: str) -> BackendSpec:
    if name not in _REGISTRY:
        raise KeyError(f"unknown backend {name!r} (known: {', '.join(names())})")
    return _REGISTRY[name]



class _LazyProvisioner(Provisioner):
    """A provisioner named by "module:attribute", imported on first use (psycopg only when needed)."""

    def __init__(self, target: str, required_in_ci: bool, description: str) -> None:
        self._target = target
        self._inner: Provisioner | None = None
        self.required_in_ci = required_in_ci
        self.description = description

    def _get(self) -> Provisioner:
        if self._inner is None:
            self._inner = _resolve(self._target)()
        return self._inner

    def prepare(self) -> None:
        self._get().prepare()

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        with self._get().guard():
            yield


def lazy_provisioner(target: str, *, required_in_ci: bool, description: str) -> Provisioner:
    return _LazyProvisioner(target, required_in_ci, description)

