"""A driver child process and its line channel, with a deadline on every exchange.

The harness never trusts the driver: every response must arrive within the timeout, be one JSON
object on one line, and nothing may arrive unasked. Any breach is a `DriverFailure` naming what
happened, the last request and the tail of the driver's stderr; the driver is then killed with
everything it started, and reaped. Every exit path reaps it.

The driver runs under a keeper (conformance/exec/driver_keeper.py, decisions Q-134): a child subreaper
that stays the driver's parent and holds everything the driver's tree orphans, so what the driver
started is found when it ends however it ends. The harness talks to the driver over the keeper's
inherited pipes and signals only the keeper, its own child.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from qlwf.conformance.backends.registry import BackendBroken
from qlwf.conformance.processes import sweep as process_sweep
from qlwf.conformance.report.visible import visible
from qlwf.model import strict_json

Message = dict[str, Any]

MAX_LINE_BYTES = 256 * 1024 * 1024  # a snapshot is large but not this large: beyond, it is garbage
STDERR_TAIL_BYTES = 4096
_REPORT_REQUEST_CHARS = 600
KEEPER_START_S = 30.0  # for the keeper to say the driver runs (an interpreter starting, on a loaded host)
KEEPER_END_S = 10.0  # for the keeper to end after SIGUSR1: its sweep and reaping (2 s each at most)


class DriverFailure(BackendBroken):
    """The driver broke the protocol: `problem` is timeout | exited | not_json | protocol | refused
    (or interrupted: the harness itself was interrupted mid-request)."""

    def __init__(self, problem: str, message: str, last_request: str = "", stderr_tail: str = "") -> None:
        super().__init__(problem, message, last_request, stderr_tail)
        self.problem = problem
        self.message = message
        self.last_request = last_request
        self.stderr_tail = stderr_tail

    # lockstep reports an exception carrying this attribute as a divergence of that kind
    divergence_kind = "driver"
    what = "driver"

    def report(self) -> dict[str, Any]:
        return {"driverFailure": {"problem": self.problem, "message": self.message,
                                  "lastRequest": self.last_request, "stderrTail": self.stderr_tail}}

    def __str__(self) -> str:  # the driver's own text shown, never obeyed by the terminal
        lines = [f"driver {self.problem}: {visible(self.message)}"]
        if self.last_request:
            lines.append(f"last request: {visible(self.last_request)}")
        tail = visible(self.stderr_tail).rstrip("\n")
        lines.append("driver stderr (tail):" + ("\n  " + tail.replace("\n", "\n  ") if tail else " (empty)"))
        return "\n".join(lines)


def _keeper_setup() -> None:
    """In the keeper before exec: SIGTERM when the harness thread that started it dies, even by SIGKILL
    or as a terminated `--jobs` worker, which cannot run its own clean-up (the keeper then ends the
    driver and what it started); and a child subreaper, so that what the driver's tree orphans becomes
    the keeper's (Q-134)."""
    process_sweep.bind_to_parent(subreaper=True)


class DriverProcess:
    """One started driver: `exchange(request)` writes a line and reads the answer line."""

    def __init__(self, command: Sequence[str], timeout_s: float,
                 transcript: list[tuple[str, str]] | None = None) -> None:
        if not command:
            raise ValueError("empty driver command")
        self.command = list(command)
        self.timeout_s = timeout_s
        self._allowed_s = timeout_s  # the allowance of the request in flight (hello gets the start-up one)
        self.last_request = ""  # the request a failure concerns: in flight, or whose answer is being checked
        self._unanswered: deque[str] = deque()  # requests sent whose answer line has not been read
        self._answered = ""  # the request whose answer line was read last
        self.transcript = transcript  # when a list: every line sent (">") and received ("<"), in order
        self._buffer = b""
        # stderr goes to a file, not a pipe: a chatty driver can never block on it (closed by _release)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        # what escaped the keeper (a keeper killed by SIGKILL) is found by this token
        self._token = process_sweep.driver_token()
        env = {**os.environ, process_sweep.TOKEN_VAR: self._token}
        self._report, report = os.pipe()  # the keeper writes, the harness reads
        self._reported = b""  # read from the keeper and not yet taken
        keeper = [sys.executable, "-m", f"{__package__}.driver_keeper", str(report), "--", *self.command]
        try:
            self.proc = subprocess.Popen(keeper, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._stderr, env=env, start_new_session=True, bufsize=0,
                                         preexec_fn=_keeper_setup, pass_fds=(report,))
        except OSError as e:
            self._stderr.close()
            os.close(self._report)
            raise DriverFailure("exited", f"cannot start {self.command!r}: {e}") from e
        finally:
            os.close(report)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        self.failure: DriverFailure | None = None
        self.interrupted = False
        self.driver_pid = 0  # the driver, the keeper's child (for diagnostics and tests only: signal the keeper)
        try:
            self._await_start()
        except BaseException:  # an interrupt too: the keeper is ended and reaped on every path
            self.kill()
            raise

    # ---- the channel ----------------------------------------------------------------------------
    def send(self, request: Message, timeout_s: float | None = None) -> float:
        """Write `request` (nothing may be unanswered); its response deadline, for `receive`."""
        if self.failure is not None:
            raise self.failure
        if self.interrupted:
            raise DriverFailure("interrupted", "the session was interrupted mid-request", self.last_request)
        line = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        self.last_request = _clip(line.decode().rstrip("\n"))
        self._unanswered.append(self.last_request)
        self._allowed_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + self._allowed_s
        with self._guard():
            if self._buffer or self._readable(0.0):
                early = self._buffer or os.read(self._out, 1 << 16)
                if not early:
                    self._fail_exited("before request " + str(request.get("id")))
                self._fail("protocol", f"unsolicited output before request {request.get('id')}: "
                           f"{_clip(early.decode(errors='replace'))}")
            self._write(line, deadline)
        if self.transcript is not None:
            self.transcript.append((">", line.decode().rstrip("\n")))
        return deadline

    def receive(self, deadline: float) -> Message:
        """The response to the request sent last (one line, a JSON object), by `deadline`."""
        return self.parse(self.receive_line(deadline))

    def receive_line(self, deadline: float) -> bytes:
        """The response line to the request sent last, by `deadline`, not yet parsed (`parse`): a
        harness may send its next request first, so the driver works while the line is checked."""
        if self.failure is not None:
            raise self.failure
        if self._unanswered:  # a timeout or an exit concerns the oldest request not answered
            self.last_request = self._unanswered[0]
        with self._guard():
            raw = self._read_line(deadline)
        # a request sent before this line is checked must not take the blame for it
        self._answered = self._unanswered.popleft() if self._unanswered else self.last_request
        if self.transcript is not None:
            self.transcript.append(("<", raw.decode(errors="replace")))
        return raw

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except DriverFailure:
            raise
        except BaseException:
            self.abandon()
            raise

    @property
    def usable(self) -> bool:
        return self.failure is None and not self.interrupted

    def parse(self, raw: bytes) -> Message:
        """A response line as the JSON object it must be; a breach otherwise (the driver is killed).
        From here on a failure concerns the request this line answers."""
        self.last_request = self._answered
        try:
            # Strict: a repeated name or an escaped lone surrogate would let the driver's bytes mean
            # something else to another reader; nesting past the decoder's limit is Q-109.
            message = strict_json.loads(raw)
        except ValueError as e:  # UnicodeDecodeError is a ValueError too
            self._fail("not_json", f"the response line is not JSON ({e}): {_clip(raw.decode(errors='replace'))}")
        if not isinstance(message, dict):
            self._fail("protocol", f"the response is not a JSON object: {_clip(raw.decode(errors='replace'))}")
        return message

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail("timeout", f"the driver did not read its request within {self._allowed_s:g} s")
            _, ready, _ = select.select([], [self._in], [], remaining)
            if not ready:
                continue
            try:
                view = view[os.write(self._in, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                self._fail_exited("while the request was written")

    def _readable(self, wait_s: float) -> bool:
        ready, _, _ = select.select([self._out], [], [], wait_s)
        return bool(ready)

    def _read_line(self, deadline: float) -> bytes:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail("timeout", f"no response within {self._allowed_s:g} s")
            if not self._readable(remaining):
                continue
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                self._fail_exited("before answering")
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE_BYTES:
                self._fail("not_json", f"a response line longer than {MAX_LINE_BYTES} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def fail(self, problem: str, message: str) -> NoReturn:
        """A breach found by the caller (a malformed response): kill, reap, raise."""
        self._fail(problem, message)

    def poison(self, problem: str, message: str) -> DriverFailure:
        """A breach found where raising would hide a report (closing a port): kill, reap, return it."""
        try:
            self._fail(problem, message)
        except DriverFailure as e:
            return e

    def _fail_exited(self, when: str) -> NoReturn:
        self._exited_within(1.0)  # let a dying driver finish dying, so its status is known
        self._terminate()
        self._fail("exited", f"the driver closed its stdout {when} ({_exit_status(self.proc.returncode)})")

    def _fail(self, problem: str, message: str) -> NoReturn:
        self._terminate()
        self.failure = DriverFailure(problem, message, self.last_request, self.stderr_tail())
        self._release()
        raise self.failure

    # ---- lifetime -------------------------------------------------------------------------------
    def stderr_tail(self) -> str:
        try:
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
            return self._stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def _exited_within(self, timeout_s: float) -> bool:
        """Whether the driver has exited and its keeper has ended after it, without reaping the keeper:
        while unreaped, its pid cannot be reused, so a signal to it never reaches a stranger."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.returncode is not None:
                return True
            try:
                if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _await_start(self) -> None:
        """The keeper's first report line: the driver runs, or could not be started (then reaped)."""
        deadline = time.monotonic() + KEEPER_START_S
        while b"\n" not in self._reported and len(self._reported) < 4096 and time.monotonic() < deadline:
            ready, _, _ = select.select([self._report], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._report, 4096) if ready else b""
            if ready and not chunk:
                break
            self._reported += chunk
        line, _, self._reported = self._reported.partition(b"\n")
        started, _, pid = line.decode(errors="replace").partition(" ")
        if started == "started" and pid.isdigit():
            self.driver_pid = int(pid)
            return
        self._terminate()
        tail = self.stderr_tail()
        self._release()
        reason = line.decode(errors="replace").strip().removeprefix("failed ") or "the driver keeper did not start"
        raise DriverFailure("exited", f"cannot start {self.command!r}: {reason}", stderr_tail=tail)

    def _signal_keeper(self, sig: signal.Signals) -> None:
        if self.proc.returncode is not None:  # reaped: the pid may belong to someone else now
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, sig)

    def _terminate(self) -> None:
        """SIGTERM the driver's process group, SIGKILL it after a second, and let the keeper kill
        what else remains of its tree; reap the keeper, then report what was killed outside the group."""
        if self.proc.returncode is not None:
            return
        if not self._exited_within(0.0):
            self._signal_keeper(signal.SIGTERM)  # passed on to the driver's group
            self._exited_within(1.0)
        self._signal_keeper(signal.SIGUSR1)  # kill the group now, then everything else in the tree
        try:
            self.proc.wait(KEEPER_END_S)
        except subprocess.TimeoutExpired:  # a keeper that cannot end: what it held is left to the token
            self.proc.kill()
            self.proc.wait()
        left = self._kept()
        left += process_sweep.sweep_driver(self._token)  # what escaped a keeper killed from outside
        if left:
            print(f"qlwf: the driver {visible(_clip(' '.join(self.command), 200))} left {len(left)} process(es) "
                  f"running outside its process group, killed: {visible(', '.join(left))}", file=sys.stderr)

    def abandon(self) -> None:
        """The harness broke off mid-exchange (a signal, a time limit, its own error): the session is out
        of step for good. End it quietly, so the teardown that follows does not turn the interruption
        into a driver failure; a later request says the session was interrupted."""
        self.interrupted = True
        self.kill()

    def kill(self) -> None:
        """Stop the driver now (any state) and release its pipes; idempotent."""
        self._terminate()
        self._release()

    def finish(self, grace_s: float) -> int:
        """Orderly end after `close`: stdin closed, `grace_s` to exit on its own, then killed; its status."""
        try:
            assert self.proc.stdin is not None  # started with stdin=PIPE
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            self._exited_within(grace_s)
        finally:
            self.kill()
        return self.proc.returncode

    def _kept(self) -> list[str]:
        """What the keeper, now ended, reported killing outside the driver's group ("pid (name)" lines)."""
        if self._report < 0:
            return []
        data, self._reported = self._reported, b""
        with contextlib.suppress(OSError):
            while select.select([self._report], [], [], 0.0)[0] and len(data) < 1 << 20:
                chunk = os.read(self._report, 1 << 16)
                if not chunk:
                    break
                data += chunk
        return data.decode(errors="replace").splitlines()

    def _release(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        with contextlib.suppress(OSError):
            self._stderr.close()
        if self._report >= 0:
            with contextlib.suppress(OSError):
                os.close(self._report)
            self._report = -1


def _exit_status(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"


def _clip(text: str, limit: int = _REPORT_REQUEST_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
