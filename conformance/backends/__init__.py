"""The registry of conformance backends: everything the gate, the CLI and the tests know of a backend.

Layer: conformance (it may import `qlwf.model`, `qlwf.impl` and `qlwf.proofs`). This package is the list
of built-in backends, each named by "module:attribute" and imported only when used: `sqlite`, `model`
and `postgres` (one module each here: `sqlite.py`, `model.py`, `postgres.py`, the PostgreSQL one on a
throwaway cluster from `conformance/provision/`), the crash harnesses and the driver processes. The
machinery (`BackendSpec`, the errors, `register`, `get`) is `registry.py`, re-exported here; the
harness's own modules import `registry` and never this package, which names them.

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

The gate (qlwf/gate/checks.py), `qlwf conform` / `qlwf replay` and
tests/conformance/backends/test_backends.py iterate this
registry; nothing else names a backend. `QLWF_BACKEND_MODULES=pkg.mod,...` imports further modules
that register backends of their own (a plugin outside this repository, or a test's throwaway one).
"""

from __future__ import annotations

import importlib
import os

from .model import ModelBackend
from .registry import (
    CAPABILITIES,
    GATE_KINDS,
    LOCAL,
    BackendBroken,
    BackendFactory,
    BackendLost,
    BackendMisconfigured,
    BackendSpec,
    BackendUnavailable,
    CrashEvidence,
    CrashHarness,
    GateEntry,
    Provisioner,
    get,
    lazy_provisioner,
    names,
    register,
    restore,
    retarget,
    specs,
    unregister,
)
from .sqlite import SqliteBackend

__all__ = [
    "CAPABILITIES",
    "GATE_KINDS",
    "LOCAL",
    "POSTGRES",
    "SEED",
    "BackendBroken",
    "BackendFactory",
    "BackendLost",
    "BackendMisconfigured",
    "BackendSpec",
    "BackendUnavailable",
    "CrashEvidence",
    "CrashHarness",
    "GateEntry",
    "ModelBackend",
    "Provisioner",
    "SqliteBackend",
    "get",
    "lazy_provisioner",
    "names",
    "register",
    "restore",
    "retarget",
    "specs",
    "unregister",
]

SEED = 20261129  # the gate's seed of generated traces
POSTGRES = lazy_provisioner("qlwf.conformance.backends.postgres:PostgresProvisioner", required_in_ci=True,
                            description="QLWF_PG_DSN, or a throwaway cluster from the local PostgreSQL binaries")

register("sqlite", "qlwf.conformance.backends.sqlite:SqliteBackend", "SQLite, one in-memory database per trace",
         capabilities=frozenset({"snapshot", "lost_commits", "crash_points", "concurrency", "transaction_log"}),
         crashes="qlwf.conformance.faults.sqlite_crashes:gate_crashes",
         concurrency="qlwf.impl.sqlite.concurrency:SqliteConcurrencyHost",
         gate=(GateEntry("conform-sqlite", "conform", "corpus + generated traces, SQLite vs model, every step",
                         {"traces": 800, "jobs": 2}, {"traces": 1500, "jobs": 2}),
               GateEntry("faults-sqlite", "faults", "lost commit responses and crashes at every statement boundary")))
register("model", "qlwf.conformance.backends.model:ModelBackend", "the reference model itself")
register("exec-sqlite", "qlwf.conformance.exec.port:sqlite_driver",
         "the SQLite reference driver (python -m qlwf.impl.sqlite.driver) over qlwf-backend@1",
         capabilities=frozenset({"snapshot", "driver"}),
         gate=(GateEntry("exec-sqlite", "conform",
                         "corpus + generated traces through the SQLite driver process (qlwf-backend@1)",
                         {"traces": 8, "jobs": 2}, {"traces": 24, "jobs": 2}),))
register("postgres", "qlwf.conformance.backends.postgres:PostgresBackend",
         "PostgreSQL (QLWF_PG_DSN or a throwaway cluster), one database emptied per trace",
         provisioner=POSTGRES, leg="postgres",
         capabilities=frozenset({"snapshot", "lost_commits", "crash_points", "concurrency", "transaction_log"}),
         crashes="qlwf.conformance.faults.pg_crashes:gate_crashes",
         concurrency="qlwf.conformance.backends.postgres:PostgresConcurrencyHost",
         gate=(GateEntry("conform-postgres", "conform", "corpus + generated traces, PostgreSQL vs model, every step",
                         {"traces": 30, "jobs": 1}, {"traces": 120, "jobs": 1}),
               # The quick gate runs a short K=8 too: some faults (a clock read out of lock order) show only there.
               GateEntry("concurrency-postgres", "concurrency",
                         "K = 2, 4, 8 workers; history replays through the model",
                         {"ks": (2, 4, 8), "ops": 40}, {"ks": (2, 4, 8), "ops": 60}),
               GateEntry("faults-postgres", "faults",
                         "lost commit responses, backend kills at every statement, server crashes",
                         {"invariants": False}, {"invariants": False})))
register("exec", "qlwf.conformance.exec.port:unconfigured",
         "an external driver speaking qlwf-backend@1 over stdin/stdout (--driver CMD)",
         capabilities=frozenset({"snapshot", "driver"}))
register("exec-postgres", "qlwf.conformance.exec.port:postgres_driver",
         "the PostgreSQL reference driver (python -m qlwf.conformance.drivers.postgres) over qlwf-backend@1",
         provisioner=POSTGRES, leg="postgres", capabilities=frozenset({"snapshot", "driver"}))


def _load_plugins() -> None:
    for module in filter(None, (m.strip() for m in os.environ.get("QLWF_BACKEND_MODULES", "").split(","))):
        importlib.import_module(module)


_load_plugins()
