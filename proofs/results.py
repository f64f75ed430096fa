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


def verdict(answer: z3.CheckSatResult) -> str:
    """unsat of the negation = proved."""
    if answer == z3.unsat:
        return PROVED
    if answer == z3.sat:
        return VIOLATED
    return UNKNOWN

