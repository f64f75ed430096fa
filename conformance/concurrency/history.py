"""Judging a concurrent run: the stored state and the committed history must be a legal model run.

Every command on a Run takes that Run's row lock before it reads the clock, and the harness clock
is strictly increasing, so `now` orders the transactions of one Run exactly as the database
serialized them; transactions of different Runs touch disjoint records and commute. Replaying the
logged transactions through the model in `now` order must therefore reproduce every logged outcome
(results and domain errors alike) and, at the end, the stored snapshot record for record.
Transactions that failed with a storage-level reason (lock, retry, constraint, authority) wrote
nothing and have no model counterpart; they are counted, not replayed. A transaction whose
connection died after COMMIT was sent (`ambiguous`, a lost commit response during an outage) is
looked up in durable state: it committed a write exactly when the store holds an event created at
its observation time (observation times are unique; an admission's events carry the plan's time, so
an admission committed exactly when its Run exists and no acknowledged admission created it). A
committed one is replayed without an outcome to compare; one that wrote nothing is left out. A plain
lease renewal writes no event, so for its lost commit response the log is no evidence: the judge
replays both choices (`SILENT_COMMANDS`) and accepts the history if one of them is legal.

One exception to `now` order, from PostgreSQL itself (decisions Q-79): a SERIALIZABLE transaction
takes its snapshot at its first statement, which is the Run row lock, so one that waited for that
lock reads the Run's other records as they were before the holder committed, unless the holder
updated the locked row (then it fails and retries). A holder that leaves the Run row unchanged (a
plain renewal, which rewrites an attempt and a lease) can therefore commit before a reader that
then answers from the older state: admit_task_attempt answering `existing` with the attempt as it
was before the renewal. Such a reader wrote nothing, and the database serialized it before the
holder. So an outcome that differs at its `now` is also compared, for a transaction that wrote nothing,
on the states before the transactions of its Run that it can precede: those that committed after it
began (`TransactionLog.began` / `committed`) and left the Run row as it was, going back from its
`now` (other Runs' transactions commute with it and are passed over).

The verdict (`Replay`) counts what the judge granted beyond `now` order, so a passing run shows its
evidence: the reads it placed at an earlier point and the silent lost commits it assumed committed.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qlwf.conformance.lockstep.state_diff import snapshot_diff
from qlwf.impl.commands.failures import STORAGE_REASONS
from qlwf.impl.sql_adapter import TransactionLog
from qlwf.model.canonical import canonical_json
from qlwf.model.invariants import check_invariants
from qlwf.model.state import State
from qlwf.model.system import apply

Record = dict[str, Any]
Snapshot = dict[str, list[Record]]
MAX_PROBLEMS = 20


def is_storage_level(entry: TransactionLog) -> bool:
    error = entry.outcome.get("error")
    return error is not None and error["reason"] in STORAGE_REASONS


# Commands that can commit without writing an event (a plain lease renewal): for an ambiguous one the
# event log is no evidence either way, so the judge tries both (replay_history).
SILENT_COMMANDS = frozenset({"renew_lease"})
MAX_UNDECIDED = 8  # 2^8 replays at most; more undecided lost commits are reported as such


def replayable(log: Iterable[TransactionLog], snapshot: Snapshot | None = None,
               assume_committed: frozenset[int] = frozenset()) -> list[TransactionLog]:
    """The transactions with a model counterpart, in observation-time order (`snapshot` resolves
    the ambiguous ones; without it they are left out; `assume_committed` adds ambiguous entries by id)."""
    entries = [e for e in log if e.now is not None]
    committed = committed_ambiguous(entries, snapshot) if snapshot is not None else set()
    committed |= assume_committed
    return sorted((e for e in entries if (id(e) in committed if e.ambiguous else not is_storage_level(e))),
                  key=lambda e: e.now or 0)


def committed_ambiguous(entries: list[TransactionLog], snapshot: Snapshot) -> set[int]:
    """ids of the ambiguous entries whose writes are in `snapshot`."""
    written = {e["createdAtMs"] for e in snapshot["events"]}
    runs = {r["id"] for r in snapshot["runs"]}
    created = {e.args["plan"]["runId"] for e in entries if not e.ambiguous and e.name == "admit_workflow"
               and e.outcome.get("ok", {}).get("status") == "created"}
    found = set()
    for e in entries:
        if not e.ambiguous:
            continue
        if e.name == "admit_workflow":
            run_id = e.args["plan"]["runId"]
            if run_id in runs and run_id not in created:
                found.add(id(e))
                created.add(run_id)
        elif e.now in written:
            found.add(id(e))
    return found


def split_unseen_runs(entries: list[TransactionLog]) -> tuple[list[TransactionLog], list[TransactionLog]]:
    """(history, early): `early` are the transactions that found a Run missing although they read the
    clock after that Run's admission did. Admission takes no lock (storage.md §6.3), so such a
    transaction serialized before the admission committed; it wrote nothing and read only that Run's
    records, so its model counterpart runs on a state without the Run."""
    # an admission that did not read the clock has no known time, so no transaction can be shown to follow it
    created = {e.args["plan"]["runId"]: e.now for e in entries if e.now is not None
               and e.name == "admit_workflow" and e.outcome.get("ok", {}).get("status") == "created"}
    early = [e for e in entries if e.outcome.get("error", {}).get("reason") == "run_missing"
             and isinstance(e.args, dict) and (e.now or 0) > created.get(e.args.get("runId"), e.now or 0)]
    return [e for e in entries if e not in early], early


def event_problems(snapshot: Snapshot) -> list[str]:
    """No duplicate event ids or (runId, dedupeKey); each Run's sequences are 1..eventSequence."""
    problems = []
    ids = Counter(e["id"] for e in snapshot["events"])
    problems += [f"event id {i} stored {n} times" for i, n in ids.items() if n > 1]
    keys = Counter((e["runId"], e.get("dedupeKey")) for e in snapshot["events"] if e.get("dedupeKey") is not None)
    problems += [f"dedupe key {k} stored {n} times" for k, n in keys.items() if n > 1]
    sequences: dict[str, list[int]] = {}
    for e in snapshot["events"]:
        sequences.setdefault(e["runId"], []).append(e["sequence"])
    for run in snapshot["runs"]:
        got = sorted(sequences.get(run["id"], []))
        contiguous = len(got) == run["eventSequence"] and got == list(range(1, len(got) + 1))
        if not contiguous or run["version"] != run["eventSequence"]:
            problems.append(f"Run {run['id']}: sequences not contiguous 1..{run['eventSequence']} "
                            f"(version {run['version']}, {len(got)} events)")
    return problems


def undecided_ambiguous(log: list[TransactionLog], snapshot: Snapshot) -> list[TransactionLog]:
    """Ambiguous transactions that the stored events cannot decide: silent commands not evidenced."""
    entries = [e for e in log if e.now is not None]
    evidenced = committed_ambiguous(entries, snapshot)
    return [e for e in entries if e.ambiguous and e.name in SILENT_COMMANDS and id(e) not in evidenced]


@dataclass
class Replay:
    """The judge's verdict on a history: its problems, and what it granted beyond `now` order."""

    problems: list[str] = field(default_factory=list)
    replayed: int = 0  # transactions replayed through the model
    placed_earlier: int = 0  # read-only transactions judged at an earlier serialization point
    assumed_committed: int = 0  # silent lost commit responses the accepted choice counts as committed


def replay_history(log: list[TransactionLog], snapshot: Snapshot) -> Replay:
    """Replay through the model in `now` order and compare every outcome and the final state.

    A lost commit response of a silent command leaves no trace in the event log, so each such one
    may or may not have committed: the history is legal if some choice replays without a problem
    (the first such choice, fewest assumed commits first, is the one reported)."""
    undecided = undecided_ambiguous(log, snapshot)
    if len(undecided) > MAX_UNDECIDED:
        verdict = _replay(log, snapshot, frozenset())
        verdict.problems[:0] = [f"{len(undecided)} undecidable lost commit responses (more than {MAX_UNDECIDED}); "
                                "judged as not committed"]
        return verdict
    ids = [id(e) for e in undecided]
    choices = [frozenset(c) for size in range(len(ids) + 1) for c in itertools.combinations(ids, size)]
    first = _replay(log, snapshot, choices[0])  # the empty choice: nothing assumed
    if not first.problems:
        return first
    for choice in choices[1:]:
        verdict = _replay(log, snapshot, choice)
        if not verdict.problems:
            return verdict
    return first


def _replay(log: list[TransactionLog], snapshot: Snapshot, assume_committed: frozenset[int]) -> Replay:
    entries, early = split_unseen_runs(replayable(log, snapshot, assume_committed))
    verdict = Replay(replayed=len(entries) + len(early), assumed_committed=len(assume_committed))
    times = [e.now for e in entries]
    if len(set(times)) != len(times):
        verdict.problems.append("two transactions read the same observation time: the clock is not strictly "
                                "increasing")
    for entry in early:
        _compare(verdict, "early", entry, State(clock=0), [])
    state = State(clock=0)
    steps: list[tuple[TransactionLog, State, State]] = []  # (entry, state before, state after)
    for i, entry in enumerate(entries):
        after = _compare(verdict, f"#{i}", entry, state, steps)
        steps.append((entry, state, after))
        state = after
    model = state.snapshot()
    if canonical_json(model) != canonical_json(snapshot):
        diffs = snapshot_diff(model, snapshot)
        verdict.problems.append(f"the replayed history does not reproduce the stored state ({len(diffs)} record(s) "
                                "differ)")
        verdict.problems += ["  " + d.render().replace("\n", " | ")[:300] for d in diffs[:8]]
    return verdict


def _compare(verdict: Replay, label: str, entry: TransactionLog, state: State,
             steps: list[tuple[TransactionLog, State, State]]) -> State:
    """Apply the logged command to `state`; a differing outcome is a problem unless the transaction
    wrote nothing and gives its logged outcome at a point it can be serialized at (`earlier_points`).
    Returns the next state."""
    out = apply(state, {"name": entry.name, "args": entry.args}, entry.now)
    if entry.ambiguous:  # committed, but its answer was lost: only its effect can be judged
        return out.state
    if _gives(out, entry.outcome):
        return out.state
    wrote_nothing = out.state.snapshot() == state.snapshot()  # records only: the clock always moves
    if wrote_nothing and any(_gives(apply(before, {"name": entry.name, "args": entry.args}, entry.now), entry.outcome)
                             for before in earlier_points(entry, state, steps)):
        verdict.placed_earlier += 1
        return out.state
    if len(verdict.problems) < MAX_PROBLEMS:
        verdict.problems.append(f"{label} {entry.name}({canonical_json(entry.args).decode()[:160]}) at {entry.now}: "
                                f"stored {_short(entry.outcome)} but the model gives {_short(_outcome(out))}")
    return out.state


def _outcome(out: Any) -> Record:
    return {"ok": out.result} if out.error is None else {"error": out.error.to_json()}


def _gives(out: Any, outcome: Record) -> bool:
    return bool(canonical_json(_outcome(out)) == canonical_json(outcome))


def _run_of(entry: TransactionLog, state: State) -> str | None:
    args = entry.args if isinstance(entry.args, dict) else {}
    plan = args.get("plan")
    run_id = plan.get("runId") if isinstance(plan, dict) else args.get("runId")  # an admission creates its Run
    if isinstance(run_id, str):
        return run_id
    attempt_id = args.get("attemptId")
    attempt = state.attempts.get(attempt_id) if isinstance(attempt_id, str) else None
    return attempt["runId"] if attempt is not None else None


def earlier_points(entry: TransactionLog, state: State,
                   steps: list[tuple[TransactionLog, State, State]]) -> Iterable[State]:
    """The states, newest first, before each transaction of `entry`'s Run that `entry` (which wrote
    nothing) may be serialized before: each committed after `entry` began and left the Run row
    unchanged, as did every one of that Run in between (module docstring)."""
    run_id = _run_of(entry, state)
    if run_id is None or entry.began is None:
        return
    for other, before, after in reversed(steps):
        if _run_of(other, before) != run_id:
            continue  # another Run's records: it commutes with `entry`
        if (other.committed is None or other.committed < entry.began
                or after.runs.get(run_id) != before.runs.get(run_id)):
            return
        yield before


def invariant_problems(snapshot: Snapshot, clock: int) -> list[str]:
    return [str(v) for v in check_invariants(State.from_snapshot(snapshot, clock))][:MAX_PROBLEMS]


def _short(outcome: Record) -> str:
    text = canonical_json(outcome).decode()
    return text if len(text) <= 240 else text[:237] + "..."
