"""Which commands, outcomes and model rule-table rows a conformance run exercised, per backend."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from qlwf.conformance.generate import boundaries as B
from qlwf.model import rules
from qlwf.model import tables as T

Record = dict[str, Any]


def rule_rows() -> tuple[str, ...]:
    """The rule-table rows of the model by their ids (the one registry, qlwf.model.rules)."""
    return tuple(rules.registry())


def unreachable_in_v1(row: str) -> bool:
    """A row declared unreachable in v1 by the registry, with its spec clause (exact ids only)."""
    return rules.is_unreachable(row)


def outcome_label(outcome: Record) -> str:
    if "error" in outcome:
        e = outcome["error"]
        return f"{e['class']}:{e['reason']}"
    result = outcome["ok"]
    return str(result.get("status", "page")) if isinstance(result, dict) else "page"


@dataclass
class Coverage:
    backend: str
    commands: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    boundaries: Counter[str] = field(default_factory=Counter)  # conformance/generate/boundaries.py names

    def observe(self, name: str, outcome: Record, rules: tuple[str, ...] | list[str]) -> None:
        self.commands[name] += 1
        self.outcomes[(name, outcome_label(outcome))] += 1
        self.rules.update(rules)

    def merge(self, other: Coverage) -> None:
        self.commands.update(other.commands)
        self.outcomes.update(other.outcomes)
        self.rules.update(other.rules)
        self.boundaries.update(other.boundaries)

    def report(self) -> Record:
        rows = rule_rows()
        expected_outcomes = [(c, o) for c, outs in T.COMMAND_OUTCOMES.items() for o in outs]
        return {
            "backend": self.backend,
            "commands": {"covered": sorted(self.commands),
                         "missing": sorted(set(T.COMMAND_OUTCOMES) - set(self.commands))},
            "outcomes": {"covered": sorted(f"{c}:{o}" for c, o in expected_outcomes if (c, o) in self.outcomes),
                         "missing": sorted(f"{c}:{o}" for c, o in expected_outcomes if (c, o) not in self.outcomes),
                         "errors": sorted(f"{c}:{o}" for c, o in self.outcomes if ":" in o)},
            "rules": {"covered": sorted(r for r in rows if r in self.rules),
                      "missing": sorted(r for r in rows if r not in self.rules and not unreachable_in_v1(r)),
                      "unreachable": sorted(r for r in rows if r not in self.rules and unreachable_in_v1(r)),
                      "other": sorted(r for r in self.rules if r not in rows)},
            "boundaries": B.report(set(self.boundaries)),
        }

    def render(self) -> str:
        r = self.report()
        rows = rule_rows()
        reachable = [x for x in rows if not unreachable_in_v1(x)]
        n_outcomes = sum(len(v) for v in T.COMMAND_OUTCOMES.values())
        lines = [
            f"coverage ({self.backend})      covered / total",
            f"  commands               {len(r['commands']['covered']):>4} / {len(T.COMMAND_OUTCOMES)}",
            f"  outcomes               {len(r['outcomes']['covered']):>4} / {n_outcomes}",
            f"  error reasons seen     {len(r['outcomes']['errors']):>4}",
            f"  rule-table rows        {len(r['rules']['covered']):>4} / {len(reachable)} reachable"
            f" ({len(rows)} rows, {len(r['rules']['unreachable'])} unreachable in v1)",
            f"  boundaries met         {len(r['boundaries']['met']):>4} / {len(B.BOUNDARIES)}",
        ]
        for title, key in (("missing outcomes", ("outcomes", "missing")), ("missing rule rows", ("rules", "missing")),
                           ("boundaries not met", ("boundaries", "missing"))):
            missing = r[key[0]][key[1]]
            if missing:
                lines.append(f"  {title}: {', '.join(missing)}")
        return "\n".join(lines)
