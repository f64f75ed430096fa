"""StepRun transitions, mutations, ledger entries and replay resolution (state-machines.md §3)."""

from __future__ import annotations

import operator
from typing import Any, cast

from . import tables as T
from .canonical import digest_bytes, json_digest, plain_canonical_json
from .errors import Conflict
from .record_common import _HEX_64, _IDENT_128
from .records import (
    STEP_FAIL,
    STEP_RUN_KEYS,
    Record,
    actor_problem,
    exact_keys,
    make_event,
    normalize_step_run,
    seal_built_step_run,
    seal_new_step_run,
    shared_step_run,
)
from .speedups import context_values_ok, speedups_on
from .values import (
    INT31_MAX,
    SAFE_INT_MAX,
    is_digest,
    is_identifier,
    is_int31,
    is_int_in,
    is_object,
    is_reference_text,
    is_result_code,
    is_summary_text,
)

COMMAND_REQUIRED = ("expectedVersion", "expectedDigest", "mutationId", "to", "atMs")
COMMAND_OPTIONAL = ("approvalRequestId", "outputRef", "resultCode", "errorSummary")
CONTEXT_KEYS = ("expectedRunVersion", "expectedRunEventSequence", "eventId", "dedupeKey", "actor")
MUTATION_KEYS = (
    "schema", "mutationId", "runId", "expectedRunVersion", "expectedRunEventSequence",
    "expectedStepRunVersion", "expectedStepRunDigest", "previousStatus", "stepRun", "event", "mutationDigest",
)
LEDGER_KEYS = (
    "mutationId", "mutationDigest", "runId", "stepRunId", "stepRunDigest", "eventId", "eventSequence",
    "runVersion", "stepRun", "committedAtMs",
)
IMMUTABLE_STEP_KEYS = (
    "id", "runId", "parentStepRunId", "stepKey", "kind", "definitionRef", "definitionDigest", "required",
    "inputRef", "createdAtMs",
)
_COMMAND_REQUIRED_SET = frozenset(COMMAND_REQUIRED)
_COMMAND_KEYSET = frozenset(COMMAND_REQUIRED + COMMAND_OPTIONAL)
_OPTIONAL_RULES = {
    "approvalRequestId": is_identifier,
    "outputRef": is_reference_text,
    "resultCode": is_result_code,
    "errorSummary": is_summary_text,
}


def fence_conflict(message: str) -> Conflict:
    return Conflict(T.STEP_RUN_FENCE_CONFLICT, "fence_conflict", message)


def state_conflict(message: str) -> Conflict:
    return Conflict(T.STEP_RUN_STATE_CONFLICT, "state_conflict", message)


def transition_step_run(current: Any, command: Any) -> Record:
    """Apply one transition (state-machines.md §3.2); the first failing check wins."""
    return _transition(normalize_step_run(current), command)


def _transition(cur: Record, command: Any) -> Record:
    """§3.2 checks 2–9 and the field effects, for an already normalized StepRun."""
    fail = STEP_FAIL
    if not (type(command) is dict and _COMMAND_REQUIRED_SET <= command.keys() <= _COMMAND_KEYSET):
        exact_keys(command, COMMAND_REQUIRED, COMMAND_OPTIONAL, fail, "StepRun transition command")
    # `if not ...: fail(...)`: no message is built (and no call made) when a check passes. The value
    # predicates are inlined (is_int_in, is_digest, is_timestamp, is_identifier).
    to = command["to"]
    if to not in T.STEP_STATUSES:
        fail("transition target is not a StepRun status")
    expected_version, expected_digest = command["expectedVersion"], command["expectedDigest"]
    if not (type(expected_version) is int and 1 <= expected_version <= INT31_MAX
            and type(expected_digest) is str and _HEX_64(expected_digest) is not None):
        fail("expectedVersion/expectedDigest invalid")
    if expected_version != cur["version"] or expected_digest != cur["stepRunDigest"]:
        raise fence_conflict(f"StepRun {cur['id']} is not at the expected version/digest")
    if to not in T.STEP_TRANSITIONS[cur["status"]]:
        raise state_conflict(f"StepRun {cur['id']} cannot go {cur['status']} -> {to}")
    at = command["atMs"]
    if not (type(at) is int and cur["updatedAtMs"] <= at <= SAFE_INT_MAX):  # updatedAtMs >= 0
        fail("transition time precedes updatedAtMs")
    mutation_id = command["mutationId"]
    if not (type(mutation_id) is str and _IDENT_128(mutation_id) is not None):
        fail("mutationId invalid")
    supplied = {k: command[k] for k in COMMAND_OPTIONAL if k in command}
    for key, value in supplied.items():
        if not _OPTIONAL_RULES[key](value):
            fail(f"{key} invalid")
    approval_ok = to == "waiting_approval" or (to == "running" and cur["status"] == "waiting_approval")
    if not (to != "waiting_approval" or "approvalRequestId" in supplied):
        fail("waiting_approval requires approvalRequestId")
    if (to == "running" and cur["status"] == "waiting_approval"
            and not supplied.get("approvalRequestId") == cur["approvalRequestId"]):  # noqa: SIM201 - as before
        fail("running from waiting_approval requires the current approvalRequestId")
    if not (approval_ok or "approvalRequestId" not in supplied):
        fail("approvalRequestId not allowed here")
    if not (to == "succeeded" or "outputRef" not in supplied):
        fail("outputRef allowed only when succeeded")
    if ("resultCode" in supplied) != (to in T.STEP_RESULT_CODE_REQUIRED):
        fail("resultCode required exactly for failed/skipped/cancelled/timed_out/lost")
    if not (to in T.STEP_ERROR_SUMMARY_ALLOWED or "errorSummary" not in supplied):
        fail("errorSummary allowed only for failed/timed_out/lost")
    if to == "running" and cur["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS:
        raise state_conflict(f"StepRun {cur['id']} has exhausted its attempts")
    if not cur["version"] < INT31_MAX:
        fail("StepRun version would overflow")

    nxt = dict(cur)
    for key in T.STEP_FIELDS_RESET:
        nxt[key] = None
    for field, effect in T.STEP_FIELD_EFFECTS[to]:  # §3.2 field effects, read from the table
        if effect == "at":
            nxt[field] = at
        elif effect == "null":
            nxt[field] = None
        elif effect == "kept_or_at":
            nxt[field] = cur[field] if cur[field] is not None else at
        elif effect == "increment":
            nxt[field] = cur[field] + 1
        elif effect == "supplied":
            nxt[field] = supplied[field]
        elif effect == "supplied_or_null":
            nxt[field] = supplied.get(field)
        elif effect == "supplied_if_given":
            if field in supplied:
                nxt[field] = supplied[field]
        else:
            raise AssertionError(f"STEP_FIELD_EFFECTS has an unknown effect {effect!r}")
    nxt["status"] = to
    nxt["version"] = cur["version"] + 1
    nxt["updatedAtMs"] = at
    nxt["lastMutationId"] = command["mutationId"]
    # Self-check (§3.2): the produced record must satisfy the record invariants.
    return seal_built_step_run(nxt, fresh=True)  # nxt is this call's own copy


_CONTEXT_KEYSET = frozenset(CONTEXT_KEYS)
_CONTEXT_VALUES = operator.itemgetter(*CONTEXT_KEYS)


def _check_context(context: Any) -> Record:
    """records.md §6.5 "Mutation context": exactly its keys, INT31 counters (2147483647 included: only a
    counter above it fails, frontier.md §4.2, as in ql3; docs/divergences.md), an actor."""
    if (speedups_on() and type(context) is dict and context.keys() == _CONTEXT_KEYSET
            and context_values_ok(_CONTEXT_VALUES(context))):  # every check at once (model/speedups.py)
        return cast(Record, context)
    fail = STEP_FAIL
    exact_keys(context, CONTEXT_KEYS, (), fail, "mutation context")
    fail.check(is_int31(context["expectedRunVersion"]) and is_int31(context["expectedRunEventSequence"]),
               "mutation context Run counters invalid")
    fail.check(is_identifier(context["eventId"]) and is_identifier(context["dedupeKey"]),
               "mutation context eventId/dedupeKey invalid")
    problem = actor_problem(context["actor"])
    if problem:
        fail(f"mutation context {problem}")
    return cast(Record, context)


def mutation_digest(mutation: Record) -> str:
    return json_digest(T.DOMAIN_STEP_RUN_MUTATION, {k: mutation[k] for k in MUTATION_KEYS[:-1]})


def mutation_event(step_run: Record, previous_status: str | None, context: Record) -> Record:
    payload = {
        "stepRunId": step_run["id"], "stepKey": step_run["stepKey"], "kind": step_run["kind"],
        "from": previous_status, "to": step_run["status"], "version": step_run["version"],
        "stepRunDigest": step_run["stepRunDigest"],
    }
    event = make_event(
        event_id=context["eventId"], run_id=step_run["runId"], sequence=context["expectedRunEventSequence"] + 1,
        type_="step.created" if previous_status is None else f"step.{step_run['status']}",
        actor=context["actor"], payload=payload, created_at_ms=step_run["updatedAtMs"],
        step_run_id=step_run["id"],
    )
    if context["dedupeKey"] != context["eventId"]:
        event["dedupeKey"] = context["dedupeKey"]  # make_event wrote the key already: its place stays
    return event


def _mutation(previous: Record | None, step_run: Record, context: Record) -> Record:
    """The mutation record (§6.5) of `step_run`, validated or built by the model, under a checked context."""
    m = {
        "schema": T.SCHEMA_STEP_RUN_MUTATION,
        "mutationId": step_run["lastMutationId"],
        "runId": step_run["runId"],
        "expectedRunVersion": context["expectedRunVersion"],
        "expectedRunEventSequence": context["expectedRunEventSequence"],
        "expectedStepRunVersion": None if previous is None else previous["version"],
        "expectedStepRunDigest": None if previous is None else previous["stepRunDigest"],
        "previousStatus": None if previous is None else previous["status"],
        "stepRun": step_run,
        "event": mutation_event(step_run, None if previous is None else previous["status"], context),
    }
    # m holds exactly the unsigned mutation, in canonical order. Every value in it was validated or
    # built by the model (no floats), so the fast encoder is exact for it.
    m["mutationDigest"] = digest_bytes(T.DOMAIN_STEP_RUN_MUTATION, plain_canonical_json(m))
    return m


def transition_step_run_mutation(current: Any, command: Any, context: Any) -> Record:
    """§3.3: the transition wrapped in a StepRunMutation with its event."""
    return transition_normalized_mutation(shared_step_run(current), command, context)


def transition_normalized_mutation(cur: Record, command: Any, context: Any) -> Record:
    """transition_step_run_mutation for a StepRun the caller has already normalized."""
    return _mutation(cur, _transition(cur, command), _check_context(context))


CREATE_FIELDS = ("id", "runId", "stepKey", "kind", "definitionRef", "definitionDigest", "required",
                 "initialStatus", "createdAtMs")


def create_step_run(fields: Record, mutation_id: str) -> Record:
    """records.md §6.3 creation: version 1, readyAtMs = createdAtMs iff ready."""
    ready = fields["initialStatus"] == "ready"
    s = {
        "schema": T.SCHEMA_STEP_RUN, "id": fields["id"], "runId": fields["runId"], "parentStepRunId": None,
        "stepKey": fields["stepKey"], "kind": fields["kind"], "definitionRef": fields["definitionRef"],
        "definitionDigest": fields["definitionDigest"], "required": fields["required"],
        "status": fields["initialStatus"], "version": 1, "attemptCount": 0, "inputRef": None,
        "outputRef": None, "approvalRequestId": None, "readyAtMs": fields["createdAtMs"] if ready else None,
        "startedAtMs": None, "finishedAtMs": None, "resultCode": None, "errorSummary": None,
        "createdAtMs": fields["createdAtMs"], "updatedAtMs": fields["createdAtMs"], "lastMutationId": mutation_id,
    }
    return seal_new_step_run(s)


def create_step_run_mutation(fields: Any, mutation_id: str, context: Any) -> Record:
    exact_keys(fields, CREATE_FIELDS, (), STEP_FAIL, "StepRun creation fields")
    STEP_FAIL.check(fields["initialStatus"] in ("pending", "ready"), "initialStatus must be pending or ready")
    STEP_FAIL.check(is_identifier(mutation_id), "mutationId invalid")
    return _mutation(None, create_step_run(fields, mutation_id), _check_context(context))


def ledger_entry(mutation: Record, committed_at_ms: int) -> Record:
    """records.md §6.6: the durable form of a mutation."""
    s = mutation["stepRun"]
    return {
        "mutationId": mutation["mutationId"], "mutationDigest": mutation["mutationDigest"],
        "runId": mutation["runId"], "stepRunId": s["id"], "stepRunDigest": s["stepRunDigest"],
        "eventId": mutation["event"]["id"], "eventSequence": mutation["event"]["sequence"],
        "runVersion": mutation["expectedRunVersion"] + 1, "stepRun": s, "committedAtMs": committed_at_ms,
    }


def normalize_mutation(x: Any) -> Record:
    """records.md §6.5: exact keys, value rules, record invariants, event rebuilt, digest."""
    fail = STEP_FAIL
    exact_keys(x, MUTATION_KEYS, (), fail, "StepRun mutation")
    fail.check(x["schema"] == T.SCHEMA_STEP_RUN_MUTATION, "mutation schema mismatch")
    step_run = normalize_step_run(x["stepRun"])
    fail.check(is_identifier(x["mutationId"]) and x["mutationId"] == step_run["lastMutationId"],
               "mutationId must equal stepRun.lastMutationId")
    fail.check(x["runId"] == step_run["runId"], "runId must equal stepRun.runId")
    fail.check(is_int31(x["expectedRunVersion"]) and is_int31(x["expectedRunEventSequence"]),
               "expected Run counters must be INT31")
    creation = x["expectedStepRunVersion"] is None
    fail.check(creation == (x["expectedStepRunDigest"] is None) == (x["previousStatus"] is None),
               "expectedStepRunVersion, expectedStepRunDigest and previousStatus are null together")
    if not creation:
        fail.check(is_int_in(x["expectedStepRunVersion"], 1, INT31_MAX) and is_digest(x["expectedStepRunDigest"])
                   and x["previousStatus"] in T.STEP_STATUSES, "expected StepRun fields invalid")
    fail.check(step_run["version"] == (x["expectedStepRunVersion"] or 0) + 1,
               "stepRun.version must be expectedStepRunVersion + 1")
    event = x["event"]
    fail.check(is_object(event) and type(event.get("id")) is str and type(event.get("dedupeKey")) is str
               and type(event.get("actorType")) is str, "mutation event invalid")
    actor = {"type": event["actorType"], **({"id": event["actorId"]} if "actorId" in event else {})}
    context = {"expectedRunVersion": x["expectedRunVersion"], "expectedRunEventSequence": x["expectedRunEventSequence"],
               "eventId": event["id"], "dedupeKey": event["dedupeKey"], "actor": actor}
    # A stored mutation's event sequence and ledger runVersion are expected + 1, INT31 (records.md §6.4, §6.6).
    fail.check(x["expectedRunVersion"] < INT31_MAX and x["expectedRunEventSequence"] < INT31_MAX,
               "Run counter would overflow")
    _check_context(context)
    fail.check(event == mutation_event(step_run, x["previousStatus"], context),
               "mutation event differs from the event rebuilt from the mutation")
    m = {k: x[k] for k in MUTATION_KEYS[:-1]} | {"stepRun": step_run}
    fail.check(is_digest(x["mutationDigest"]) and x["mutationDigest"] == mutation_digest(m), "mutationDigest mismatch")
    return {**m, "mutationDigest": x["mutationDigest"]}


def resolve_step_run_mutation(current: Record | None, mutation: Any) -> str:
    """§3.3 replay resolution: `existing`, `apply`, or a typed error."""
    fail = STEP_FAIL
    new = normalize_mutation(mutation)["stepRun"]
    if current is not None:
        current = normalize_step_run(current)
        if current["lastMutationId"] == mutation["mutationId"]:
            if current == new:
                return "existing"
            raise Conflict(T.STEP_RUN_MUTATION_CONFLICT, "mutation_conflict",
                           f"StepRun {current['id']} already carries mutation {mutation['mutationId']} differently")
    if mutation["previousStatus"] is None:
        if current is not None:
            raise fence_conflict(f"StepRun {new['id']} already exists")
        return "apply"
    if current is None or (current["version"], current["stepRunDigest"], current["status"]) != (
        mutation["expectedStepRunVersion"], mutation["expectedStepRunDigest"], mutation["previousStatus"]
    ):
        raise fence_conflict("StepRun is not at the mutation's expected version/digest/status")
    fail.check(all(current[k] == new[k] for k in IMMUTABLE_STEP_KEYS), "mutation changes immutable StepRun fields")
    command = {"expectedVersion": current["version"], "expectedDigest": current["stepRunDigest"],
               "mutationId": mutation["mutationId"], "to": new["status"], "atMs": new["updatedAtMs"]}
    for key in COMMAND_OPTIONAL:
        if new[key] is not None and key in ("outputRef", "resultCode", "errorSummary"):
            command[key] = new[key]
    if new["status"] == "waiting_approval" or (new["status"] == "running"
                                                and current["status"] == "waiting_approval"):
        command["approvalRequestId"] = new["approvalRequestId"]
    fail.check(transition_step_run(current, command) == new, "mutation post-image differs from the transition")
    return "apply"


__all__ = [
    "CONTEXT_KEYS", "LEDGER_KEYS", "MUTATION_KEYS", "STEP_RUN_KEYS", "create_step_run", "create_step_run_mutation",
    "ledger_entry", "mutation_digest", "resolve_step_run_mutation", "transition_step_run",
    "transition_step_run_mutation",
]
