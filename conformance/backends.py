"""The registry of conformance backends: everything the gate, the CLI and the tests know of a backend.

A backend is one package plus one `register(...)` call. An entry says:

* `target` — the factory: a zero-argument callable (or its "module:attribute", imported lazily, so
  a backend whose driver is missing does not break the others) returning a `BackendFactory`, which
  opens a fresh, empty store per trace (`open()`, a `CommandPort` whose clock is a `FixedClock`)
  and releases shared resources at the end of a run (`shutdown()`);
* `provisioner` — how its storage comes to exist (`prepare()` starts or checks it up front), which
  errors mean "no storage here" (`guard()` turns them into `BackendUnavailable`) and whether a CI
  run must fail rather than skip without it (`required_in_ci`);
* `capabilities` — what the harnesses may do with it (CAPABILITIES), with the entry points that
  need one: `crashes` (crash injection, see `CrashHarness`) and `concurrency` (a
  `conformance.concurrency.ConcurrencyHost`);
* `gate` — the gate checks it contributes (`GateEntry`: check name, kind, parameters per profile),
  on `leg` (what `qlwf check --skip LEG` leaves out).

The gate (qlwf/checks.py), `qlwf conform` / `qlwf replay` and tests/test_backends.py iterate this
registry; nothing else names a backend. `QLWF_BACKEND_MODULES=pkg.mod,...` imports further modules
that register backends of their own (a plugin outside this repository, or a test's throwaway one).
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
    check: str  # the check's name in the gate (and in model/gate_evidence.json)
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


class SqliteBackend:
    """A private in-memory SQLite database per trace (storage.md §6.1): a closed trace's store comes
    back emptied for the next one, keeping its compiled statements (decisions Q-63)."""

    def __init__(self, path: str = ":memory:", *, reuse: bool = True) -> None:
        self.path = path
        self.reuse = reuse and path == ":memory:"
        self._pool: Any = None

    def open(self) -> CommandPort:
        from qlwf.impl.sqlite.adapter import SqliteAdapter

        if not self.reuse:
            return SqliteAdapter(self.path)
        if self._pool is None:
            from qlwf.impl.sqlite.memory import MemoryStorePool

            self._pool = MemoryStorePool()
        return SqliteAdapter(pool=self._pool)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


class ModelBackend:
    """The model behind the port (a self-check of the harness and of recorded traces)."""

    def open(self) -> CommandPort:
        from .model_port import ModelPort

        return ModelPort()

    def shutdown(self) -> None:
        pass


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


SEED = 20261129  # the gate's seed of generated traces
POSTGRES = lazy_provisioner("qlwf.impl.postgres.conformance:PostgresProvisioner", required_in_ci=True,
                            description="QLWF_PG_DSN, or a throwaway cluster from the local PostgreSQL binaries")

register("sqlite", "qlwf.conformance.backends:SqliteBackend", "SQLite, one in-memory database per trace",
         capabilities=frozenset({"snapshot", "lost_commits", "crash_points", "concurrency", "transaction_log"}),
         crashes="qlwf.conformance.crashes:gate_crashes",
         concurrency="qlwf.impl.sqlite.concurrency:SqliteConcurrencyHost",
         gate=(GateEntry("conform-sqlite", "conform", "corpus + generated traces, SQLite vs model, every step",
                         {"traces": 800, "jobs": 2}, {"traces": 1500, "jobs": 2}),
               GateEntry("faults-sqlite", "faults", "lost commit responses and crashes at every statement boundary")))
register("model", "qlwf.conformance.backends:ModelBackend", "the reference model itself")
register("exec-sqlite", "qlwf.conformance.exec_port:sqlite_driver",
         "the SQLite reference driver (python -m qlwf.impl.sqlite.driver) over qlwf-backend@1",
         capabilities=frozenset({"snapshot", "driver"}),
         gate=(GateEntry("exec-sqlite", "conform",
                         "corpus + generated traces through the SQLite driver process (qlwf-backend@1)",
                         {"traces": 8, "jobs": 2}, {"traces": 24, "jobs": 2}),))
register("postgres", "qlwf.impl.postgres.conformance:PostgresBackend",
         "PostgreSQL (QLWF_PG_DSN or a throwaway cluster), one database emptied per trace",
         provisioner=POSTGRES, leg="postgres",
         capabilities=frozenset({"snapshot", "lost_commits", "crash_points", "concurrency", "transaction_log"}),
         crashes="qlwf.conformance.pg_crashes:gate_crashes",
         concurrency="qlwf.impl.postgres.conformance:PostgresConcurrencyHost",
         gate=(GateEntry("conform-postgres", "conform", "corpus + generated traces, PostgreSQL vs model, every step",
                         {"traces": 30, "jobs": 1}, {"traces": 120, "jobs": 1}),
               # The quick gate runs a short K=8 too: some faults (a clock read out of lock order) show only there.
               GateEntry("concurrency-postgres", "concurrency",
                         "K = 2, 4, 8 workers; history replays through the model",
                         {"ks": (2, 4, 8), "ops": 40}, {"ks": (2, 4, 8), "ops": 60}),
               GateEntry("faults-postgres", "faults",
                         "lost commit responses, backend kills at every statement, server crashes",
                         {"invariants": False}, {"invariants": False})))
register("exec", "qlwf.conformance.exec_port:unconfigured",
         "an external driver speaking qlwf-backend@1 over stdin/stdout (--driver CMD)",
         capabilities=frozenset({"snapshot", "driver"}))
register("exec-postgres", "qlwf.conformance.exec_port:postgres_driver",
         "the PostgreSQL reference driver (python -m qlwf.impl.postgres.driver) over qlwf-backend@1",
         provisioner=POSTGRES, leg="postgres", capabilities=frozenset({"snapshot", "driver"}))


def _load_plugins() -> None:
    for module in filter(None, (m.strip() for m in os.environ.get("QLWF_BACKEND_MODULES", "").split(","))):
        importlib.import_module(module)


_load_plugins()
