"""A deliberately broken qlwf-backend@1 driver: the SQLite reference driver with one injected bug.

    python tests/support/broken_driver.py BUG

Store bugs (the protocol is kept; the durable state goes wrong once, at the first chance):
  wrong-terminal-status  the first attempt completed as succeeded is stored as failed
  skip-sequence          the first command that appends events skips an event sequence number (a gap)
  hide-wrong-status      wrong-terminal-status, but the snapshot changes report the attempt as succeeded
Protocol bugs (at the Nth apply request, counted from 1):
  die-at:N      exit with status 3        hang-at:N     never answer (sleeps forever)
  garbage-at:N  answer a non-JSON line    wrong-id-at:N answer with another id
  deep-at:N     answer a JSON line nested 100,000 arrays deep
  forge-at:N    write terminal escapes to stderr (erase the line, draw a PASS) and answer a non-JSON line
                that carries some too
  dup-key-at:N  answer with a repeated "id" member (the first one wrong)
  surrogate-at:N  answer with a lone surrogate (escaped) as the status of the first changed record
  missing-keys-at:N  answer apply without its outcome
  bad-change-at:N    answer apply with a change removing a record that does not exist
  early         write a response before the first request
  linger[:TAG]  serve correctly, but never exit by itself after close or end of input
  escape TAG [BUG]  start a process that leaves the driver's session (setsid), whose parent exits at
                once, and that sleeps for ever with TAG among its arguments; then serve with BUG (or none)
  escape-env TAG [BUG]  the same, started with an empty environment (as sudo or `env -i` would)
  escape-env-late TAG [BUG]  escape-env when the close request arrives, before answering it
  slow-start:S  serve correctly, but start S seconds late (before reading hello): not a bug
Each protocol bug says what it does on stderr first, so the harness's stderr tail can be checked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from qlwf.impl.driver_protocol import Server, encode
from qlwf.impl.port import CommandPort, Record, Snapshot
from qlwf.impl.sqlite.adapter import SqliteAdapter


class BuggyStore(CommandPort):
    """SqliteAdapter whose durable state is damaged once, right after the first command the bug applies to."""

    def __init__(self, bug: str) -> None:
        self.inner = SqliteAdapter(":memory:")
        self.clock = self.inner.clock
        self.bug = bug
        self.done = False
        self.damaged: str | None = None  # the attempt whose status was stored wrong

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        events_before = len(self.inner.snapshot()["events"]) if self.bug == "skip-sequence" else 0
        result = self.inner.execute(name, args, now)
        if self.done:
            return result
        if self.bug in ("wrong-terminal-status", "hide-wrong-status") and name == "complete_attempt":
            attempt = next(a for a in self.inner.snapshot()["attempts"] if a["id"] == args["attemptId"])
            if attempt["status"] == "succeeded":
                self.inner.corrupt("attempts", [attempt["id"]], {"status": "failed"})
                self.done, self.damaged = True, attempt["id"]
        elif self.bug == "skip-sequence" and len(self.inner.snapshot()["events"]) > events_before:
            self.inner._conn.execute('UPDATE "RunEvents" SET sequence = sequence + 1 '
                                     'WHERE rowid = (SELECT max(rowid) FROM "RunEvents")')
            self.done = True
        return result

    def snapshot(self) -> Snapshot:
        return self.inner.snapshot()

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        self.inner.corrupt(kind, key, patch)

    def close(self) -> None:
        self.inner.close()


class Stores:
    def __init__(self, bug: str) -> None:
        self.bug = bug

    def open(self) -> CommandPort:
        return BuggyStore(self.bug)

    def shutdown(self) -> None:
        pass


def say(text: str) -> None:
    print(f"broken driver: {text}", file=sys.stderr, flush=True)


def escape(tag: str, env: dict[str, str] | None = None) -> None:
    """A grandchild in a session of its own, orphaned at once: what pg_ctl leaves behind a server."""
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, "-c", "import time\nwhile True: time.sleep(60)", tag],
                      dict(os.environ) if env is None else env)
        os._exit(0)
    os.waitpid(child, 0)


def main() -> int:
    bug = sys.argv[1]
    late = bug == "escape-env-late"
    if bug in ("escape", "escape-env", "escape-env-late"):
        if not late:
            say("starting a process outside the driver's session")
            escape(sys.argv[2], {} if bug == "escape-env" else None)
        bug = sys.argv[3] if len(sys.argv) > 3 else "none"
    name, _, n = bug.partition(":")
    at = int(n) if n.isdigit() else 0  # linger:TAG takes a tag to find the process by
    out = sys.stdout.buffer
    server = Server(Stores(bug), "qlwf-broken-sqlite", "0", ("corrupt",))
    if name == "slow-start":
        say(f"starting {at} s late")
        time.sleep(at)
    if bug == "early":
        say("answering before any request")
        out.write(encode({"id": 1, "type": "hello"}))
        out.flush()
    applies = 0
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if late and request.get("type") == "close":
            say("starting a process outside the driver's session, on close")
            escape(sys.argv[2], {})
        response = server.handle(request)
        if request.get("type") == "apply":
            applies += 1
            damaged = getattr(server.port, "damaged", None)
            if bug == "hide-wrong-status" and damaged:  # the lie: the stored "failed" reported as "succeeded"
                for change in response.get("changes", ()):
                    if change["kind"] == "attempts" and change["key"] == [damaged] and change["record"]:
                        change["record"] = {**change["record"], "status": "succeeded"}
        if applies == at and request.get("type") == "apply":
            say(f"{name} at apply {at} (request id {request['id']})")
            if name == "die-at":
                return 3
            if name == "hang-at":
                while True:
                    time.sleep(60)
            if name == "garbage-at":
                out.write(b"this is not JSON\n")
                out.flush()
                continue
            if name == "forge-at":
                sys.stderr.write("\x1b[1A\x1b[2K\rconform exec: PASS\x07\n")
                sys.stderr.flush()
                out.write(b"\x1b[2Jnot JSON\r\n")
                out.flush()
                continue
            if name == "deep-at":
                out.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
                out.flush()
                continue
            if name == "surrogate-at":
                for change in response.get("changes", ()):
                    if change["record"]:
                        change["record"] = {**change["record"], "status": "\ud800"}
                        break
                out.write(json.dumps(response).encode() + b"\n")  # ASCII escapes: a lone surrogate is writable
                out.flush()
                continue
            if name == "dup-key-at":
                text = encode(response)
                out.write(text[:1] + b'"id": 0, ' + text[1:])
                out.flush()
                continue
            if name == "wrong-id-at":
                response["id"] += 100
            if name == "missing-keys-at":
                response.pop("outcome", None)
            if name == "bad-change-at":
                response["changes"] = [{"kind": "runs", "key": ["no-such-run"], "record": None}]
        out.write(encode(response))
        out.flush()
        if server.closed:
            break
    server.shutdown()
    if name == "linger":
        say("lingering after the end of the session")
        while True:
            time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
