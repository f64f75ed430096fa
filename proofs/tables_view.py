"""The rule tables the encoding reads, gathered in one replaceable value.

`Tables.model()` takes every table from `qlwf.model.tables` (nothing is copied into proofs/);
mutants build the encoding from `dataclasses.replace(Tables.model(), SOME_TABLE=mutated)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qlwf.model import tables as T


@dataclass(frozen=True)
class Tables:
    RUN_STATUSES: tuple[str, ...]
    STEP_STATUSES: tuple[str, ...]
    ATTEMPT_STATUSES: tuple[str, ...]
    LEASE_STATUSES: tuple[str, ...]
    CANCEL_REASONS: tuple[str, ...]
    RECOVERY_EVIDENCE: tuple[str, ...]
    TERMINAL_RUN: frozenset[str]
    TERMINAL_STEP: frozenset[str]
    BLOCKING_STEP: frozenset[str]
    ACTIVE_ATTEMPT: frozenset[str]
    TERMINAL_ATTEMPT: frozenset[str]
    STEP_TRANSITIONS: dict[str, frozenset[str]]
    STEP_RESULT_CODE_REQUIRED: frozenset[str]
    STEP_ERROR_SUMMARY_ALLOWED: frozenset[str]
    STEP_PERFORMERS: tuple[Any, ...]
    RUN_TRANSITIONS: tuple[Any, ...]
    ATTEMPT_TRANSITIONS: tuple[Any, ...]
    LEASE_TRANSITIONS: tuple[Any, ...]
    CANCEL_REASON_TARGET: dict[str, Any]
    CANCEL_STEP_TABLE: dict[tuple[str, bool], Any]
    CANCEL_ATTEMPT_TABLE: dict[tuple[str, str | None], str]
    COMPLETION_RULES: tuple[Any, ...]
    AGG_PRECEDENCE: tuple[tuple[frozenset[str], str], ...]
    WORKER_PATH_CODES: dict[tuple[str, str], Any]
    RECOVERY_PATH_CODES: dict[str, Any]
    FRONTIER_SKIP_RESULT_CODE: str
    FRONTIER_TERMINAL_ERROR_CODE: dict[str, str | None]
    CODE_TEXTS: dict[str, str]
    MAX_STEP_RUN_ATTEMPTS: int
    MAX_RUN_ATTEMPTS: int
    MAX_STEP_RUNS_PER_RUN: int
    MAX_CANCELLATION_PAGE: int

    @classmethod
    def model(cls) -> Tables:
        return cls(**{name: getattr(T, name) for name in cls.__dataclass_fields__})

    # ---- derived vocabularies (used to size the enumeration sorts) ----------------------------
    def step_codes(self) -> list[str | None]:
        codes: list[str | None] = [None, self.FRONTIER_SKIP_RESULT_CODE]
        codes += [d.result_code for d in self.CANCEL_STEP_TABLE.values()]
        codes += [c.step_result_code for c in (*self.WORKER_PATH_CODES.values(), *self.RECOVERY_PATH_CODES.values())]
        return codes

    def attempt_codes(self) -> list[str | None]:
        codes: list[str | None] = [None]
        codes += [c.attempt_error_code for c in (*self.WORKER_PATH_CODES.values(), *self.RECOVERY_PATH_CODES.values())]
        codes += [t.error_code for t in self.CANCEL_REASON_TARGET.values()]
        return codes

    def run_codes(self) -> list[str | None]:
        return [None, *self.FRONTIER_TERMINAL_ERROR_CODE.values(),
                *(t.error_code for t in self.CANCEL_REASON_TARGET.values())]

    def texts(self) -> list[str | None]:
        texts: list[str | None] = [None, *self.CODE_TEXTS.values()]
        texts += [d.error_summary for d in self.CANCEL_STEP_TABLE.values()]
        for c in (*self.WORKER_PATH_CODES.values(), *self.RECOVERY_PATH_CODES.values()):
            texts += [c.step_error_summary, c.attempt_error_summary]
        texts += [t.error_summary for t in self.CANCEL_REASON_TARGET.values()]
        return texts

    def text_label(self, text: str | None) -> str | None:
        """Readable name of a fixed text: `text(CODE)` when it is the text of a code."""
        if text is None:
            return None
        code = next((k for k, v in self.CODE_TEXTS.items() if v == text), None)
        return f"text({code})" if code else text
