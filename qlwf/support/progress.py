"""Progress on stderr, so stdout stays the report: a live bar on a terminal, plain lines elsewhere.

CI logs and pipes get a plain line at most every `plain_every` seconds (and at the end); a terminal
gets one line rewritten in place at most ten times a second.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


def interactive(stream: TextIO) -> bool:
    """A live bar only for a person at a terminal: never under CI or when the stream is redirected."""
    return os.environ.get("CI") != "true" and hasattr(stream, "isatty") and stream.isatty()


class Progress:
    """Counts traces and steps of one run and shows them as they grow."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None, *, live: bool | None = None,
                 plain_every: float = 10.0) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.live = interactive(self.stream) if live is None else live
        self.plain_every = plain_every
        self.done = 0
        self.steps = 0
        self.start = time.monotonic()
        self._shown = float("-inf")  # the first advance always shows

    def advance(self, traces: int = 1, steps: int = 0) -> None:
        self.done += traces
        self.steps += steps
        now = time.monotonic()
        if now - self._shown >= (0.1 if self.live else self.plain_every):
            self._shown = now
            self._show(final=False)

    def close(self) -> None:
        if self.total or self.done:
            self._show(final=True)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        return (f"{self.label}: {self.done}/{self.total} traces, {self.steps} steps, "
                f"{self.steps / elapsed:.0f} steps/s, {elapsed:.0f} s")

    def _show(self, *, final: bool) -> None:
        if self.live:
            width = 24
            filled = width * self.done // self.total if self.total else width
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(f"\r[{bar}] {self.line()}" + ("\n" if final else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
