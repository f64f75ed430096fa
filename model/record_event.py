"""The RunEvent (records.md §6.4) and its actor: keys, shape, and the event every v1 producer writes."""

from __future__ import annotations

from typing import Any

from . import tables as T
from .canonical import canonical_json
from .record_common import Record
from .values import INT31_MAX, is_identifier, is_int_in, is_object, is_portable_id, is_str, is_timestamp

EVENT_KEYS = (
    "id", "runId", "sequence", "type", "dedupeKey", "actorType", "actorId", "attemptId", "stepRunId",
    "payload", "createdAtMs",
)


def event_problem(x: Any) -> str | None:
    if not is_object(x):
        return "event must be an object"
    required = ("id", "runId", "sequence", "type", "actorType", "payload", "createdAtMs")
    if any(k not in x for k in required) or set(x) - set(EVENT_KEYS):
        return "event keys mismatch"
    checks = (
        is_portable_id(x["id"]), is_portable_id(x["runId"]), is_int_in(x["sequence"], 1, INT31_MAX),
        is_str(x["type"]) and 1 <= len(x["type"]) <= 128, x["actorType"] in T.ACTOR_TYPES,
        is_object(x["payload"]), is_timestamp(x["createdAtMs"]),
        "dedupeKey" not in x or (is_str(x["dedupeKey"]) and 1 <= len(x["dedupeKey"]) <= 255),
        "actorId" not in x or is_identifier(x["actorId"]),
        "attemptId" not in x or is_portable_id(x["attemptId"]),
        "stepRunId" not in x or is_identifier(x["stepRunId"]),
    )
    if not all(checks):
        return "event field invalid"
    if len(canonical_json(x["payload"])) > T.MAX_EVENT_PAYLOAD_BYTES:
        return "event payload exceeds 16384 bytes"
    return None


def make_event(*, event_id: str, run_id: str, sequence: int, type_: str, actor: Record,
               payload: Record, created_at_ms: int, attempt_id: str | None = None,
               step_run_id: str | None = None) -> Record:
    """A RunEvent in canonical order with dedupeKey = id (every v1 producer)."""
    e: Record = {"id": event_id, "runId": run_id, "sequence": sequence, "type": type_, "dedupeKey": event_id,
                 "actorType": actor["type"]}
    if "id" in actor:
        e["actorId"] = actor["id"]
    if attempt_id is not None:
        e["attemptId"] = attempt_id
    if step_run_id is not None:
        e["stepRunId"] = step_run_id
    e["payload"] = payload
    e["createdAtMs"] = created_at_ms
    return e


def actor_problem(actor: Any) -> str | None:
    if not is_object(actor) or "type" not in actor or set(actor) - {"type", "id"}:
        return "actor must be {type} or {type, id}"
    if actor["type"] not in T.ACTOR_TYPES:
        return "actor type invalid"
    if "id" in actor and not is_identifier(actor["id"]):
        return "actor id invalid"
    return None
