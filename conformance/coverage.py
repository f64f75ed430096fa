"""Which commands, outcomes and model rule-table rows a conformance run exercised, per backend."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from qlwf.model import tables as T

from . import boundaries as B

Record = dict[str, Any]


def rule_rows() -> tuple[str, ...]:
    """The rule-table rows of the model as `Outcome.rules` names them (model/tables.py)."""
    rows = [f"step:{p.rule}" for p in T.STEP_PERFORMERS]
    rows += [f"attempt:{t.rule}" for t in T.ATTEMPT_TRANSITIONS]
    rows += [f"lease:{t.rule}" for t in T.LEASE_TRANSITIONS]
    rows += [f"completion:{r.rule}" for r in T.COMPLETION_RULES]
    rows += ["run:admit", "run:request_cancel", *(f"run:frontier.{s}" for s in sorted(T.TERMINAL_RUN)),
             "run:converge.cancelled", "run:converge.timed_out"]
    rows += [f"cancel.attempt:{a}/{ls}" for a, ls in T.CANCEL_ATTEMPT_TABLE]
    rows += ["cancel.step:terminal", "cancel.step:blocked_attempt", "cancel.step:running"]
    rows += [f"cancel.step:mutate.{s}/{k}" for s in ("pending", "ready", "waiting_approval", "lost")
             for k in ("other", "timeout")]
    return tuple(rows)


# Rows no v1 command can reach: no StepRun is waiting_approval or lost after a commit (INV-9); a
# starting/running attempt always holds a leased lease and a claimed one never a completed lease
# (INV-24); a StepRun is cancelled only under intent, where the frontier refuses (so its AGG can
# never be `cancelled`); a running StepRun always has its running attempt (state-machines.md §7), so
# convergence never meets a running StepRun without a blocked attempt.
UNREACHABLE_IN_V1 = frozenset({
    "cancel.attempt:claimed/completed", "run:frontier.cancelled", "cancel.step:running",
    *(f"cancel.attempt:{a}/{ls}" for a in ("starting", "running") for ls in ("None", "released", "completed")),
})


def unreachable_in_v1(row: str) -> bool:
    return row in UNREACHABLE_IN_V1 or "waiting" in row or "mutate.lost" in row or "lost_cancelled" in row


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
    boundaries: Counter[str] = field(default_factory=Counter)  # conformance/boundaries.py names

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
