"""The harness's side of one qlwf-backend@1 session: requests with ids, every response checked.

`DriverConnection` says `hello`, numbers requests, and checks each response against the protocol
(docs/protocol.md; the normative shapes are conformance/exec/schema/): the echoed id and type, exactly
the keys of its message, a well-formed outcome, snapshot or change list. A breach kills the driver
and raises `DriverFailure`; a `failure` answer raises `DriverRefused`, which the lockstep reports
as a backend crash of that step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from qlwf.conformance.exec.process import DriverFailure, DriverProcess
from qlwf.conformance.generate.surface import ERROR_DETAILS, Surface
from qlwf.impl.driver_protocol import PROTOCOL, package_version
from qlwf.impl.port import COMMAND_NAMES, SNAPSHOT_KINDS, Record, Snapshot
from qlwf.model.errors import ERROR_CLASSES
from qlwf.model.records import KIND_KEYS
from qlwf.model.tables import EXECUTOR_TYPES

CLOSE_GRACE_S = 2.0  # after answering close, a driver has released everything and only exits
HARNESS = {"name": "qlwf", "version": package_version()}
_SNAPSHOT_KEYS = frozenset(SNAPSHOT_KINDS)
_SURFACE_KEYS = frozenset({"omittedArguments", "argumentValues", "resultKeys", "errorDetail", "executorTypes",
                           "admissionEvidence", "profile"})


def record_key(kind: str, record: Record) -> tuple[Any, ...]:
    return tuple(record.get(k) for k in KIND_KEYS[kind])


class DriverRefused(RuntimeError):
    """The driver answered a command with `failure` (it crashed or cannot run it): a backend crash."""


@dataclass(frozen=True)
class Capabilities:
    driver: str
    commands: frozenset[str]
    snapshot_with_apply: bool
    snapshot_changes: bool
    fault_hooks: frozenset[str]
    surface: Surface  # what the driver declared (an old hello: its commands, the rest in full)


@dataclass(frozen=True)
class Ticket:
    """A request sent and not yet answered."""

    id: int
    kind: str
    deadline: float


STARTUP_TIMEOUT_S = 30.0  # the hello answer's allowance (at least the per-request timeout)


class DriverConnection:
    """Requests with ids, responses checked against the protocol's shapes."""

    def __init__(self, command: Sequence[str], timeout_s: float,
                 transcript: list[tuple[str, str]] | None = None) -> None:
        self.process = DriverProcess(command, timeout_s, transcript=transcript)
        self.deferred: DriverFailure | None = None  # found while a port closed; raised by the factory
        self._next_id = 0
        try:
            self.capabilities = self._hello()
        except BaseException:
            self.process.kill()
            raise

    def request(self, kind: str, /, **fields: Any) -> Record:
        """One request/response; the response's own keys (id and type removed), or DriverRefused."""
        return self.receive(self.send(kind, **fields))

    def send(self, kind: str, /, timeout_s: float | None = None, **fields: Any) -> Ticket:
        """Write a request now, for `receive` later (one at a time: the driver answers in order)."""
        self._next_id += 1
        request = {"id": self._next_id, "type": kind, **fields}
        return Ticket(self._next_id, kind, self.process.send(request, timeout_s))

    def receive(self, ticket: Ticket, then: Callable[[], None] | None = None) -> Record:
        """The answer to `ticket`, checked; `then` runs as soon as its line has arrived, before the
        line is parsed and checked (a port sends its next request there: decisions Q-136)."""
        rid, kind = ticket.id, ticket.kind
        line = self.process.receive_line(ticket.deadline)
        if then is not None:
            then()
        response = self.process.parse(line)
        if response.get("id") != rid or type(response.get("id")) is not int:
            self.fail(f"the response id {response.get('id')!r} does not echo the request id {rid}")
        if response.get("type") != kind:
            self.fail(f"a {kind} request was answered with type {response.get('type')!r}")
        body = {k: v for k, v in response.items() if k not in ("id", "type")}
        if "failure" in body:
            failure = body["failure"]
            if set(body) != {"failure"} or not isinstance(failure, dict) or not isinstance(failure.get("message"),
                                                                                       str):
                self.fail("a failure response must be exactly {id, type, failure: {message}}")
            raise DriverRefused(f"the driver failed the {kind} request: {failure['message']}")
        return body

    def fail(self, message: str) -> NoReturn:
        """A protocol breach: the driver is killed and reaped, and `DriverFailure` raised."""
        self.process.fail("protocol", message)

    def expect_keys(self, kind: str, body: Record, required: set[str], optional: frozenset[str] = frozenset()) -> None:
        missing, extra = required - set(body), set(body) - required - optional
        if missing or extra:
            self.fail(f"{kind} response: missing keys {sorted(missing)}, unexpected keys {sorted(extra)}")

    def _hello(self) -> Capabilities:
        try:
            # The answer to hello includes the driver's start-up (an interpreter importing its
            # runtime, a server connection): it gets the larger start-up allowance, not the per-request one.
            body = self.receive(self.send("hello", max(self.process.timeout_s, STARTUP_TIMEOUT_S),
                                          protocol=PROTOCOL, harness=HARNESS))
        except DriverRefused as e:
            self.process.fail("refused", str(e))
        self.expect_keys("hello", body, {"protocol", "driver", "capabilities"})
        if body["protocol"] != PROTOCOL:
            self.fail(f"the driver speaks {body['protocol']!r}, the harness {PROTOCOL!r}")
        driver, caps = body["driver"], body["capabilities"]
        if not (isinstance(driver, dict) and isinstance(driver.get("name"), str)
                and isinstance(driver.get("version"), str)):
            self.fail("hello.driver must be {name, version} strings")
        if not isinstance(caps, dict):
            self.fail("hello.capabilities must be an object")
        self.expect_keys("hello.capabilities", caps,
                         {"commands", "snapshot", "snapshotWithApply", "snapshotChanges", "clockInjection",
                          "faultHooks"}, frozenset({"surface"}))
        for key in ("commands", "faultHooks"):
            if not (isinstance(caps[key], list) and all(isinstance(c, str) for c in caps[key])):
                self.fail(f"hello.capabilities.{key} must be a list of strings")
        for key in ("snapshot", "snapshotWithApply", "snapshotChanges", "clockInjection"):
            if type(caps[key]) is not bool:
                self.fail(f"hello.capabilities.{key} must be a boolean")
        # Lockstep compares the durable state after every step at the harness's time: both are required.
        if not caps["snapshot"] or not caps["clockInjection"]:
            self.process.fail("refused", "lockstep conformance needs snapshot and clockInjection; the driver "
                                         f"offers snapshot={caps['snapshot']}, clockInjection={caps['clockInjection']}")
        return Capabilities(f"{driver['name']} {driver['version']}", frozenset(caps["commands"]),
                            caps["snapshotWithApply"], caps["snapshotChanges"], frozenset(caps["faultHooks"]),
                            Surface.from_hello(caps["commands"], self._surface(caps.get("surface"))))

    def _surface(self, surface: Any) -> dict[str, Any] | None:
        """`capabilities.surface` checked against its schema's shape (hello.response.json)."""
        if surface is None:
            return None

        def names(value: Any) -> bool:
            return isinstance(value, list) and all(isinstance(v, str) for v in value)

        def per_key(value: Any) -> bool:
            return isinstance(value, dict) and all(isinstance(k, str) and names(v) for k, v in value.items())

        def per_command(value: Any) -> bool:
            return isinstance(value, dict) and all(k in COMMAND_NAMES and names(v) for k, v in value.items())

        problems = [
            not isinstance(surface, dict) or bool(set(surface) - _SURFACE_KEYS),
            isinstance(surface, dict) and not per_command(surface.get("omittedArguments", {})),
            isinstance(surface, dict) and not per_command(surface.get("resultKeys", {})),
            isinstance(surface, dict) and not (isinstance(surface.get("argumentValues", {}), dict) and all(
                k in COMMAND_NAMES and per_key(v) for k, v in surface.get("argumentValues", {}).items())),
            isinstance(surface, dict) and surface.get("errorDetail", "reason") not in ERROR_DETAILS,
            isinstance(surface, dict) and not (names(surface.get("executorTypes", []))
                                               and set(surface.get("executorTypes", [])) <= set(EXECUTOR_TYPES)),
            isinstance(surface, dict) and type(surface.get("admissionEvidence", False)) is not bool,
            isinstance(surface, dict) and not isinstance(surface.get("profile", ""), str),
        ]
        if any(problems):
            self.fail("hello.capabilities.surface must be {omittedArguments?, argumentValues?, resultKeys?, "
                      "errorDetail?, executorTypes?, admissionEvidence?, profile?} as in hello.response.json")
        checked: dict[str, Any] = surface
        return checked

    def check_snapshot(self, snapshot: Any) -> Snapshot:
        if not isinstance(snapshot, dict) or set(snapshot) != _SNAPSHOT_KEYS:
            keys = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
            self.fail(f"a snapshot must have exactly the kinds {list(SNAPSHOT_KINDS)}, got {keys}")
        for kind, records in snapshot.items():
            if not isinstance(records, list) or not all(type(r) is dict for r in records):
                self.fail(f"snapshot.{kind} must be a list of record objects")
        return snapshot

    def check_outcome(self, outcome: Any) -> Record:
        if isinstance(outcome, dict) and len(outcome) == 1:
            if "ok" in outcome and isinstance(outcome["ok"], dict):
                return outcome
            error = outcome.get("error")
            # a driver declaring a coarser error detail (surface.errorDetail) may leave out reason, or code too
            if (isinstance(error, dict) and error.get("class") in ERROR_CLASSES
                    and all(isinstance(error.get(k, ""), str) for k in ("code", "reason", "message"))
                    and set(error) <= {"class", "code", "reason", "message"}):
                return outcome
        self.fail('an apply outcome must be {"ok": {...}} or {"error": {class, code?, reason?[, message]}}')

    def close(self) -> None:
        """`close`, then the process has CLOSE_GRACE_S to exit and is terminated if it has not."""
        try:
            if self.process.usable:
                # closing a broken driver: it is killed below either way
                with contextlib.suppress(DriverFailure, DriverRefused):
                    self.expect_keys("close", self.request("close"), set())
        finally:  # an interrupt too: the driver is reaped on every path
            self.process.finish(min(self.process.timeout_s, CLOSE_GRACE_S))
