"""What every record module of `records.py` shares: the Record type, the snapshot's record keys, the
typed failure of each normalizer, exact key sets and canonical key order."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from . import tables as T
from .errors import InvalidRaiser
from .values import is_object

Record = dict[str, Any]

# The key of every record kind of a state snapshot (commands.md §1.3): record vocabulary shared by
# the trace format, the replay diff and the storage drivers.
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "admissions": ("planDigest",), "admissionSteps": ("planDigest", "stepKey"), "runs": ("id",), "stepRuns": ("id",),
    "mutations": ("mutationId",), "events": ("runId", "sequence"), "attempts": ("id",),
    "taskReceipts": ("attemptId",), "leases": ("attemptId",),
}


PLAN_FAIL = InvalidRaiser(T.FAMILIES["plan"].invalid or "", "plan_invalid")
STEP_FAIL = InvalidRaiser(T.FAMILIES["step_run"].invalid or "", "step_run_invalid")
ADMISSION_RECEIPT_FAIL = InvalidRaiser(T.FAMILIES["admission_receipt"].invalid or "", "receipt_invalid")
TASK_RECEIPT_FAIL = InvalidRaiser(T.FAMILIES["task_admission"].invalid or "", "receipt_invalid")
BINDING_FAIL = InvalidRaiser(T.FAMILIES["task_admission"].invalid or "", "argument_invalid")


@cache
def _keyset(keys: tuple[str, ...]) -> frozenset[str]:
    return frozenset(keys)


def exact_keys(x: Any, required: tuple[str, ...], optional: tuple[str, ...], fail: InvalidRaiser, what: str) -> None:
    if type(x) is dict and (x.keys() == _keyset(required) if not optional
                            else _keyset(required) <= x.keys() <= _keyset(required + optional)):
        return  # the common case, decided without building the messages' lists
    fail.check(is_object(x), f"{what} must be an object")
    keys = set(x)
    missing = [k for k in required if k not in keys]
    extra = sorted(keys - set(required) - set(optional))
    if missing or extra:
        fail(f"{what} keys mismatch (missing {missing}, unexpected {extra})")


def canonical(x: Record, order: tuple[str, ...]) -> Record:
    """A new dict with the present keys of `order`, in that order."""
    return {k: x[k] for k in order if k in x}


# The IDENTIFIER and DIGEST patterns with their length bounds, for value checks written inline.
_IDENT_128 = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", re.ASCII).fullmatch  # is_identifier's
_HEX_64 = re.compile(r"[0-9a-f]{64}", re.ASCII).fullmatch  # is_digest's
