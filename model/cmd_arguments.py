"""Argument checks of the model's commands (commands.md §4, check 1; §2.6 for pages; mirrors
impl/commands/arguments.py).
"""

from __future__ import annotations

from typing import Any, cast

from . import tables as T
from .cmd_context import CommandContext
from .errors import InvalidRaiser
from .records import exact_keys
from .values import INT31_MAX, SAFE_INT_MAX, is_digest, is_identifier, is_int_in, is_portable_id, is_timestamp


def command_args(ctx: CommandContext, args: Any, required: tuple[str, ...],
                 optional: tuple[str, ...] = ()) -> dict[str, Any]:
    exact_keys(args, required, optional, ctx.argument_raiser(), f"{ctx.command} arguments")
    return cast(dict[str, Any], args)


def worker_args(ctx: CommandContext, args: dict[str, Any], extra: tuple[str, ...] = ()) -> None:
    ctx.require(is_portable_id(args["attemptId"]), "attemptId must be a PORTABLE_ID")
    ctx.require(is_identifier(args["workerId"]), "workerId must be an IDENTIFIER")
    if "leaseGeneration" in args:
        ctx.require(is_int_in(args["leaseGeneration"], 1, INT31_MAX), "leaseGeneration must be 1..2147483647")
    if "durationMs" in args:
        ctx.require(is_int_in(args["durationMs"], T.LEASE_DURATION_MIN_MS, T.LEASE_DURATION_MAX_MS),
                 "durationMs must be 5000..600000")
        ctx.require(ctx.now + args["durationMs"] <= SAFE_INT_MAX, "lease expiry exceeds the timestamp range")


def page_args(ctx: CommandContext, args: Any, query: str) -> tuple[int, tuple[Any, ...] | None]:
    limit_max, cursor_keys = T.QUERY_PAGES[query]
    fail = InvalidRaiser(ctx.family.invalid or "", "page_invalid")
    exact_keys(args, ("limit",), ("after",), fail, "page")
    fail.check(is_int_in(args["limit"], 1, limit_max), f"limit must be 1..{limit_max}")
    if "after" not in args:
        return args["limit"], None
    after = args["after"]
    exact_keys(after, tuple(k for k, _ in cursor_keys), (), fail, "cursor")
    shape = {"timestamp": is_timestamp, "digest": is_digest, "identifier": is_identifier,
             "portable_id": is_portable_id}
    for key, kind in cursor_keys:
        fail.check(shape[kind](after[key]), f"cursor {key} invalid")
    return args["limit"], tuple(after[k] for k, _ in cursor_keys)
