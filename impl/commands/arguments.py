"""Argument validation (commands.md §4, check 1 of every command; §2.6 for pages).

Shape checks run before any storage work (storage.md §6.1–§6.2). The few checks that compare an
argument with the observation time (a lease expiry or task deadline beyond the timestamp range)
can only run once the clock has been read inside the transaction: `*_at_now` functions. Both
kinds raise the same Invalid `argument_invalid`, so splitting them never changes an outcome.
"""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors, InvalidRaiser
from qlwf.model.records import actor_problem, exact_keys, normalize_binding
from qlwf.model.values import (
    INT31_MAX,
    SAFE_INT_MAX,
    is_digest,
    is_identifier,
    is_int_in,
    is_portable_id,
    is_timestamp,
)

Args = dict[str, Any]


def keys(fail: CommandErrors, args: Any, required: tuple[str, ...]) -> Args:
    """`args`, once it is an object with exactly the `required` keys (else the command's Invalid)."""
    exact_keys(args, required, (), fail.argument_raiser(), f"{fail.command} arguments")
    checked: Args = args
    return checked


def worker(fail: CommandErrors, args: Args) -> None:
    fail.require(is_portable_id(args["attemptId"]), "attemptId must be a PORTABLE_ID")
    fail.require(is_identifier(args["workerId"]), "workerId must be an IDENTIFIER")
    if "leaseGeneration" in args:
        fail.require(is_int_in(args["leaseGeneration"], 1, INT31_MAX), "leaseGeneration must be 1..2147483647")
    if "durationMs" in args:
        fail.require(is_int_in(args["durationMs"], T.LEASE_DURATION_MIN_MS, T.LEASE_DURATION_MAX_MS),
                     "durationMs must be 5000..600000")


def duration_at_now(fail: CommandErrors, args: Args, now: int) -> None:
    if "durationMs" in args:
        fail.require(now + args["durationMs"] <= SAFE_INT_MAX, "lease expiry exceeds the timestamp range")


def timeout_at_now(fail: CommandErrors, args: Args, now: int) -> None:
    timeout = args["timeoutMs"]
    fail.require(timeout is None or now + timeout <= SAFE_INT_MAX, "deadline exceeds the timestamp range")


def run_id(fail: CommandErrors, raw: Any) -> Args:
    args = keys(fail, raw, ("runId",))
    fail.require(is_portable_id(args["runId"]), "runId must be a PORTABLE_ID")
    return args


def task_admission(fail: CommandErrors, args: Any) -> tuple[Args, dict[str, Any]]:
    keys(fail, args, ("runId", "stepRunId", "binding"))
    fail.require(is_portable_id(args["runId"]) and is_identifier(args["stepRunId"]), "runId/stepRunId invalid")
    return args, normalize_binding(args["binding"], fail.argument_raiser())


WORKER_KEYS: dict[str, tuple[str, ...]] = {
    "claim_lease": ("attemptId", "workerId", "durationMs"),
    "renew_lease": ("attemptId", "workerId", "leaseGeneration", "durationMs"),
    "release_lease": ("attemptId", "workerId", "leaseGeneration", "reason"),
    "start_attempt": ("attemptId", "workerId", "leaseGeneration", "timeoutMs"),
    "record_running": ("attemptId", "workerId", "leaseGeneration"),
    "fail_start": ("attemptId", "workerId", "leaseGeneration"),
    "complete_attempt": ("attemptId", "workerId", "leaseGeneration", "exitCode"),
}


def worker_command(fail: CommandErrors, raw: Any) -> Args:
    args = keys(fail, raw, WORKER_KEYS[fail.command])
    worker(fail, args)
    if fail.command == "release_lease":
        fail.require(args["reason"] in T.WORKER_RELEASE_REASONS, "reason must be a worker release reason")
    elif fail.command == "start_attempt":
        timeout = args["timeoutMs"]
        fail.require(timeout is None or is_int_in(timeout, 1, INT31_MAX), "timeoutMs must be null or 1..2147483647")
    elif fail.command == "complete_attempt":
        fail.require(is_int_in(args["exitCode"], -2147483648, 2147483647), "exitCode must be a 32-bit integer")
    return args


def recovery(fail: CommandErrors, raw: Any) -> Args:
    args = keys(fail, raw, ("attemptId", "evidence"))
    fail.require(is_portable_id(args["attemptId"]), "attemptId must be a PORTABLE_ID")
    fail.require(args["evidence"] in T.RECOVERY_EVIDENCE, "evidence must be not_running, running or unknown")
    return args


def cancel_request(fail: CommandErrors, raw: Any) -> Args:
    args = keys(fail, raw, ("runId", "reason", "actor"))
    fail.require(is_portable_id(args["runId"]), "runId must be a PORTABLE_ID")
    fail.require(args["reason"] in T.CANCEL_REASONS, "reason must be a cancel reason")
    problem = actor_problem(args["actor"])
    fail.require(problem is None, problem or "")
    return args


_CURSOR_SHAPES = {"timestamp": is_timestamp, "digest": is_digest, "identifier": is_identifier,
                  "portable_id": is_portable_id}


def page(fail: CommandErrors, args: Any, query: str) -> tuple[int, tuple[Any, ...] | None]:
    """commands.md §2.6: exactly {limit, after?}; returns (limit, cursor tuple or None)."""
    limit_max, cursor_keys = T.QUERY_PAGES[query]
    raiser = InvalidRaiser(fail.family.invalid or "", "page_invalid")
    exact_keys(args, ("limit",), ("after",), raiser, "page")
    raiser.check(is_int_in(args["limit"], 1, limit_max), f"limit must be 1..{limit_max}")
    if "after" not in args:
        return args["limit"], None
    after = args["after"]
    exact_keys(after, tuple(k for k, _ in cursor_keys), (), raiser, "cursor")
    for key, kind in cursor_keys:
        raiser.check(_CURSOR_SHAPES[kind](after[key]), f"cursor {key} invalid")
    return args["limit"], tuple(after[k] for k, _ in cursor_keys)
