"""task-attempts.md §7 as data: the completion mapping, first matching rule wins (`completion_rule`
in `model/tables.py` reads it)."""

from __future__ import annotations

from typing import Final, NamedTuple


# --- task-attempts.md §7 completion mapping (first matching rule wins) ---------------------------
class CompletionRule(NamedTuple):
    rule: str
    command: str
    intent: bool | None  # None = don't care
    timeout_reason: bool | None
    deadline_passed: bool | None
    exit_zero: bool | None
    status: str

    @property
    def id(self) -> str:
        """The row's stable rule id, as the model reports it in `Outcome.rules`."""
        return f"completion:{self.rule}"


COMPLETION_RULES: Final = (
    CompletionRule("fail_start.intent_timeout", "fail_start", True, True, None, None, "timed_out"),
    CompletionRule("fail_start.intent", "fail_start", True, None, None, None, "cancelled"),
    CompletionRule("fail_start.deadline", "fail_start", None, None, True, None, "timed_out"),
    CompletionRule("fail_start.otherwise", "fail_start", None, None, None, None, "failed"),
    CompletionRule("complete.intent_timeout", "complete_attempt", True, True, None, None, "timed_out"),
    CompletionRule("complete.intent", "complete_attempt", True, None, None, None, "cancelled"),
    CompletionRule("complete.deadline", "complete_attempt", None, None, True, None, "timed_out"),
    CompletionRule("complete.exit_zero", "complete_attempt", None, None, None, True, "succeeded"),
    CompletionRule("complete.otherwise", "complete_attempt", None, None, None, None, "failed"),
)
