"""The model itself behind the command port: `qlwf replay --backend model` and harness self-tests."""

from __future__ import annotations

from typing import Any

from qlwf.conformance.traces.drift_mirror import corrupt_state
from qlwf.impl.port import CommandPort, FixedClock, Record, Snapshot
from qlwf.model.errors import Unavailable
from qlwf.model.state import State
from qlwf.model.system import apply


class ModelPort(CommandPort):
    clock: FixedClock  # the model reads the harness time from it

    def __init__(self, clock: int = 0) -> None:
        self.clock = FixedClock(clock)
        self.state = State(clock=clock)
        self._closed = False

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        if self._closed:
            raise Unavailable("", "storage_closed", "the model port is closed")
        self.set_step_time(now)
        # The model's clock only moves forward; a backend clock is free, so follow it.
        at = max(self.clock.value, self.state.clock)
        out = apply(self.state, {"name": name, "args": args}, at)
        self.state = out.state
        if out.error is not None:
            raise out.error
        assert out.result is not None
        return out.result

    def snapshot(self) -> Snapshot:
        return self.state.snapshot()

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        self.state = corrupt_state(self.state, kind, key, patch)

    def close(self) -> None:
        self._closed = True
