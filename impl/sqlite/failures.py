"""Typed errors of one command (commands.md §2.2–§2.3) and the SQLite error mapping (storage.md §6.1)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from qlwf.model import tables as T
from qlwf.model.errors import Conflict, Invalid, QlwfError, Unavailable
from qlwf.model.records import Failer

SQLITE_CONSTRAINT = 19  # primary result code of every constraint-class error, trigger aborts included


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

    def map_storage_error(self, error: BaseException) -> QlwfError:
        """storage.md §6.1: constraint class → Conflict; any other storage error → Unavailable."""
        if isinstance(error, QlwfError):
            return error
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(error, sqlite3.IntegrityError) or (code is not None and code & 0xFF == SQLITE_CONSTRAINT):
            return self.conflict("constraint_violation", str(error))
        return self.unavailable("storage_error", f"{type(error).__name__}: {error}")


class ConcurrentChange(Exception):
    """A compare-and-set matched no row; mapped to Conflict `concurrent_change` by the command."""
