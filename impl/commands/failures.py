"""Typed errors of one command (commands.md §2.2–§2.3); the storage error mapping is per dialect."""

from __future__ import annotations

from dataclasses import dataclass

from qlwf.model import tables as T
from qlwf.model.errors import Conflict, Invalid, Unavailable
from qlwf.model.records import Failer


@dataclass(frozen=True)
class Failures:
    """Builds the command family's errors; the reason vocabulary is the command's (commands.md §4)."""

    command: str

    @property
    def family(self) -> T.Family:
        return T.FAMILIES[T.COMMAND_FAMILY[self.command]]

    def invalid(self, reason: str, message: str = "") -> Invalid:
        return Invalid(self.family.invalid or "", reason, message)

    def conflict(self, reason: str, message: str = "") -> Conflict:
        return Conflict(self.family.conflict or "", reason, message)

    def unavailable(self, reason: str, message: str = "") -> Unavailable:
        return Unavailable(self.family.unavailable or "", reason, message)

    def argument_failer(self) -> Failer:
        reason = "page_invalid" if self.command.endswith("_page") else "argument_invalid"
        return Failer(self.family.invalid or "", reason)

    def require(self, ok: bool, message: str) -> None:
        if not ok:
            raise self.invalid("argument_invalid", message)


class ConcurrentChange(Exception):
    """A compare-and-set matched no row; mapped to Conflict `concurrent_change` by the backend."""


# Storage-level reasons (commands.md §2.3) that the model never produces; `counter_overflow` is not
# among them because the model produces it too.
STORAGE_REASONS = frozenset({
    "constraint_violation", "concurrent_change", "storage_busy", "storage_closed", "storage_unreachable",
    "retry_exhausted", "storage_error", "authority_locked", "authority_drift",
})
