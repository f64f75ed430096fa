"""A `qlwf oracle batch` subprocess driven like an interactive client: one line in, wait for its answer.

Answers are read by a thread into a queue, so that every wait has a timeout: a batch process that
buffers its answers or reads ahead makes `answer()` fail instead of hanging the test run.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent.parent
ORACLE_COMMAND = (sys.executable, "-m", "qlwf.cli", "oracle")  # as tests/app/oracle/test_oracle_cli.py runs the CLI
BATCH_COMMAND = (*ORACLE_COMMAND, "batch")
STARTUP_S = 60.0  # the first answer also waits for the interpreter and the model to import
ANSWER_S = 20.0


class BatchClient:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(BATCH_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=REPO, env=env)
        self._answers: queue.Queue[bytes] = queue.Queue()
        self._first = True
        threading.Thread(target=self._drain, args=(self.stdout,), daemon=True).start()

    @property
    def stdin(self) -> IO[bytes]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    @property
    def stdout(self) -> IO[bytes]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def _drain(self, stdout: IO[bytes]) -> None:
        for line in iter(stdout.readline, b""):
            self._answers.put(line)
        self._answers.put(b"")  # end of output

    def send(self, line: bytes) -> None:
        try:
            self.stdin.write(line)
            self.stdin.flush()
        except BrokenPipeError:
            rc = self.proc.wait(10)
            assert self.proc.stderr is not None
            tail = self.proc.stderr.read()[-1500:].decode("utf-8", "replace")
            raise AssertionError(f"batch died while reading its input (exit {rc}):\n{tail}") from None

    def answer(self, timeout: float | None = None) -> bytes:
        """The next raw answer line; fails on a timeout or on end of output."""
        wait = timeout if timeout is not None else STARTUP_S if self._first else ANSWER_S
        self._first = False
        try:
            line = self._answers.get(timeout=wait)
        except queue.Empty:
            raise AssertionError(f"no answer within {wait:.0f} s (buffered or blocked batch)") from None
        assert line, f"batch closed its stdout early (exit {self.proc.poll()})"
        assert line.endswith(b"\n"), f"answer without a line end: {line[:200]!r}"
        return line

    def ask(self, line: bytes, timeout: float | None = None) -> Any:
        self.send(line)
        return json.loads(self.answer(timeout))

    def close(self, timeout: float = 30.0) -> tuple[int, bytes]:
        """End of input: the exit code and everything the process wrote to stderr."""
        self.stdin.close()
        rc = self.proc.wait(timeout)
        assert self.proc.stderr is not None
        return rc, self.proc.stderr.read()

    def __enter__(self) -> BatchClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):  # unflushed input to a process that is gone
                    pipe.close()
