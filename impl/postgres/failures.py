"""The PostgreSQL error mapping (storage.md §6.2)."""

from __future__ import annotations

from qlwf.model.errors import CommandErrors, QlwfError

# Serialization failure, deadlock, lock not available (the 1 s lock timeout): re-run the command.
RETRYABLE = frozenset({"40001", "40P01", "55P03"})
# Foreign key, unique and check violations.
CONSTRAINT = frozenset({"23503", "23505", "23514"})
# A compare-and-set that changed no row (schema.sql `ql3.require_one_row`): Conflict `concurrent_change`
# (storage.md §5). A class of its own ("QL"), used by no PostgreSQL error, so nothing else maps to it.
CAS_FAILED = "QL001"


def sqlstate(error: BaseException) -> str | None:
    return getattr(error, "sqlstate", None)


def map_storage_error(fail: CommandErrors, error: BaseException) -> QlwfError:
    """23503/23505/23514 → Conflict `constraint_violation`; any other error → Unavailable `storage_error`."""
    if isinstance(error, QlwfError):
        return error
    state = sqlstate(error)
    if state in CONSTRAINT:
        return fail.conflict("constraint_violation", f"SQLSTATE {state}: {error}")
    kind = f"SQLSTATE {state}" if state else type(error).__name__
    return fail.unavailable("storage_error", f"{kind}: {error}")
