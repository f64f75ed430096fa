"""The SQLite error mapping (storage.md §6.1); the command errors themselves are shared."""

from __future__ import annotations

import sqlite3

from qlwf.impl.commands.failures import ConcurrentChange
from qlwf.model.errors import CommandErrors, QlwfError

__all__ = ["CommandErrors", "ConcurrentChange", "map_storage_error"]

SQLITE_CONSTRAINT = 19  # primary result code of every constraint-class error, trigger aborts included


def map_storage_error(fail: CommandErrors, error: BaseException) -> QlwfError:
    """Constraint class → Conflict; any other storage error → Unavailable; command errors pass through."""
    if isinstance(error, QlwfError):
        return error
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(error, sqlite3.IntegrityError) or (code is not None and code & 0xFF == SQLITE_CONSTRAINT):
        return fail.conflict("constraint_violation", str(error))
    return fail.unavailable("storage_error", f"{type(error).__name__}: {error}")
