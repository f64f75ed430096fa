"""Argument validation (commands.md §4, check 1 of every command; §2.6 for pages), read from the
model's table of argument shapes (model/arguments.py), which the model's commands read too.

Shape checks run before any storage work (storage.md §6.1–§6.2): `command` and `page`. The few
checks that compare an argument with the observation time (a lease expiry or task deadline beyond
the timestamp range) can only run once the clock has been read inside the transaction: `at_now`.
Both kinds raise the same Invalid `argument_invalid`, so splitting them never changes an outcome.
"""

from __future__ import annotations

from typing import Any

from qlwf.model.arguments import Args, check_arguments, check_at_now, check_page
from qlwf.model.errors import CommandErrors
from qlwf.model.records import normalize_binding


def command(fail: CommandErrors, raw: Any) -> Args:
    """`raw` once it has exactly the command's keys and each value its shape (else the command's Invalid)."""
    return check_arguments(fail, raw)


def at_now(fail: CommandErrors, args: Args, now: int) -> None:
    """The checks of `args` against the observation time read under the locks."""
    check_at_now(fail, args, now)


def task_admission(fail: CommandErrors, raw: Any) -> tuple[Args, dict[str, Any]]:
    """admit_task_attempt's arguments and its normalized binding."""
    args = check_arguments(fail, raw)
    return args, normalize_binding(args["binding"], fail.argument_raiser())


def page(fail: CommandErrors, args: Any, query: str) -> tuple[int, tuple[Any, ...] | None]:
    """commands.md §2.6: exactly {limit, after?}; returns (limit, cursor tuple or None)."""
    return check_page(fail, args, query)
