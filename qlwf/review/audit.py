"""Audit stored Workflow Runs against the model (issue 14 §2): pure functions from a loaded snapshot to findings.

The snapshot is what the backends' `read_snapshot` readers return (commands.md §1.3), so one audit serves
SQLite and PostgreSQL. Each Run is checked on its own records, in this order, and its first finding is the
first illegal step:

1. the event log walked in sequence order: sequences contiguous from 1, every step event a legal model step
   (its ledger entry rebuilt into a StepRunMutation that `normalize_mutation` accepts and
   `resolve_step_run_mutation` applies to the StepRun replayed so far), a terminal event only last;
2. the Run row: counters (version = eventSequence = number of events), terminal status ⇔ terminal event;
3. every stored StepRun: its JSON mirror equals its columns (when the reader supplies it), its digest
   recomputes and it equals the StepRun replayed from its ledger; every stored JSON text (when the reader
   supplies it: SQLite) is the canonical JSON of its value, keys in the record's canonical order; every
   column of the generic Run, attempt and lease tables beyond storage.md §2 is NULL (§9);
4. the record rules of events, attempts and leases; plan, admission receipt and task receipt digests
   recompute; identifier recipes whose inputs are stored;
5. every invariant INV-1…31 on a model State built from the Run's records alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from qlwf.impl.readonly import EXTRA_VALUES, MIRRORS, STORED_JSON
from qlwf.model import ids, strict_json
from qlwf.model import tables as T
from qlwf.model.canonical import canonical_json
from qlwf.model.errors import QlwfError
from qlwf.model.invariants import TERMINAL_EVENT_TYPES, check_invariants, rebuild_mutation
from qlwf.model.records import (
    attempt_problem,
    event_problem,
    lease_problem,
    normalize_admission_receipt,
    normalize_plan,
    normalize_step_run,
    normalize_task_receipt,
    step_run_digest,
)
from qlwf.model.state import TABLES, State
from qlwf.model.steprun import normalize_mutation, resolve_step_run_mutation

Record = dict[str, Any]
Snapshot = dict[str, list[Record]]

# The Run a record of each kind belongs to.
_RUN_OF: dict[str, Callable[[Record], str]] = {
    "admissions": lambda a: a["plan"]["runId"],
    "admissionSteps": lambda s: s["runId"],
    "runs": lambda r: r["id"],
    "stepRuns": lambda s: s["runId"],
    "mutations": lambda m: m["runId"],
    "events": lambda e: e["runId"],
    "attempts": lambda a: a["runId"],
    "taskReceipts": lambda r: r["runId"],
    "leases": lambda x: x["runId"],
}
if tuple(_RUN_OF) != TABLES:  # every record kind has a Run to audit it under (checked without asserts: -O)
    raise ImportError(f"audit: _RUN_OF covers {tuple(_RUN_OF)}, the record kinds are {TABLES}")

# Worker-path attempt event types → the task-execution id kind of their recipe (records.md §7).
_EXECUTION_KINDS = {
    "workflow.task_dispatch_leased": "lease_claimed",
    "workflow.task_dispatch_released": "lease_released",
    "workflow.task_attempt.starting": "attempt_starting",
    "workflow.task_attempt.running": "attempt_running",
    "workflow.task_timeout_requested": "timeout_requested",
    **{f"workflow.task_attempt.{s}": "attempt_terminal" for s in T.TERMINAL_ATTEMPT},
}


@dataclass(frozen=True)
class Finding:
    run_id: str
    where: str  # "event 7", "ledger run-1:a v2", "StepRun run-1:a", "Run", "state"
    check: str  # an INV-n, or "digest" / "identifier" / "replay"
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.check}: {self.reason}"

    def to_json(self) -> Record:
        return {"runId": self.run_id, "where": self.where, "check": self.check, "reason": self.reason}


@dataclass(frozen=True)
class RunAudit:
    run_id: str
    events: int
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def to_json(self) -> Record:
        return {"runId": self.run_id, "ok": self.ok, "events": self.events,
                "first": self.first.to_json() if self.first else None,
                "findings": [f.to_json() for f in self.findings]}


def split_by_run(snap: Snapshot) -> dict[str, Snapshot]:
    """Each Run's records as a snapshot of its own, in the input's (key) order."""
    extra = (MIRRORS, STORED_JSON, EXTRA_VALUES)
    out: dict[str, Snapshot] = {r["id"]: {kind: [] for kind in (*TABLES, *extra)} for r in snap.get("runs", [])}
    for kind, run_of in (*_RUN_OF.items(), *((k, lambda m: m["runId"]) for k in extra)):
        for record in snap.get(kind, []):
            part = out.get(run_of(record))
            if part is not None:  # a record of no stored Run: the foreign keys of storage.md §2 forbid it
                part[kind].append(record)
    return out


def audit_snapshot(snap: Snapshot, on_run: Callable[[RunAudit], None] | None = None,
                   run_id: str | None = None) -> list[RunAudit]:
    """Audit every Run (or only `run_id`), in Run id order; `on_run` sees each result as it is made."""
    parts = split_by_run(snap)
    if run_id is not None:
        parts = {run_id: parts[run_id]} if run_id in parts else {}
    return audit_parts(parts.values(), on_run)


def audit_parts(parts: Iterable[Snapshot], on_run: Callable[[RunAudit], None] | None = None) -> list[RunAudit]:
    """Audit each part (one Run's records, as `split_by_run` or a reader's Run-by-Run read makes them) as it
    comes, so no more than one Run's records need be held (decisions Q-121)."""
    results = []
    for part in parts:
        result = audit_run(part)
        results.append(result)
        if on_run is not None:
            on_run(result)
    return results


def audit_run(part: Snapshot) -> RunAudit:
    """Every finding of one Run (a snapshot holding exactly one Run), the first illegal step first."""
    run = part["runs"][0]
    walk = _Walk(run, part)
    stages: list[tuple[str, Callable[[], Iterator[Finding]]]] = [
        ("log", walk.run), ("Run row", lambda: _run_row(run, part["events"])),
        ("StepRuns", lambda: _stored_step_runs(part, walk.replayed)), ("stored JSON", lambda: _stored_json(part)),
        ("extra columns", lambda: _extra_columns(part)), ("records", lambda: _records(part)),
        ("digests", lambda: _digests(part)), ("identifiers", lambda: _identifiers(part)),
        ("invariants", lambda: _invariants(part)),
    ]
    findings: list[Finding] = []
    for name, stage in stages:
        try:
            findings.extend(stage())
        except Exception as e:  # a row too malformed for a check is a finding of this Run, not a crash of the audit
            findings.append(Finding(run["id"], name, "record", f"malformed stored data: {type(e).__name__}: {e}"))
    return RunAudit(run["id"], len(part["events"]), tuple(findings))


# ------------------------------------------------------------------------------------------------
# 1. The event log and the ledger, in sequence order
class _Walk:
    def __init__(self, run: Record, part: Snapshot) -> None:
        self.run_id: str = run["id"]
        self.events = part["events"]
        self.ledger_by_event = {m["eventId"]: m for m in part["mutations"]}
        self.ledger = part["mutations"]
        self.replayed: dict[str, Record] = {}  # StepRun id → replayed so far (absent once its replay broke)
        self.broken: set[str] = set()
        self._previous: dict[str, Record] = {}  # StepRun id → its last applied ledger entry

    def finding(self, where: str, check: str, reason: str) -> Finding:
        return Finding(self.run_id, where, check, reason)

    def run(self) -> Iterator[Finding]:
        gap_reported = False
        for i, e in enumerate(self.events):
            where = f"event {e['sequence']}"
            if e["sequence"] != i + 1 and not gap_reported:
                gap_reported = True
                yield self.finding(f"event {i + 1}", "INV-2",
                                   f"sequence {i + 1} is missing: the next stored event has sequence {e['sequence']}")
            version = e["payload"].get("version") if isinstance(e["payload"], dict) else None
            if not e["type"].startswith("step.") and version is not None and version != e["sequence"]:
                yield self.finding(where, "INV-1", f"{e['type']} records Run version {version} at sequence "
                                   f"{e['sequence']}")
            if e["type"] in TERMINAL_EVENT_TYPES and i != len(self.events) - 1:
                yield self.finding(where, "INV-12", f"terminal event {e['type']} is not the last event")
            if e["type"].startswith("step."):
                yield from self._step_event(where, e)
        consumed = {e["id"] for e in self.events}
        for m in self.ledger:
            if m["eventId"] not in consumed:
                self._break(m["stepRunId"])
                yield self.finding(_ledger_where(m), "INV-8", f"ledger entry {m['mutationId']} has no event "
                                   f"{m['eventId']}")

    def _break(self, step_run_id: str) -> None:
        self.broken.add(step_run_id)
        self.replayed.pop(step_run_id, None)

    def _step_event(self, where: str, e: Record) -> Iterator[Finding]:
        entry = self.ledger_by_event.get(e["id"])
        step_id = e.get("stepRunId")
        if entry is None:
            if step_id is not None:
                self._break(step_id)
            yield self.finding(where, "INV-8", f"{e['type']} event {e['id']} has no ledger entry")
            return
        step_id = entry["stepRunId"]
        if step_id in self.broken:
            return  # one finding per StepRun: its later steps rest on a history already shown wrong
        problem = self._entry_problem(e, entry)
        if problem is None:
            previous = self._previous.get(step_id)
            # The full StepRunMutation the ledger entry and its event stand for (records.md §6.6); the model
            # then decides whether it is a legal step from the StepRun as replayed so far.
            mutation = rebuild_mutation(State(), entry, previous, e) or {}
            try:
                normalize_mutation({**mutation, "mutationDigest": entry["mutationDigest"]})
                resolve_step_run_mutation(self.replayed.get(step_id), {**mutation,
                                                                       "mutationDigest": entry["mutationDigest"]})
            except QlwfError as err:
                problem = f"ledger entry {entry['mutationId']} is not a legal model step: {err.message}"
        if problem is not None:
            self._break(step_id)
            yield self.finding(where, "INV-8", problem)
            return
        self._previous[step_id] = entry
        self.replayed[step_id] = entry["stepRun"]

    @staticmethod
    def _entry_problem(e: Record, entry: Record) -> str | None:
        if e.get("stepRunId") != entry["stepRunId"]:
            return f"event names StepRun {e.get('stepRunId')}, its ledger entry {entry['stepRunId']}"
        if entry["eventSequence"] != e["sequence"]:
            return (f"ledger entry {entry['mutationId']} records eventSequence {entry['eventSequence']}, its event "
                    f"is at sequence {e['sequence']}")
        if entry["runVersion"] != e["sequence"]:
            return f"ledger entry {entry['mutationId']} records runVersion {entry['runVersion']} at sequence " \
                   f"{e['sequence']}"
        return None


def _ledger_where(m: Record) -> str:
    return f"ledger {m['stepRunId']} v{m['stepRun']['version']}"


# ------------------------------------------------------------------------------------------------
# 2. The Run row
def _run_row(run: Record, events: list[Record]) -> Iterator[Finding]:
    def finding(check: str, reason: str) -> Finding:
        return Finding(run["id"], "Run", check, reason)

    if not run["version"] == run["eventSequence"] == len(events):
        yield finding("INV-1", f"version {run['version']}, eventSequence {run['eventSequence']}, "
                      f"{len(events)} events")
    last = events[-1]["type"] if events else None
    if run["status"] in T.TERMINAL_RUN and last != f"workflow.{run['status']}":
        yield finding("INV-12", f"Run is {run['status']} but its last event is {last}, not workflow.{run['status']}")
    if run["status"] == "running" and last in TERMINAL_EVENT_TYPES:
        yield finding("INV-12", f"Run is running after its terminal event {last}")


# ------------------------------------------------------------------------------------------------
# 3. Stored StepRuns against their replay
def _stored_step_runs(part: Snapshot, replayed: dict[str, Record]) -> Iterator[Finding]:
    has_ledger = {m["stepRunId"] for m in part["mutations"]}
    mirrors = {m["id"]: m["json"] for m in part.get(MIRRORS, [])}
    for s in part["stepRuns"]:
        where = f"StepRun {s['id']}"
        mirror = mirrors.get(s["id"], s)  # a harness snapshot carries no mirrors: nothing to compare
        if mirror != s:
            keys = sorted(k for k in {*s, *mirror} if not isinstance(mirror, dict) or mirror.get(k) != s.get(k))
            yield Finding(s["runId"], where, "mirror", f"step_run_json disagrees with the columns in {', '.join(keys)}")
            continue
        try:
            digest = step_run_digest(s)
        except (QlwfError, KeyError, TypeError) as e:
            yield Finding(s["runId"], where, "INV-6", f"stored StepRun is not a record: {e}")
            continue
        if digest != s["stepRunDigest"]:
            yield Finding(s["runId"], where, "digest", f"stepRunDigest {s['stepRunDigest']} does not recompute "
                          f"({digest})")
            continue
        try:
            normalize_step_run(s)
        except QlwfError as e:
            yield Finding(s["runId"], where, "INV-6", f"stored StepRun does not normalize: {e.message}")
            continue
        if s["id"] not in has_ledger:
            yield Finding(s["runId"], where, "INV-8", "stored StepRun has no ledger entry")
            continue
        want = replayed.get(s["id"])
        if want is not None and want != s:
            keys = sorted(k for k in s if s[k] != want.get(k))
            yield Finding(s["runId"], where, "replay", f"stored row differs from the replay of its ledger "
                          f"(v{want['version']}) in {', '.join(keys)}")


# What the model writes into a JSON column holding a record: the record normalized (keys in canonical
# order); a payload or a needs array is written as it is.
_JSON_RECORDS: dict[str, Callable[[Any], Record]] = {
    "stepRun": normalize_step_run, "plan": normalize_plan, "admissionReceipt": normalize_admission_receipt,
    "taskReceipt": normalize_task_receipt,
}


def _stored_json(part: Snapshot) -> Iterator[Finding]:
    """storage.md §1: a JSON column holds the canonical JSON text (records.md §5.1) of its value. A record
    that does not normalize is reported by the record and digest checks; its text is held to its own order."""
    for entry in part.get(STORED_JSON, []):
        where = f"{entry['table']}.{entry['column']} {'/'.join(map(str, entry['key']))}"
        text = entry["text"]
        if not isinstance(text, str):
            yield Finding(entry["runId"], where, "json_text", f"stored as {type(text).__name__}, not as TEXT")
            continue
        try:
            value = strict_json.loads(text)
        except ValueError as e:
            yield Finding(entry["runId"], where, "json_text", f"stored text is not strict JSON: {e}")
            continue
        normalize = _JSON_RECORDS.get(entry["holds"])
        if normalize is not None:
            with contextlib.suppress(QlwfError):
                value = normalize(value)
        stored, canonical = text.encode("utf-8"), canonical_json(value)
        if stored != canonical:
            yield Finding(entry["runId"], where, "json_text", "stored text is not the canonical JSON of its value: "
                          + _first_difference(stored, canonical))


def _extra_columns(part: Snapshot) -> Iterator[Finding]:
    """storage.md §9: a column the generic Run, attempt or lease table has beyond the v1 subset is always
    NULL for workflow data (the model cannot say what such a value means, so it must not be there)."""
    for entry in part.get(EXTRA_VALUES, []):
        where = "Run" if entry["kind"] == "runs" else f"{entry['kind'][:-1]} {entry['key']}"  # attempt ID, lease ID
        yield Finding(entry["runId"], where, "storage",
                      f"column {entry['column']} (not in storage.md §2) holds a value; §9 allows such a column "
                      "only if it is always NULL for workflow data")


def _first_difference(stored: bytes, canonical: bytes) -> str:
    at = next((i for i, (a, b) in enumerate(zip(stored, canonical, strict=False)) if a != b),
              min(len(stored), len(canonical)))
    start = max(0, at - 12)

    def clip(text: bytes) -> str:
        return ascii(text[start:at + 24].decode("utf-8", "backslashreplace"))

    return f"byte {at}: stored {clip(stored)}, canonical {clip(canonical)}"


# ------------------------------------------------------------------------------------------------
# 4. Record rules of the other rows, digests and identifier recipes
def _records(part: Snapshot) -> Iterator[Finding]:
    """records.md §6 per row, before the invariants relate rows: a lease that breaks its own shape is reported
    as that (INV-26), not as the disagreement with its attempt's mirror that follows from it."""
    run_id = part["runs"][0]["id"]
    for e in part["events"]:
        if problem := event_problem(e):
            yield Finding(run_id, f"event {e['sequence']}", "record", problem)
    for a in part["attempts"]:
        if problem := attempt_problem(a):
            yield Finding(run_id, f"attempt {a['id']}", "record", problem)
    for lease in part["leases"]:
        if problem := lease_problem(lease):
            yield Finding(run_id, f"lease {lease['attemptId']}", "INV-26", problem)



def _digests(part: Snapshot) -> Iterator[Finding]:
    run_id = part["runs"][0]["id"]
    for adm in part["admissions"]:
        pd = adm["planDigest"]
        if not _normalizes(normalize_plan, adm["plan"]) or adm["plan"]["planDigest"] != pd:
            yield Finding(run_id, f"admission {pd}", "digest", "the plan does not normalize to its planDigest")
        if not _normalizes(normalize_admission_receipt, adm["receipt"]):
            yield Finding(run_id, f"admission {pd}", "digest", "the admission receipt digest does not recompute")
    for r in part["taskReceipts"]:
        if not _normalizes(normalize_task_receipt, r):
            yield Finding(run_id, f"attempt {r['attemptId']}", "digest",
                          "the task attempt receipt digest does not recompute")
    for m in part["mutations"]:
        if m["stepRunDigest"] != m["stepRun"].get("stepRunDigest"):
            yield Finding(run_id, _ledger_where(m), "digest", "stepRunDigest differs from its post-image")


def _normalizes(fn: Callable[[Any], Record], value: object) -> bool:
    try:
        return fn(value) == value
    except QlwfError:
        return False


def _identifiers(part: Snapshot) -> Iterator[Finding]:
    run = part["runs"][0]

    def finding(where: str, reason: str) -> Finding:
        return Finding(run["id"], where, "identifier", reason)

    pd = part["admissions"][0]["planDigest"] if len(part["admissions"]) == 1 else None
    for r in part["taskReceipts"]:
        if pd is not None and (r["attemptId"], r["eventId"]) != ids.task_attempt_ids(pd, r["stepRunId"],
                                                                                     r["stepRunVersion"]):
            yield finding(f"attempt {r['attemptId']}", "attemptId/eventId differ from the task admission recipe")
    for m in part["mutations"]:
        s = m["stepRun"]
        if pd is not None and m["mutationId"].startswith("workflow-frontier:"):
            if (m["mutationId"], m["eventId"]) != ids.frontier_step_ids(pd, s["id"], s["version"] - 1, s["status"]):
                yield finding(_ledger_where(m), "mutationId/eventId differ from the frontier recipe")
        elif m["mutationId"].startswith("wxm:") and m["eventId"] != f"wxe:{m['mutationId'][4:]}":
            yield finding(_ledger_where(m), "worker-path eventId does not pair with its mutationId")
    for e in part["events"]:
        where = f"event {e['sequence']}"
        if e["type"] == "workflow.cancel_requested" and "cancelRequestedAtMs" in run and "cancelReason" in run:
            if e["id"] != ids.cancel_request_event_id(run["id"], run["cancelRequestedAtMs"], run["cancelReason"]):
                yield finding(where, "cancel request event id differs from its recipe")
        elif pd is not None and e["type"] in TERMINAL_EVENT_TYPES and e["id"].startswith("wft:"):
            if e["id"] != ids.frontier_terminal_event_id(pd, e["sequence"] - 1, e["type"].split(".", 1)[1]):
                yield finding(where, "frontier terminal event id differs from its recipe")
        elif e["id"].startswith("wxa:") and e["type"] in _EXECUTION_KINDS and "attemptId" in e:
            generation = e["payload"].get("lease_generation")
            if isinstance(generation, int) and e["id"] != ids.task_execution_event_id(
                    run["id"], e["attemptId"], generation, _EXECUTION_KINDS[e["type"]]):
                yield finding(where, "worker-path event id differs from its recipe")


# ------------------------------------------------------------------------------------------------
# 5. Invariants on the Run's own records
def _invariants(part: Snapshot) -> Iterator[Finding]:
    run_id = part["runs"][0]["id"]
    for v in check_invariants(State.from_snapshot(part, clock=_latest_time(part))):
        yield Finding(run_id, "state", v.invariant, f"{v.name}: {v.message}")


def _latest_time(part: Snapshot) -> int:
    """The audit's "now": no stored time lies after it (INV-4 requires events not after now)."""
    times = [v for kind in ("runs", "events", "attempts", "leases") for r in part[kind]
             for k, v in r.items() if k.endswith("AtMs") and isinstance(v, int)]
    return max(times, default=0)
