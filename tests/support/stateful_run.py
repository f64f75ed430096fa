"""The stateful machine under the current Hypothesis profile, for the tests and benchmarks that run it."""

from __future__ import annotations

from typing import Any

from hypothesis.stateful import RuleBasedStateMachine
from qlwf.conformance.stateful import machine as stateful_machine
from qlwf.conformance.stateful.machine import WorkflowMachine

from qlwf.support.preload import load_every_module

__all__ = ["WorkflowMachine", "run_machine"]


def run_machine(machine: type[RuleBasedStateMachine] = WorkflowMachine, **overrides: Any) -> None:
    """The machine under the current profile, every module of the distribution loaded first (decisions
    Q-113; the loading is the application's, qlwf/support/preload.py, which conformance may not import)."""
    load_every_module()
    stateful_machine.run_machine(machine, **overrides)
