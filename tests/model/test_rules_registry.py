"""The one rule vocabulary (model/rules.py): ids of table rows, fired by row, unknown ids fail loudly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.lockstep import runner
from qlwf.conformance.traces.format import model_step
from qlwf.model import cancellation, cmd_cancel, cmd_frontier, frontier, rules
from qlwf.model import tables as T
from qlwf.model.errors import QlwfError
from qlwf.model.oracle import consult
from qlwf.model.state import State
from qlwf.model.system import CommandContext
from qlwf.model.tables import UnknownRule


def test_ids_are_unique_per_row_and_name_their_table() -> None:
    reg = rules.registry()
    moves: list[T.RunTransition | T.StepPerformer | T.AttemptTransition | T.LeaseTransition] = [
        *T.RUN_TRANSITIONS, *T.STEP_PERFORMERS, *T.ATTEMPT_TRANSITIONS, *T.LEASE_TRANSITIONS]
    assert len({r.id for r in moves}) == len(moves)
    assert len({r.id for r in T.COMPLETION_RULES}) == len(T.COMPLETION_RULES)
    assert len({d.id for d in T.COMMAND_DECISIONS}) == len(T.COMMAND_DECISIONS)
    prefixes = {"RUN_TRANSITIONS": "run:", "STEP_PERFORMERS": "step:", "ATTEMPT_TRANSITIONS": "attempt:",
                "LEASE_TRANSITIONS": "lease:", "COMPLETION_RULES": "completion:",
                "CANCEL_ATTEMPT_TABLE": "cancel.attempt:", "CANCEL_STEP_TABLE": "cancel.step:",
                "COMMAND_DECISIONS": "decision:"}
    assert set(reg.values()) == set(prefixes)
    assert all(rid.startswith(prefixes[table]) for rid, table in reg.items())


def test_every_move_row_is_found_by_its_move() -> None:
    for table, lookup in ((T.RUN_TRANSITIONS, T.run_row), (T.STEP_PERFORMERS, T.step_row),
                          (T.ATTEMPT_TRANSITIONS, T.attempt_row), (T.LEASE_TRANSITIONS, T.lease_row)):
        for row in table:
            assert lookup(row.command, row.source, row.target) is row


@pytest.mark.parametrize("call", [
    lambda: T.step_row("advance_frontier", "pending", "running"),
    lambda: T.attempt_row("claim_lease", "running", "claimed"),
    lambda: T.lease_row("renew_lease", "released", "leased"),
    lambda: T.run_row("advance_frontier", "running", "running"),
    lambda: T.decision("no.such.decision"),
    lambda: T.cancel_step_id("no_such_status", True),
    lambda: T.cancel_attempt_id("claimed", "no_such_lease"),
    lambda: rules.require("step:no.such.row"),
    lambda: rules.is_unreachable("cancel.step:terminal"),  # the old, coarse name is no row any more
])
def test_an_unknown_rule_is_a_typed_error(call: object) -> None:
    with pytest.raises(UnknownRule):
        call()  # type: ignore[operator]


def test_firing_an_unknown_id_fails_at_fire_time() -> None:
    ctx = CommandContext("advance_frontier", 0, [])
    ctx.fire(T.step_row("advance_frontier", "pending", "ready").id)
    with pytest.raises(UnknownRule, match=r"frontier\.readied"):
        ctx.fire("step:frontier.readied")
    assert ctx.rules == ["step:frontier.ready"]


def test_unreachable_rows_are_exact_ids_of_rows_with_a_clause() -> None:
    reg = rules.registry()
    assert set(rules.UNREACHABLE) <= set(reg)
    assert all(len(clause) > 20 and ("§" in clause or "INV-" in clause) for clause in rules.UNREACHABLE.values())
    assert set(rules.reachable()) == set(reg) - set(rules.UNREACHABLE)
    # substring matching is gone: a reachable row whose id contains "waiting" or "lost" stays reachable
    assert not rules.is_unreachable("attempt:recover.running") and not rules.is_unreachable("step:recover.running_lost")


def test_convergence_performer_rows_are_read_off_the_cancellation_table() -> None:
    mutated = {(s, d.target) for (s, _), d in T.CANCEL_STEP_TABLE.items() if d.action == "mutate"}
    converge = {(p.source, p.target) for p in T.STEP_PERFORMERS if p.command == "converge_cancellation"}
    assert converge == mutated == {("pending", "cancelled"), ("ready", "cancelled"), ("ready", "timed_out"),
                                   ("waiting_approval", "cancelled"), ("waiting_approval", "timed_out"),
                                   ("lost", "cancelled")}


def test_step_transitions_are_the_spec_graph_and_every_performer_move() -> None:
    # Today the §3.1 graph already holds every performer move, so deriving adds nothing.
    assert T.STEP_TRANSITIONS == T._STEP_GRAPH
    assert all(p.target in T.STEP_TRANSITIONS[p.source] for p in T.STEP_PERFORMERS if p.source is not None)


def test_field_effects_cover_every_transition_target() -> None:
    targets = {t for ts in T.STEP_TRANSITIONS.values() for t in ts}
    assert targets <= set(T.STEP_FIELD_EFFECTS)
    effects = {e.effect for row in T.STEP_FIELD_EFFECTS.values() for e in row}
    assert effects <= {"at", "null", "kept_or_at", "increment", "supplied", "supplied_or_null", "supplied_if_given"}
    assert set(T.STEP_TIMESTAMP_SHAPE) == set(T.STEP_STATUSES)


def test_active_attempt_statuses_are_ordered_and_complete() -> None:
    from qlwf.impl.commands.store import ACTIVE, ACTIVE_SQL

    assert set(T.ACTIVE_ATTEMPT_STATUSES) == T.ACTIVE_ATTEMPT and ACTIVE == T.ACTIVE_ATTEMPT_STATUSES
    assert ACTIVE_SQL == "('claimed', 'starting', 'running')"


def test_recovery_and_step_path_prefixes_come_from_ids() -> None:
    from qlwf.model import ids
    from qlwf.proofs.crosscheck import STEP_PATH_PREFIXES

    assert {pre for pre, path in STEP_PATH_PREFIXES if path == "recover"} == {
        ids.RECOVERY_PREFIXES[k] for k in ("requeue_mutation", "lost_mutation", "failed_mutation")}
    assert len({pre for pre, _ in STEP_PATH_PREFIXES}) == len(STEP_PATH_PREFIXES)


# ------------------------------------------------------------------------------------------------
# Explanations start with the row that decided their subject
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example_inputs() -> list[tuple[str, Any]]:
    fns = {"admit-attempt": "admit-attempt", "admit-workflow": "admit-workflow", "cancel": "cancel",
           "frontier": "frontier", "recover": "recover"}
    out = [(next(fn for prefix, fn in fns.items() if p.name.startswith(prefix)), json.loads(p.read_text()))
           for p in sorted(EXAMPLES.glob("*.json"))]
    batch = [json.loads(line) for line in (EXAMPLES / "batch.jsonl").read_text().splitlines()]
    return out + [(r["fn"], r["input"]) for r in batch if _resolves(r["fn"], r["input"])]  # not its refusals


def _resolves(fn: str, inp: Any) -> bool:
    try:
        consult(fn, inp)
    except QlwfError:
        return False
    return True


@pytest.mark.parametrize(("fn", "inp"), _example_inputs())
def test_every_oracle_explanation_starts_with_rows_of_the_tables(fn: str, inp: Any) -> None:
    reg = rules.registry()
    for subject, text in consult(fn, inp).explanation.items():
        head = text.split(": ", 1)[0]
        assert head == rules.NO_ROW or all(r in reg for r in rules.explained_rows(text)), (subject, text)
        assert rules.explained(rules.explained_rows(text), text.split(": ", 1)[1]) == text


def test_explained_names_rows_or_none() -> None:
    assert rules.explained("step:frontier.ready", "why") == "step:frontier.ready: why"
    assert rules.explained(("step:recover.running_lost", "step:recover.lost_failed"), "why") == \
        "step:recover.running_lost, step:recover.lost_failed: why"
    assert rules.explained((), "why") == "no row: why"
    assert rules.explained_rows("no row: why") == ()
    with pytest.raises(UnknownRule):
        rules.explained("frontier.ready", "why")  # a row id has its table's prefix


def test_the_commands_fire_the_rows_their_resolutions_explain(monkeypatch: pytest.MonkeyPatch) -> None:
    """advance_frontier and converge_cancellation fire exactly the rows their pure resolution names in
    its explanation (the StepRuns it moves, and for convergence every attempt and StepRun it decides)."""
    seen: list[dict[str, str]] = []

    def capture(resolve: Any) -> Any:
        def run(snapshot: Any, *, explain: dict[str, str] | None = None) -> Any:
            explain = {} if explain is None else explain
            seen.append(explain)
            return resolve(snapshot, explain=explain)
        return run

    monkeypatch.setattr(cmd_frontier, "resolve_frontier", capture(frontier.resolve_frontier))
    monkeypatch.setattr(cmd_cancel, "resolve_cancellation", capture(cancellation.resolve_cancellation))
    checked = {"advance_frontier": 0, "converge_cancellation": 0}
    for trace in runner.corpus_traces():
        state = State(clock=trace.initial_clock)
        for step in trace.steps:
            seen.clear()
            done = model_step(state, step)
            state = done.state
            if step["op"] != "command" or step["name"] not in checked or done.outcome is None \
                    or "error" in done.outcome or done.outcome["ok"]["status"] == "settled":
                continue
            (explain,) = seen
            named = [r for text in explain.values() for r in rules.explained_rows(text)]
            assert set(named) <= set(done.rules), (trace.name, step, explain, done.rules)
            if step["name"] == "converge_cancellation":
                assert len(named) == len(explain)  # every subject is decided by a row
            else:
                moved = [r for r in done.rules if r.startswith("step:frontier.")]
                assert sorted(moved) == sorted(named)
            checked[step["name"]] += 1
    assert all(checked.values()), checked
