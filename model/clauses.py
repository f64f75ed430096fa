"""The ADR-0226/0228 decision clauses and the invariants that express them, as data (adr_clauses.json).

Each numbered decision section (`### N.`) of the two ADRs is split into short clauses; a clause
names the INV-n (model/invariants.py) that state it. Clauses no state invariant can express (the
storage dialects' mechanics, packaging, a page-result bound) are listed apart under `outside`,
each with what checks it instead. docs/generate.py renders docs/matrix.md from this file and
tests/app/gate/test_matrix.py checks it against the ADR text, the invariants, the proofs and the tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

FILE = "adr_clauses.json"


@dataclass(frozen=True)
class Section:
    adr: str
    number: int
    title: str


@dataclass(frozen=True)
class Clause:
    id: str
    adr: str
    section: int
    text: str
    invariants: tuple[str, ...]


@dataclass(frozen=True)
class Outside:
    """A clause checked by something other than a state invariant."""

    id: str
    adr: str
    section: int
    text: str
    reason: str
    properties: tuple[str, ...]  # proof properties (proofs/runner.py ALL_PROPERTIES)
    tests: tuple[str, ...]  # test files, relative to the repository


@dataclass(frozen=True)
class ClauseTable:
    sections: tuple[Section, ...]
    clauses: tuple[Clause, ...]
    outside: tuple[Outside, ...]


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{FILE}: expected a list of strings, got {value!r}")
    return tuple(value)


def parse(doc: Any) -> ClauseTable:
    sections = tuple(Section(str(s["adr"]), int(s["section"]), str(s["title"])) for s in doc["sections"])
    clauses = tuple(Clause(str(c["id"]), str(c["adr"]), int(c["section"]), str(c["text"]), _strings(c["invariants"]))
                    for c in doc["clauses"])
    outside = tuple(Outside(str(o["id"]), str(o["adr"]), int(o["section"]), str(o["text"]), str(o["reason"]),
                            _strings(o["properties"]), _strings(o["tests"])) for o in doc["outside"])
    return ClauseTable(sections, clauses, outside)


def load() -> ClauseTable:
    text = resources.files("qlwf.model").joinpath(FILE).read_text(encoding="utf-8")
    return parse(json.loads(text))
