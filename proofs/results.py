"""Proof results and the solver helpers shared by every property."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import z3

PROVED = "proved"
VIOLATED = "violated"
UNKNOWN = "unknown"


@dataclass
class Result:
    name: str
    result: str
    bound: int
    seconds: float
    detail: str = ""
    counterexample: Any = None
    queries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "result": self.result, "bound": self.bound, "seconds": round(self.seconds, 3)}


class Clock:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.start


def implication_solver(timeout_ms: int | None = None) -> z3.Solver:
    """A solver for the one-step implications (inductive steps, LIVE-1): relevancy propagation off.

    Their hypothesis is the whole invariant conjunction, most of which is relevant to every query;
    tracking relevancy only costs time (N = 16: the inductive steps of all commands in 25 s of CPU
    instead of 47 s, LIVE-1 in 4.7 s instead of 5.8 s). The BMC queries, whose unrollings are
    mostly irrelevant to each query, keep the default (it is faster there)."""
    s = z3.Solver()
    s.set("smt.relevancy", 0)
    if timeout_ms:
        s.set("timeout", timeout_ms)
    return s


def verdict(answer: z3.CheckSatResult) -> str:
    """unsat of the negation = proved."""
    if answer == z3.unsat:
        return PROVED
    if answer == z3.sat:
        return VIOLATED
    return UNKNOWN

