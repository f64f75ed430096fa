"""The argument shapes of the commands (commands.md §4, check 1 of every command; §2.6 for pages).

One table, read by the model's commands (model/cmd_*.py) and by every storage implementation
(impl/commands/arguments.py): for each writing command its argument keys in order, each with the
shape its value must have and the message of the Invalid `argument_invalid` that a value of
another shape gets. The page cursors' shapes are T.QUERY_PAGES. Argument shapes are record
shapes, shared like records.py (docs/architecture.md "What impl shares with the model").

Shapes run before any storage work (storage.md §6.1–§6.2). The few checks that compare an argument
with the observation time (`AT_NOW`: a lease expiry or task deadline beyond the timestamp range)
need the clock, which a storage implementation reads inside its transaction, after its locks; they
raise the same Invalid `argument_invalid`, so running them later never changes an outcome (each is
on the last key of its command, so the first failing check is the same either way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple, cast

from . import tables as T
from .errors import CommandErrors, InvalidRaiser
from .records import actor_problem, exact_keys
from .values import (
    INT31_MAX,
    SAFE_INT_MAX,
    is_digest,
    is_identifier,
    is_int_in,
    is_portable_id,
    is_timestamp,
)

Args = dict[str, Any]


class Shape(NamedTuple):
    """What an argument's value must be: `ok(value)`, else Invalid `argument_invalid` with `message`
    (a function of the value when the message says what is wrong with it)."""

    ok: Callable[[Any], bool]
    message: str | Callable[[Any], str]

    def problem(self, value: Any) -> str | None:
        if self.ok(value):
            return None
        return self.message if isinstance(self.message, str) else self.message(value)


class AtNow(NamedTuple):
    """A check of an argument against the observation time `now`."""

    ok: Callable[[Any, int], bool]
    message: str


# The shapes one key has in every command that takes it.
ATTEMPT_ID: Final = Shape(is_portable_id, "attemptId must be a PORTABLE_ID")
WORKER_ID: Final = Shape(is_identifier, "workerId must be an IDENTIFIER")
LEASE_GENERATION: Final = Shape(lambda v: is_int_in(v, 1, INT31_MAX), f"leaseGeneration must be 1..{INT31_MAX}")
DURATION_MS: Final = Shape(lambda v: is_int_in(v, T.LEASE_DURATION_MIN_MS, T.LEASE_DURATION_MAX_MS),
                           f"durationMs must be {T.LEASE_DURATION_MIN_MS}..{T.LEASE_DURATION_MAX_MS}")
RUN_ID: Final = Shape(is_portable_id, "runId must be a PORTABLE_ID")
# admit_task_attempt names both ids in one message (commands.md §4.5 check 1)
TASK_RUN_ID: Final = Shape(is_portable_id, "runId/stepRunId invalid")
TASK_STEP_RUN_ID: Final = Shape(is_identifier, "runId/stepRunId invalid")

_WORKER: Final = (("attemptId", ATTEMPT_ID), ("workerId", WORKER_ID))
_FENCED: Final = (*_WORKER, ("leaseGeneration", LEASE_GENERATION))

# command → its argument keys in order, each with its shape; None: the command normalizes the value
# itself (the plan: Invalid `plan_invalid` of the plan family, commands.md §4.1; the binding:
# records.normalize_binding, Invalid `argument_invalid`).
ARGUMENTS: Final[dict[str, tuple[tuple[str, Shape | None], ...]]] = {
    "admit_workflow": (("plan", None),),
    "advance_frontier": (("runId", RUN_ID),),
    "admit_task_attempt": (("runId", TASK_RUN_ID), ("stepRunId", TASK_STEP_RUN_ID), ("binding", None)),
    "claim_lease": (*_WORKER, ("durationMs", DURATION_MS)),
    "renew_lease": (*_FENCED, ("durationMs", DURATION_MS)),
    "release_lease": (*_FENCED, ("reason", Shape(lambda v: v in T.WORKER_RELEASE_REASONS,
                                                 "reason must be a worker release reason"))),
    "start_attempt": (*_FENCED, ("timeoutMs", Shape(lambda v: v is None or is_int_in(v, 1, INT31_MAX),
                                                    f"timeoutMs must be null or 1..{INT31_MAX}"))),
    "record_running": _FENCED,
    "fail_start": _FENCED,
    "complete_attempt": (*_FENCED, ("exitCode", Shape(lambda v: is_int_in(v, -INT31_MAX - 1, INT31_MAX),
                                                      "exitCode must be a 32-bit integer"))),
    "recover_attempt": (("attemptId", ATTEMPT_ID),
                        ("evidence", Shape(lambda v: v in T.RECOVERY_EVIDENCE,
                                           "evidence must be not_running, running or unknown"))),
    "request_cancel": (("runId", RUN_ID), ("reason", Shape(lambda v: v in T.CANCEL_REASONS,
                                                           "reason must be a cancel reason")),
                       ("actor", Shape(lambda v: actor_problem(v) is None, lambda v: actor_problem(v) or ""))),
    "converge_cancellation": (("runId", RUN_ID),),
}

# key → its check against the observation time, in every command that takes the key.
AT_NOW: Final[dict[str, AtNow]] = {
    "durationMs": AtNow(lambda v, now: now + v <= SAFE_INT_MAX, "lease expiry exceeds the timestamp range"),
    "timeoutMs": AtNow(lambda v, now: v is None or now + v <= SAFE_INT_MAX, "deadline exceeds the timestamp range"),
}

CURSOR_SHAPES: Final[dict[str, Callable[[Any], bool]]] = {
    "timestamp": is_timestamp, "digest": is_digest, "identifier": is_identifier, "portable_id": is_portable_id,
}


def argument_keys(command: str) -> tuple[str, ...]:
    return tuple(key for key, _ in ARGUMENTS[command])


def check_arguments(fail: CommandErrors, args: Any, now: int | None = None) -> Args:
    """`args` of `fail.command`, once it has exactly the command's keys and every value its shape
    (else the first failing check's Invalid); with `now`, each key's AT_NOW check runs right after
    its shape, as the model does, without it they are left to `check_at_now`."""
    spec = ARGUMENTS[fail.command]
    exact_keys(args, argument_keys(fail.command), (), fail.argument_raiser(), f"{fail.command} arguments")
    for key, shape in spec:
        if shape is not None:
            problem = shape.problem(args[key])
            if problem is not None:
                raise fail.invalid("argument_invalid", problem)
        if now is not None and key in AT_NOW:
            _at_now(fail, key, args[key], now)
    return cast(Args, args)


def check_at_now(fail: CommandErrors, args: Args, now: int) -> None:
    """The AT_NOW checks of checked `args`, once the observation time is known."""
    for key, _ in ARGUMENTS[fail.command]:
        if key in AT_NOW:
            _at_now(fail, key, args[key], now)


def _at_now(fail: CommandErrors, key: str, value: Any, now: int) -> None:
    check = AT_NOW[key]
    fail.require(check.ok(value, now), check.message)


def check_page(fail: CommandErrors, args: Any, query: str) -> tuple[int, tuple[Any, ...] | None]:
    """commands.md §2.6: exactly {limit, after?}, the limit within the query's bound and the cursor
    with the query's keys and shapes (T.QUERY_PAGES); returns (limit, cursor tuple or None)."""
    limit_max, cursor_keys = T.QUERY_PAGES[query]
    raiser = InvalidRaiser(fail.family.invalid or "", "page_invalid")
    exact_keys(args, ("limit",), ("after",), raiser, "page")
    raiser.check(is_int_in(args["limit"], 1, limit_max), f"limit must be 1..{limit_max}")
    if "after" not in args:
        return args["limit"], None
    after = args["after"]
    exact_keys(after, tuple(k for k, _ in cursor_keys), (), raiser, "cursor")
    for key, kind in cursor_keys:
        raiser.check(CURSOR_SHAPES[kind](after[key]), f"cursor {key} invalid")
    return args["limit"], tuple(after[k] for k, _ in cursor_keys)
