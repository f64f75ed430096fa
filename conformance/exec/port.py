"""The `exec` conformance backend: any implementation behind the qlwf-backend@1 protocol (docs/protocol.md).

`ExecBackend` starts the driver once per factory (one per run, one per `--jobs` worker), says
`hello`, and gives each trace a fresh store with `reset`. `ExecPort` is the `CommandPort` over the
connection: `apply` for commands, `snapshot` for the read-back, `corrupt` for drift traces when the
driver offers the hook. The driver's answers are checked message by message against the protocol
(exec_connection.py); a breach is a `DriverFailure` (the lockstep reports it as a `driver` divergence), after which the
driver is dead and the run stops: the next `open()` raises the same failure.

With `snapshotChanges` (else `snapshotWithApply`), an `apply` asks for the state too and the port
answers the harness's following `snapshot()` from it: one round trip per step instead of two, and
with changes a response of the records the command touched instead of the whole store.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from qlwf.conformance.backends import registry
from qlwf.conformance.exec.connection import DriverConnection, DriverRefused, Ticket, record_key
from qlwf.conformance.exec.process import DriverFailure
from qlwf.conformance.generate.surface import Surface
from qlwf.impl.port import COMMAND_NAMES, SNAPSHOT_KINDS, CommandPort, FixedClock, Record, Snapshot
from qlwf.model.canonical import canonical_json
from qlwf.model.errors import Unavailable, error_from_json

DEFAULT_TIMEOUT_S = 10.0
POSTGRES_TIMEOUT_S = 60.0  # the first request may wait for a throwaway cluster to start
# How the state is read back after a command: the changes with the apply response, the full
# snapshot with it, or a snapshot request of its own (the naive protocol: two round trips a step).
READ_BACK = ("changes", "snapshot", "request")


class ExecPort(CommandPort):
    """One trace's store inside the driver.

    With `snapshotChanges` the port keeps the driver's state as last reported and applies the
    changes each `apply` returns; at `close` it asks for the full snapshot once and requires it to
    be that state exactly (canonical JSON), so a wrong change list can never hide a difference.
    """

    clock: FixedClock  # every apply carries the harness time as atMs

    def __init__(self, connection: DriverConnection, read_back: str = "changes", ahead: bool = True) -> None:
        if read_back not in READ_BACK:
            raise ValueError(f"read_back must be one of {READ_BACK}")
        self.clock = FixedClock()
        self.connection = connection
        caps = connection.capabilities
        # the cheapest read-back the driver offers, no cheaper than asked: changes > snapshot > request
        if read_back == "changes" and not caps.snapshot_changes:
            read_back = "snapshot"
        if read_back == "snapshot" and not caps.snapshot_with_apply:
            read_back = "request"
        batch_flags: dict[str, bool | str] = {"changes": "changes", "snapshot": True, "request": False}
        self.batch = batch_flags[read_back]
        self._pending: Snapshot | None = None  # the snapshot returned with the last apply, unread
        self._state: dict[str, dict[tuple[Any, ...], Record]] = {k: {} for k in SNAPSHOT_KINDS}
        self._lists: Snapshot = {k: [] for k in SNAPSHOT_KINDS}
        self._unverified = False  # state built from changes since the last full snapshot
        self.send_ahead = ahead
        self._ahead: tuple[tuple[Any, ...], Ticket | DriverFailure] | None = None  # see prefetch
        self._queued: tuple[tuple[Any, ...], Record] | None = None  # see queue_next
        self._closed = False
        self._evidence: Record | None = None  # seed_evidence: sent with the next apply
        self._has_evidence = False

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        self._check_open()
        if name not in COMMAND_NAMES:
            raise ValueError(f"not a command: {name!r}")
        if name not in self.connection.capabilities.commands:
            raise DriverRefused(f"the driver does not implement {name}")
        self.set_step_time(now)
        self._pending = None
        evidence = {"evidence": self._evidence} if self._has_evidence else {}
        self._evidence, self._has_evidence = None, False
        with self._exchange():
            outcome = self._finish_apply(self._round_trip(*self._apply_request(name, args, self.clock.value,
                                                                              evidence)))
        if "error" in outcome:  # a code or reason the driver does not report (its errorDetail) is empty
            raise error_from_json({"code": "", "reason": "", **outcome["error"]})
        result: Record = outcome["ok"]
        return result

    @property
    def surface(self) -> Surface:
        """What the driver declared in hello: the runner selects and compares by it."""
        return self.connection.capabilities.surface

    def seed_evidence(self, evidence: Record | None) -> None:
        """Sent in the next apply request (docs/protocol.md: a driver seeds its rows from it)."""
        self._evidence, self._has_evidence = evidence, True

    def snapshot(self) -> Snapshot:
        self._check_open()
        if self._pending is not None:
            snapshot, self._pending = self._pending, None
            return snapshot
        with self._exchange():
            return self._adopt(self._full_snapshot())

    def prefetch(self, step: Record, now: int) -> None:
        """Lockstep's hint of its next step: sent now, so the driver runs it while the harness checks
        this one. At most one request is ahead; the call that follows must be that step's."""
        if self._ahead is not None or self._queued is not None:
            return
        request = self._ahead_request(step, now)
        if request is not None:
            with self._exchange():
                self._send_ahead(*request)

    def queue_next(self, step: Record, now: int) -> None:
        """Lockstep's hint of the step after the command it is about to run: sent the moment that
        command's answer line arrives, before the harness parses and checks it (decisions Q-136).
        Only where the apply answer carries the state (it is then the command's last exchange)."""
        if not self.batch or self._queued is not None:
            return
        self._queued = self._ahead_request(step, now)

    def _ahead_request(self, step: Record, now: int) -> tuple[tuple[Any, ...], Record] | None:
        if not self.send_ahead or self._closed or not self.connection.process.usable:
            return None
        if step["op"] == "command":
            if step["name"] not in self.connection.capabilities.commands or type(now) is not int or now < 0:
                return None
            evidence = {"evidence": step["evidence"]} if "evidence" in step else {}
            return self._apply_request(step["name"], step["args"], now, evidence)
        if step["op"] == "advance_time":  # nothing to run: the read-back of the state
            return ("snapshot",), {}
        return None

    def _send_ahead(self, key: tuple[Any, ...], fields: Record) -> None:
        try:
            ticket: Ticket | DriverFailure = self.connection.send(key[0], **fields)
        except DriverFailure as e:  # reported by the call it belongs to
            ticket = e
        self._ahead = (key, ticket)

    def _send_queued(self) -> None:
        if self._queued is not None and self.connection.process.usable:
            queued, self._queued = self._queued, None
            self._send_ahead(*queued)

    @contextlib.contextmanager
    def _exchange(self) -> Iterator[None]:
        """A request, its answer and the port's record of both, as one: broken off in between (a
        signal, the gate's time limit, a harness error), the mirror may lack changes the driver
        reported, or an answer may be left unread. That is the harness's doing, so the session is
        abandoned (decisions Q-87) rather than checked at `close` and blamed on the driver."""
        try:
            yield
        except (DriverFailure, DriverRefused):  # the driver's own breach or refusal: the session says so
            raise
        except BaseException:
            self.connection.process.abandon()
            raise

    def _apply_request(self, name: str, args: Any, at: int, evidence: Record | None = None
                       ) -> tuple[tuple[Any, ...], Record]:
        """The apply request's key (what a request sent ahead must match) and fields; `evidence` is
        {"evidence": ...} for a step that carries it."""
        flag = {"snapshot": self.batch} if self.batch else {}
        return ("apply", name, args, at), {"command": name, "args": args, "atMs": at, **(evidence or {}), **flag}

    def _round_trip(self, key: tuple[Any, ...], fields: Record) -> Record:
        """The answer to the request `key` (sent ahead, or sent now); a request queued behind an apply
        goes out as soon as that apply's answer line has arrived."""
        if self._ahead is None:
            ticket = self.connection.send(key[0], **fields)
        else:
            ahead, sent = self._ahead
            self._ahead = None
            if ahead != key:  # the lockstep contract: never a silent re-run of a command sent ahead
                raise RuntimeError(f"harness: {ahead[:2]} was sent ahead, then {key[:2]} was asked for")
            if isinstance(sent, DriverFailure):
                raise sent
            ticket = sent
        return self.connection.receive(ticket, self._send_queued if key[0] == "apply" else None)

    def _finish_apply(self, body: Record) -> Record:
        """The apply response's outcome, checked, after the state it reports is recorded."""
        state_key = {True: "snapshot", "changes": "changes"}.get(self.batch)
        self.connection.expect_keys("apply", body, {"outcome", state_key} if state_key else {"outcome"})
        outcome = self.connection.check_outcome(body["outcome"])
        if state_key == "snapshot":
            self._pending = self._adopt(self.connection.check_snapshot(body["snapshot"]))
        elif state_key == "changes":
            self._pending = self._apply_changes(body["changes"])
        return outcome

    def _full_snapshot(self) -> Snapshot:
        body = self._round_trip(("snapshot",), {})
        self.connection.expect_keys("snapshot", body, {"snapshot"})
        return self.connection.check_snapshot(body["snapshot"])

    def _adopt(self, snapshot: Snapshot) -> Snapshot:
        """A full snapshot is the new base of later changes (the driver's too)."""
        self._lists = snapshot
        self._state = {kind: {record_key(kind, r): r for r in records} for kind, records in snapshot.items()}
        self._unverified = False
        return snapshot

    def _apply_changes(self, changes: Any) -> Snapshot:
        if not isinstance(changes, list):
            self.connection.fail("changes must be a list")
        touched: set[str] = set()
        for change in changes:
            if not (isinstance(change, dict) and set(change) == {"kind", "key", "record"}
                    and change["kind"] in self._state and isinstance(change["key"], list)):
                self.connection.fail(f"a change must be {{kind, key, record}} of a snapshot kind: {change!r:.200}")
            kind, key, record = change["kind"], tuple(change["key"]), change["record"]
            index = self._state[kind]
            if record is None:
                if index.pop(key, None) is None:
                    self.connection.fail(f"a change removes {kind} {list(key)}, which is not in the state")
            elif type(record) is not dict or record_key(kind, record) != key:
                self.connection.fail(f"a {kind} change's record is not an object with key {list(key)}")
            else:
                index[key] = record
            touched.add(kind)
        lists = dict(self._lists)
        try:
            for kind in touched:  # each list in key order, as a snapshot lists it (commands.md §1.3)
                lists[kind] = [self._state[kind][k] for k in sorted(self._state[kind])]
        except TypeError:
            self.connection.fail("record keys of mixed types cannot be ordered")
        self._lists = lists
        self._unverified = self._unverified or bool(changes)
        return lists

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending = None
        if not self.connection.process.usable:
            return
        # Not raised here: the trace's own report comes first; the factory raises it next.
        try:
            with self._exchange():
                self._drain()
                full = self._full_snapshot() if self._unverified else None
        except (DriverFailure, DriverRefused) as e:
            self.connection.deferred = e if isinstance(e, DriverFailure) else self.connection.process.poison(
                "refused", str(e))
            return
        if full is not None and canonical_json(full) != canonical_json(self._lists):
            self.connection.deferred = self.connection.process.poison(
                "protocol", "the snapshot changes reported during the trace add up to a different state "
                            "than the driver's full snapshot at its end")

    def _drain(self) -> None:
        """The request sent ahead for a step the lockstep did not reach (it stopped at a divergence):
        its answer still moves the driver's state, and the port's with it."""
        if self._ahead is None:
            return
        key, ticket = self._ahead
        self._ahead = None
        if isinstance(ticket, DriverFailure):
            raise ticket
        body = self.connection.receive(ticket)
        if key[0] == "apply":
            self._finish_apply(body)
        else:
            self.connection.expect_keys("snapshot", body, {"snapshot"})
            self._adopt(self.connection.check_snapshot(body["snapshot"]))

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("", "storage_closed", "the exec port is closed")


class ExecFaultPort(ExecPort):
    """An `ExecPort` whose driver offers the `corrupt` fault hook (`FaultInjection`)."""

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        self._check_open()
        self._pending = None
        with self._exchange():
            body = self.connection.request("corrupt", kind=kind, key=key, patch=patch)
        self.connection.expect_keys("corrupt", body, set())


class ExecBackend:
    """BackendFactory of `--backend exec`: one driver process, a `reset` store per trace."""

    def __init__(self, command: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
                 read_back: str = "changes", transcript: list[tuple[str, str]] | None = None,
                 ahead: bool = True) -> None:
        self.command = list(command)
        self.timeout_s = timeout_s
        self.read_back = read_back
        self.ahead = ahead
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
                raise self.connection.deferred or self.connection.process.failure
            try:
                self.connection.expect_keys("reset", self.connection.request("reset"), set())
            except DriverRefused as e:
                self.connection.process.fail("refused", str(e))
        except DriverFailure as e:
            self.failure = e
            raise
        port_class = ExecFaultPort if "corrupt" in self.connection.capabilities.fault_hooks else ExecPort
        return port_class(self.connection, self.read_back, self.ahead)

    def shutdown(self) -> None:
        if self.connection is not None:
            connection, self.connection = self.connection, None
            connection.close()
            if connection.deferred is not None and self.failure is None:
                raise connection.deferred


def unconfigured() -> ExecBackend:
    """`--backend exec` before `register_driver` gave it a command."""
    raise registry.BackendMisconfigured("--backend exec needs --driver CMD (the driver command line)")


# The in-repo reference drivers: SQLite's lives with its backend, PostgreSQL's with the harness that
# provisions its throwaway cluster (conformance/drivers/).
REFERENCE_DRIVERS = {"sqlite": "qlwf.impl.sqlite.driver", "postgres": "qlwf.conformance.drivers.postgres"}


def reference_driver(backend: str) -> list[str]:
    """The command of an in-repo reference driver, run by this interpreter."""
    return [sys.executable, "-m", REFERENCE_DRIVERS[backend]]


def sqlite_driver() -> ExecBackend:
    return ExecBackend(reference_driver("sqlite"))


def postgres_driver() -> ExecBackend:
    return ExecBackend(reference_driver("postgres"), POSTGRES_TIMEOUT_S)


def register_driver(name: str, command: str | Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
                    read_back: str = "changes") -> None:
    """Make backend `name` the driver `command` (a shell-like string or an argv list)."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty driver command")
    registry.retarget(name, lambda: ExecBackend(argv, timeout_s, read_back),
                      f"external driver {shlex.join(argv)} (qlwf-backend@1)")


@contextlib.contextmanager
def driver_configured(name: str, command: str | None, timeout_s: float | None) -> Iterator[None]:
    """For one run, `--driver CMD` / `--driver-timeout S` of a driver backend: its command (default:
    the one it has) and its per-response timeout (default: the one that command has, else
    DEFAULT_TIMEOUT_S). The registry entry is restored afterwards."""
    saved = registry.get(name)
    if command is None and timeout_s is None:
        yield
        return
    if command is None:
        current = saved.create()  # an ExecBackend starts nothing before open()
        if not isinstance(current, ExecBackend):
            raise registry.BackendMisconfigured(f"backend {name} has no driver command to keep: give --driver CMD")
        register_driver(name, current.command, timeout_s or current.timeout_s)
    else:
        register_driver(name, command, timeout_s or DEFAULT_TIMEOUT_S)
    try:
        yield
    finally:
        registry.restore(saved)
