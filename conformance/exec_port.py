"""The `exec` conformance backend: any implementation behind the qlwf-backend@1 protocol (docs/protocol.md).

`ExecBackend` starts the driver once per factory (one per run, one per `--jobs` worker), says
`hello`, and gives each trace a fresh store with `reset`. `ExecPort` is the `CommandPort` over the
connection: `apply` for commands, `snapshot` for the read-back, `corrupt` for drift traces when the
driver offers the hook. The driver's answers are checked message by message against the protocol;
a breach is a `DriverFailure` (the lockstep reports it as a `driver` divergence), after which the
driver is dead and the run stops: the next `open()` raises the same failure.

With `snapshotWithApply`, an `apply` asks for the snapshot too (`snapshot: true`) and the port
answers the harness's following `snapshot()` from it: one round trip per step instead of two.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qlwf.impl.driver_protocol import PROTOCOL, package_version
from qlwf.impl.port import COMMAND_NAMES, SNAPSHOT_KINDS, CommandPort, FixedClock, Record, Snapshot
from qlwf.model.errors import ERROR_CLASSES, Unavailable, error_from_json

from . import backends
from .exec_process import DriverFailure, DriverProcess

DEFAULT_TIMEOUT_S = 10.0
POSTGRES_TIMEOUT_S = 60.0  # the first request may wait for a throwaway cluster to start
HARNESS = {"name": "qlwf", "version": package_version()}
_SNAPSHOT_KEYS = frozenset(SNAPSHOT_KINDS)


class DriverRefused(RuntimeError):
    """The driver answered a command with `failure` (it crashed or cannot run it): a backend crash."""


@dataclass(frozen=True)
class Capabilities:
    driver: str
    commands: frozenset[str]
    snapshot_with_apply: bool
    fault_hooks: frozenset[str]


class DriverConnection:
    """Requests with ids, responses checked against the protocol's shapes."""

    def __init__(self, command: Sequence[str], timeout_s: float,
                 transcript: list[tuple[str, str]] | None = None) -> None:
        self.process = DriverProcess(command, timeout_s, transcript=transcript)
        self._next_id = 0
        try:
            self.capabilities = self._hello()
        except BaseException:
            self.process.kill()
            raise

    def request(self, kind: str, /, **fields: Any) -> Record:
        """One request/response; the response's own keys (id and type removed), or DriverRefused."""
        self._next_id += 1
        rid = self._next_id
        response = self.process.exchange({"id": rid, "type": kind, **fields})
        if response.get("id") != rid or type(response.get("id")) is not int:
            self._breach(f"the response id {response.get('id')!r} does not echo the request id {rid}")
        if response.get("type") != kind:
            self._breach(f"a {kind} request was answered with type {response.get('type')!r}")
        body = {k: v for k, v in response.items() if k not in ("id", "type")}
        if "failure" in body:
            failure = body["failure"]
            if set(body) != {"failure"} or not isinstance(failure, dict) or not isinstance(failure.get("message"),
                                                                                       str):
                self._breach("a failure response must be exactly {id, type, failure: {message}}")
            raise DriverRefused(f"the driver failed the {kind} request: {failure['message']}")
        return body

    def _breach(self, message: str) -> Any:
        self.process.fail("protocol", message)

    def expect_keys(self, kind: str, body: Record, required: set[str], optional: frozenset[str] = frozenset()) -> None:
        missing, extra = required - set(body), set(body) - required - optional
        if missing or extra:
            self._breach(f"{kind} response: missing keys {sorted(missing)}, unexpected keys {sorted(extra)}")

    def _hello(self) -> Capabilities:
        try:
            body = self.request("hello", protocol=PROTOCOL, harness=HARNESS)
        except DriverRefused as e:
            self.process.fail("refused", str(e))
        self.expect_keys("hello", body, {"protocol", "driver", "capabilities"})
        if body["protocol"] != PROTOCOL:
            self._breach(f"the driver speaks {body['protocol']!r}, the harness {PROTOCOL!r}")
        driver, caps = body["driver"], body["capabilities"]
        if not (isinstance(driver, dict) and isinstance(driver.get("name"), str)
                and isinstance(driver.get("version"), str)):
            self._breach("hello.driver must be {name, version} strings")
        if not isinstance(caps, dict):
            self._breach("hello.capabilities must be an object")
        self.expect_keys("hello.capabilities", caps,
                         {"commands", "snapshot", "snapshotWithApply", "clockInjection", "faultHooks"})
        for key in ("commands", "faultHooks"):
            if not (isinstance(caps[key], list) and all(isinstance(c, str) for c in caps[key])):
                self._breach(f"hello.capabilities.{key} must be a list of strings")
        for key in ("snapshot", "snapshotWithApply", "clockInjection"):
            if type(caps[key]) is not bool:
                self._breach(f"hello.capabilities.{key} must be a boolean")
        # Lockstep compares the durable state after every step at the harness's time: both are required.
        if not caps["snapshot"] or not caps["clockInjection"]:
            self.process.fail("refused", "lockstep conformance needs snapshot and clockInjection; the driver "
                                         f"offers snapshot={caps['snapshot']}, clockInjection={caps['clockInjection']}")
        return Capabilities(f"{driver['name']} {driver['version']}", frozenset(caps["commands"]),
                            caps["snapshotWithApply"], frozenset(caps["faultHooks"]))

    def check_snapshot(self, snapshot: Any) -> Snapshot:
        if not isinstance(snapshot, dict) or set(snapshot) != _SNAPSHOT_KEYS:
            keys = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
            self._breach(f"a snapshot must have exactly the kinds {list(SNAPSHOT_KINDS)}, got {keys}")
        for kind, records in snapshot.items():
            if not isinstance(records, list) or not all(type(r) is dict for r in records):
                self._breach(f"snapshot.{kind} must be a list of record objects")
        return snapshot

    def check_outcome(self, outcome: Any) -> Record:
        if isinstance(outcome, dict) and len(outcome) == 1:
            if "ok" in outcome and isinstance(outcome["ok"], dict):
                return outcome
            error = outcome.get("error")
            if (isinstance(error, dict) and error.get("class") in ERROR_CLASSES
                    and isinstance(error.get("code"), str) and isinstance(error.get("reason"), str)
                    and set(error) <= {"class", "code", "reason", "message"}
                    and isinstance(error.get("message", ""), str)):
                return outcome
        return self._breach('an apply outcome must be {"ok": {...}} or {"error": {class, code, reason[, message]}}')

    def close(self) -> None:
        """`close`, then the process is given the timeout to exit and is killed if it has not."""
        if self.process.failure is None:
            # closing a broken driver: it is killed below either way
            with contextlib.suppress(DriverFailure, DriverRefused):
                self.expect_keys("close", self.request("close"), set())
        self.process.finish(self.process.timeout_s)


class ExecPort(CommandPort):
    """One trace's store inside the driver."""

    def __init__(self, connection: DriverConnection, batch_snapshots: bool = True) -> None:
        self.clock = FixedClock()
        self.connection = connection
        self.batch = batch_snapshots and connection.capabilities.snapshot_with_apply
        self._pending: Snapshot | None = None  # the snapshot returned with the last apply, unread
        self._closed = False

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        self._check_open()
        if name not in COMMAND_NAMES:
            raise ValueError(f"not a command: {name!r}")
        if name not in self.connection.capabilities.commands:
            raise DriverRefused(f"the driver does not implement {name}")
        self.set_step_time(now)
        self._pending = None
        body = self.connection.request("apply", command=name, args=args, atMs=self.clock.value,
                                       **({"snapshot": True} if self.batch else {}))
        self.connection.expect_keys("apply", body, {"outcome", "snapshot"} if self.batch else {"outcome"})
        outcome = self.connection.check_outcome(body["outcome"])
        if self.batch:
            self._pending = self.connection.check_snapshot(body["snapshot"])
        if "error" in outcome:
            raise error_from_json(outcome["error"])
        return outcome["ok"]

    def snapshot(self) -> Snapshot:
        self._check_open()
        if self._pending is not None:
            snapshot, self._pending = self._pending, None
            return snapshot
        body = self.connection.request("snapshot")
        self.connection.expect_keys("snapshot", body, {"snapshot"})
        return self.connection.check_snapshot(body["snapshot"])

    def close(self) -> None:
        self._closed = True
        self._pending = None

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("", "storage_closed", "the exec port is closed")


class ExecFaultPort(ExecPort):
    """An `ExecPort` whose driver offers the `corrupt` fault hook (`FaultInjection`)."""

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        self._check_open()
        self._pending = None
        self.connection.expect_keys("corrupt", self.connection.request("corrupt", kind=kind, key=key, patch=patch),
                                    set())


class ExecBackend:
    """BackendFactory of `--backend exec`: one driver process, a `reset` store per trace."""

    def __init__(self, command: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
                 batch_snapshots: bool = True, transcript: list[tuple[str, str]] | None = None) -> None:
        self.command = list(command)
        self.timeout_s = timeout_s
        self.batch_snapshots = batch_snapshots
        self.transcript = transcript  # records the wire (tests, docs/protocol.md's worked example)
        self.connection: DriverConnection | None = None
        self.failure: DriverFailure | None = None

    def open(self) -> CommandPort:
        if self.failure is not None:  # a broken driver ends the run: never a silent restart
            raise self.failure
        try:
            if self.connection is None:
                self.connection = DriverConnection(self.command, self.timeout_s, self.transcript)
            elif self.connection.process.failure is not None:
                raise self.connection.process.failure
            try:
                self.connection.expect_keys("reset", self.connection.request("reset"), set())
            except DriverRefused as e:
                self.connection.process.fail("refused", str(e))
        except DriverFailure as e:
            self.failure = e
            raise
        port_class = ExecFaultPort if "corrupt" in self.connection.capabilities.fault_hooks else ExecPort
        return port_class(self.connection, self.batch_snapshots)

    def shutdown(self) -> None:
        if self.connection is not None:
            connection, self.connection = self.connection, None
            connection.close()


def unconfigured() -> ExecBackend:
    """`--backend exec` before `register_driver` gave it a command."""
    raise ValueError("the exec backend needs a driver command (qlwf conform --backend exec --driver CMD)")


def reference_driver(backend: str) -> list[str]:
    """The command of an in-repo reference driver, run by this interpreter."""
    return [sys.executable, "-m", f"qlwf.impl.{backend}.driver"]


def sqlite_driver() -> ExecBackend:
    return ExecBackend(reference_driver("sqlite"))


def postgres_driver() -> ExecBackend:
    return ExecBackend(reference_driver("postgres"), POSTGRES_TIMEOUT_S)


def register_driver(name: str, command: str | Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
                    batch_snapshots: bool = True) -> None:
    """Make backend `name` the driver `command` (a shell-like string or an argv list)."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty driver command")
    backends.register(name, lambda: ExecBackend(argv, timeout_s, batch_snapshots),
                      f"external driver {shlex.join(argv)} (qlwf-backend@1)")
