"""The serving side of the `qlwf-backend@1` driver protocol (docs/protocol.md).

A driver is a process that reads one JSON request per line on stdin and writes exactly one JSON
response per request on stdout, in order, flushed, echoing the request's `id`. This module is the
whole loop over any `CommandPort` factory, so a driver for an in-repo backend is a few lines
(impl/sqlite/driver.py, conformance/drivers/postgres.py).

Command errors (`QlwfError`) are outcomes, not failures; any other exception while serving a
request is answered with `failure` and the loop goes on. The loop ends on `close` or end of input.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, BinaryIO, Protocol

from qlwf.impl.port import COMMAND_NAMES, SNAPSHOT_KINDS, ChangeTracking, CommandPort, FaultInjection, Record, Snapshot
from qlwf.model import strict_json
from qlwf.model.canonical import plain_canonical_json
from qlwf.model.errors import QlwfError
from qlwf.model.records import KIND_KEYS

PROTOCOL = "qlwf-backend@1"
REQUEST_TYPES = ("hello", "reset", "apply", "snapshot", "corrupt", "close")

Message = dict[str, Any]


class StoreFactory(Protocol):
    def open(self) -> CommandPort: ...

    def shutdown(self) -> None: ...


class _Refused(Exception):
    """A request the driver cannot serve (answered with `failure`)."""


class Server:
    """Answers protocol requests for one driver process; `handle` is independent of any I/O."""

    def __init__(self, factory: StoreFactory, name: str, version: str, fault_hooks: tuple[str, ...] = (),
                 commands: tuple[str, ...] = COMMAND_NAMES, surface: Message | None = None) -> None:
        self.factory = factory
        self.name = name
        self.version = version
        self.fault_hooks = fault_hooks
        self.commands = commands
        # the declared surface of hello (docs/protocol.md); its errorDetail is what an error reports
        self.surface = surface
        self.error_keys = {"class": ("class", "message"), "code": ("class", "code", "message")}.get(
            (surface or {}).get("errorDetail", "reason"))
        self.port: CommandPort | None = None
        self.closed = False
        self._shut = False
        # the state as last returned to the harness (snapshot or changes), by kind and key
        self._sent: dict[str, dict[tuple[Any, ...], Record]] = {k: {} for k in SNAPSHOT_KINDS}
        # kinds to read back at the next `changes` besides those the port says it wrote (ChangeTracking)
        self._stale: set[str] = set(SNAPSHOT_KINDS)

    def handle(self, request: Any) -> Message:
        if not isinstance(request, dict):
            return {"id": None, "type": "failure", "failure": {"message": "a request must be a JSON object"}}
        rid, kind = request.get("id"), request.get("type")
        if type(rid) is not int or kind not in REQUEST_TYPES:
            return {"id": rid if type(rid) is int else None, "type": "failure",
                    "failure": {"message": f"a request needs an int id and a type in {list(REQUEST_TYPES)}"}}
        try:
            body = getattr(self, f"_{kind}")(request)
        except _Refused as e:
            return {"id": rid, "type": kind, "failure": {"message": str(e)}}
        except Exception as e:  # the backend crashed on this request: say so, keep serving
            return {"id": rid, "type": kind, "failure": {"message": f"{type(e).__name__}: {e}"}}
        return {"id": rid, "type": kind, **body}

    def _hello(self, request: Message) -> Message:
        if request.get("protocol") != PROTOCOL:
            raise _Refused(f"this driver speaks {PROTOCOL}, not {request.get('protocol')!r}")
        return {"protocol": PROTOCOL, "driver": {"name": self.name, "version": self.version},
                "capabilities": {"commands": list(self.commands), "snapshot": True, "snapshotWithApply": True,
                                 "snapshotChanges": True, "clockInjection": True,
                                 "faultHooks": list(self.fault_hooks),
                                 **({"surface": self.surface} if self.surface is not None else {})}}

    def _reset(self, _request: Message) -> Message:
        self._release()
        self.port = self.factory.open()
        self._sent = {k: {} for k in SNAPSHOT_KINDS}
        self._stale = set(SNAPSHOT_KINDS)
        return {}

    def _apply(self, request: Message) -> Message:
        port = self._store()
        at = request.get("atMs")
        if type(at) is not int or at < 0 or not isinstance(request.get("command"), str):
            raise _Refused("apply needs a command name and an int atMs >= 0")
        if "evidence" in request:  # the ql3 records the binding derives from (a store may seed them)
            port.seed_evidence(request["evidence"])
        try:
            outcome: Message = {"ok": port.execute(request["command"], request.get("args"), now=at)}
        except QlwfError as e:
            error = e.with_message()
            outcome = {"error": error if self.error_keys is None else {k: error[k] for k in self.error_keys}}
        body: Message = {"outcome": outcome}
        if request.get("snapshot") is True:
            body["snapshot"] = self._full(port.snapshot())
        elif request.get("snapshot") == "changes":
            body["changes"] = self._changes(port)
        return body

    def _snapshot(self, _request: Message) -> Message:
        return {"snapshot": self._full(self._store().snapshot())}

    def _full(self, snapshot: Snapshot) -> Snapshot:
        self._sent = {kind: _by_key(kind, records) for kind, records in snapshot.items()}
        return snapshot

    def _changes(self, port: CommandPort) -> list[Message]:
        """Records added, changed (the new record) or removed (null) since the state last returned.

        A port that tracks what it writes (ChangeTracking, as the SQL adapters do) is read back only
        for the kinds it wrote since, as in-process lockstep reads it (decisions Q-50, Q-135); the
        harness checks the sum of the changes against a full snapshot at `close`."""
        if isinstance(port, ChangeTracking):
            kinds = port.written_kinds() | self._stale
            snapshot = port.snapshot_kinds(kinds) if kinds else {}  # a refusal writes nothing
            self._stale = set()
        else:
            snapshot = port.snapshot()
        changes: list[Message] = []
        for kind, records in snapshot.items():
            old, new = self._sent[kind], _by_key(kind, records)
            # a record read back unchanged is usually the very object sent before (the adapters'
            # row memos): identity first spares a deep comparison of every unchanged record
            changes += [{"kind": kind, "key": list(key), "record": r} for key, r in new.items()
                        if (o := old.get(key)) is not r and o != r]
            changes += [{"kind": kind, "key": list(key), "record": None} for key in old.keys() - new.keys()]
            self._sent[kind] = new
        return changes

    def _corrupt(self, request: Message) -> Message:
        port = self._store()
        if "corrupt" not in self.fault_hooks or not isinstance(port, FaultInjection):
            raise _Refused("this driver offers no corrupt fault hook")
        port.corrupt(request["kind"], request["key"], request["patch"])
        self._stale.add(request["kind"])  # read back next time, whatever the port tracks
        return {}

    def _close(self, _request: Message) -> Message:
        # released before the answer: the harness gives a driver only a moment to exit after it
        self.closed = True
        self.shutdown()
        return {}

    def _store(self) -> CommandPort:
        if self.port is None:
            raise _Refused("no store: send reset first")
        return self.port

    def _release(self) -> None:
        if self.port is not None:
            port, self.port = self.port, None
            port.close()

    def shutdown(self) -> None:
        """Release the store and the factory; idempotent (close, then end of the loop)."""
        if self._shut:
            return
        self._shut = True
        try:
            self._release()
        finally:
            self.factory.shutdown()


def _by_key(kind: str, records: list[Record]) -> dict[tuple[Any, ...], Record]:
    keys = KIND_KEYS[kind]
    return {tuple(r.get(k) for k in keys): r for r in records}


def package_version() -> str:
    """The installed qlwf version (drivers report it in `hello`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qlwf")
    except PackageNotFoundError:
        return "unknown"


def encode(message: Message) -> bytes:
    """One response line: compact UTF-8 JSON without ASCII escaping. `plain_canonical_json` writes the
    reference encoder's bytes for every value a response carries (decoded JSON holds no NaN, and a
    float, were a record to hold one, keeps its value, if not the spelling of its exponent), falling
    back to that encoder for anything else, which it then encodes or refuses as before."""
    return plain_canonical_json(message) + b"\n"


def serve(factory: StoreFactory | Callable[[], StoreFactory], *, name: str, version: str,
          fault_hooks: tuple[str, ...] = (), stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
          commands: tuple[str, ...] = COMMAND_NAMES, surface: Message | None = None) -> int:
    """Serve requests until `close` or end of input; the exit status of the driver process.

    `factory` may be a callable building it, so a slow start (a PostgreSQL cluster) happens after
    the protocol channel is set up and its errors reach stderr. With the process's own stdio, fd 1
    is kept for the protocol and then pointed at stderr, so a stray print cannot corrupt the channel.
    """
    if stdout is None:
        stdout = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    source = stdin if stdin is not None else sys.stdin.buffer
    _unwind_on_sigterm()
    try:
        built = factory() if callable(factory) else factory
    except KeyboardInterrupt as e:  # while a store starts (a throwaway cluster), which cleans up after itself
        return _stopped(name, e)
    server = Server(built, name, version, fault_hooks, commands, surface)
    try:
        for line in source:
            if not line.strip():
                continue
            try:
                request = strict_json.loads(line)
            except ValueError as e:
                response: Message = {"id": None, "type": "failure", "failure": {"message": f"not JSON: {e}"}}
            else:
                response = server.handle(request)
            try:
                data = encode(response)
            except (TypeError, ValueError) as e:  # e.g. a backend value JSON cannot carry
                data = encode({"id": response.get("id"), "type": response.get("type", "failure"),
                               "failure": {"message": f"response not encodable: {e}"}})
            stdout.write(data)
            stdout.flush()
            if server.closed:
                break
    except KeyboardInterrupt as e:  # the store is released (finally) before the process exits
        return _stopped(name, e)
    finally:
        server.shutdown()
    return 0


def _stopped(name: str, interrupt: KeyboardInterrupt) -> int:
    """SIGTERM (the harness ending us) or Ctrl-C: one line and the signal's exit status, not a
    traceback, since the harness quotes the driver's stderr tail and it must not read as a crash."""
    signum = interrupt.signum if isinstance(interrupt, Terminated) else signal.SIGINT
    print(f"{name} driver: stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    return 128 + signum


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwinding like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _unwind_on_sigterm() -> None:
    """SIGTERM (the harness giving up on us) unwinds like Ctrl-C, so the store is released."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_IGN)
        raise Terminated(signum)

    with contextlib.suppress(ValueError):  # not the main thread (an in-process test): nothing to install
        signal.signal(signal.SIGTERM, handler)
