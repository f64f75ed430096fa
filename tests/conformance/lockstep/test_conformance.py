"""The step-by-step conformance harness and the SQLite backend against the model (commands.md §1.3).

The golden corpus and 500+ generated traces must pass on SQLite; deliberately broken SQLite
variants must be caught at their first divergence with a readable report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from qlwf.conformance import backends
from qlwf.conformance.generate.sequences import GeneratorConfig, generate, load_trace_files, traces
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import load_invariant_check, run_lockstep
from qlwf.conformance.lockstep.coverage import Coverage
from qlwf.conformance.lockstep.model_port import ModelPort
from qlwf.conformance.lockstep.state_diff import snapshot_diff
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import (
    Trace,
    TraceFormatError,
    dumps,
    from_json,
    load,
    record,
    save,
)
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.store import SqliteStore
from qlwf.model.errors import QlwfError
from support.broken_backend import BrokenBackend, LedgerSkippingStore

from qlwf.cli.conform import register

CORPUS = runner.corpus_traces()
CORPUS_BY_NAME = {t.name: t for t in CORPUS}
INVARIANTS = load_invariant_check()
# Generated batch for the default run: >= 20 steps per trace, 2..4 workflows each.
BATCH_CONFIG = GeneratorConfig(steps=(20, 28), workflows=(2, 4))
BATCH_SIZE = 510


# ------------------------------------------------------------------------------------------------
# Corpus
def test_corpus_covers_the_required_scenarios() -> None:
    names = set(CORPUS_BY_NAME)
    for required in ("adr0226-dependency-readied", "adr0226-failure-skips-chain",
                     "adr0226-succeeded-and-failed-terminals", "adr0226-bounded-candidate-paging",
                     "adr0226-drift-rolls-back", "adr0226-settled-replay", "adr0226-admission-replay-after-progress",
                     "adr0228-attempt-two-steps-parent-atomic", "adr0228-idle-siblings-cancelled-authority-blocks",
                     "adr0228-timeout-mapping", "adr0228-partial-completion-final",
                     "adr0228-dead-worker-trusted-recovery"):
        assert required in names
    for trace in CORPUS:
        assert trace.recorded and trace.description and "\n" not in trace.description


@pytest.mark.parametrize("name", sorted(CORPUS_BY_NAME))
def test_corpus_trace_passes_on_sqlite(name: str) -> None:
    with SqliteAdapter() as port:
        result = run_lockstep(CORPUS_BY_NAME[name], port, invariants=INVARIANTS)
    assert result.passed, result.divergence.render() if result.divergence else ""
    assert result.steps == len(CORPUS_BY_NAME[name].steps)


@pytest.mark.parametrize("name", sorted(CORPUS_BY_NAME))
def test_corpus_trace_passes_on_the_model_port(name: str) -> None:
    result = run_lockstep(CORPUS_BY_NAME[name], ModelPort())
    assert result.passed, result.divergence.render() if result.divergence else ""


def test_corpus_exercises_every_reachable_outcome_and_rule_row() -> None:
    summary = runner.run_traces("sqlite", CORPUS, invariants=False)
    assert summary.passed and summary.coverage is not None
    report = summary.coverage.report()
    assert report["commands"]["missing"] == []
    assert report["outcomes"]["missing"] == []
    assert report["rules"]["missing"] == []


def test_invariants_are_evaluated_when_available() -> None:
    assert INVARIANTS is not None, "qlwf.model.invariants.check_invariants should exist"


# ------------------------------------------------------------------------------------------------
# Drift: rolls back with nothing written
@pytest.mark.parametrize("name", ["adr0226-drift-rolls-back", "adr0228-page-isolates-drifted-workflow"])
def test_drift_rolls_back_with_nothing_written(name: str) -> None:
    trace = CORPUS_BY_NAME[name]
    drift_steps = [i for i, s in enumerate(trace.steps)
                   if s["op"] == "command" and s["outcome"].get("error", {}).get("reason", "").endswith("_drift")]
    assert len(drift_steps) >= (5 if name == "adr0226-drift-rolls-back" else 0)
    for i in drift_steps:
        assert trace.steps[i]["state"]["changes"] == []  # the model wrote nothing
        assert trace.steps[i]["outcome"]["error"]["class"] == "Unavailable"
        with SqliteAdapter() as port:
            clock = trace.initial_clock
            for step in trace.steps[:i]:
                clock = step["clock"]
                if step["op"] == "command":
                    with contextlib.suppress(QlwfError):
                        port.execute(step["name"], step["args"], now=clock)
                elif step["op"] == "corrupt":
                    port.corrupt(step["kind"], step["key"], step["patch"])
            before = port.snapshot()
            with pytest.raises(QlwfError) as err:
                port.execute(trace.steps[i]["name"], trace.steps[i]["args"], now=trace.steps[i]["clock"])
            assert err.value.to_json() == trace.steps[i]["outcome"]["error"]
            assert port.snapshot() == before
            assert not port.connection.in_transaction


def test_page_isolates_the_drifted_workflow() -> None:
    trace = CORPUS_BY_NAME["adr0228-page-isolates-drifted-workflow"]
    pages = [s for s in trace.steps if s["op"] == "command" and s["name"] == "converge_cancellation_page"
             and "ok" in s["outcome"]]
    outcomes = [o for p in pages for o in p["outcome"]["ok"]["outcomes"]]
    failed = [o for o in outcomes if o["status"] == "failed"]
    assert failed and all(o["runId"] == "run-1" and o["error"]["reason"] == "step_drift" for o in failed)
    assert {o["runId"] for o in outcomes if o["status"] == "terminal"} == {"run-0", "run-2"}


# ------------------------------------------------------------------------------------------------
# Generated traces
def test_generated_batch_passes_on_sqlite() -> None:
    """>= 500 generated traces (>= 20 steps, several workflows) in lockstep, split over the CPUs;
    invariants on every step of the first traces and on the final state of all of them."""
    every_step = runner.run_generated("sqlite", 20, 10_000, config=BATCH_CONFIG)
    rest = runner.run_generated("sqlite", BATCH_SIZE - 20, 10_020, config=BATCH_CONFIG, jobs=os.cpu_count() or 1,
                                invariants_every_step=False)
    for summary in (every_step, rest):
        failure = summary.failures[0].divergence if summary.failures else None
        assert failure is None, failure.render()
    results = every_step.results + rest.results
    assert len(results) == BATCH_SIZE >= 500
    assert all(r.steps >= 20 for r in results)
    assert sum(r.steps for r in results) >= 20 * 500


def test_generated_traces_use_several_workflows_and_reach_depth() -> None:
    summary = runner.run_traces("sqlite", runner.generated_traces(40, 500, BATCH_CONFIG), invariants=False)
    assert summary.passed
    assert summary.coverage is not None
    report = summary.coverage.report()
    assert report["commands"]["missing"] == []
    assert len(report["rules"]["covered"]) >= 50
    for deep in ("run:converge.cancelled", "run:frontier.succeeded", "step:frontier.skip", "step:complete.succeeded",
                 "attempt:recover.claimed", "attempt:converge.cancelled", "lease:release"):
        assert deep in report["rules"]["covered"]
    workflows = [len({s["args"]["plan"]["runId"] for s in t.steps if s["op"] == "command"
                      and s["name"] == "admit_workflow" and isinstance(s["args"].get("plan"), dict)})
                 for t in runner.generated_traces(40, 500, BATCH_CONFIG)]
    assert min(workflows) >= 2


def test_generation_is_reproducible() -> None:
    assert dumps(generate(42)) == dumps(generate(42))
    assert dumps(generate(42)) != dumps(generate(43))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(traces(GeneratorConfig(steps=(20, 30))))
def test_hypothesis_traces_pass_on_sqlite(trace: Trace) -> None:
    with SqliteAdapter() as port:
        result = run_lockstep(trace, port, invariants=INVARIANTS, invariants_every_step=False)
    assert result.passed, result.divergence.render() if result.divergence else ""


def test_trace_files_written_elsewhere_replay(tmp_path: Path) -> None:
    for seed in range(3):
        save(record(generate(seed)), tmp_path / f"stateful-{seed}.json")
    loaded = load_trace_files(tmp_path)
    assert [t.name for t in loaded] == ["stateful-0", "stateful-1", "stateful-2"]
    summary = runner.run_traces("sqlite", loaded)
    assert summary.passed


# ------------------------------------------------------------------------------------------------
# Deliberately broken SQLite variants are caught
class CounterForgettingStore(SqliteStore):
    """Broken: the Run compare-and-set of a lease claim does not advance eventSequence."""

    def cas_run(self, guard: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        if guard == "counters" and new["version"] == old["version"] + 1:
            new = new | {"eventSequence": old["eventSequence"]}
        super().cas_run(guard, old, new)


def test_skipped_write_is_caught_with_a_first_divergence_report() -> None:
    trace = CORPUS_BY_NAME["adr0226-dependency-readied"]
    with SqliteAdapter(store_factory=LedgerSkippingStore) as port:
        result = run_lockstep(trace, port, invariants=INVARIANTS)
    d = result.divergence
    assert d is not None and d.kind == "state"
    first_advance = next(i for i, s in enumerate(trace.steps) if s["op"] == "command"
                         and s["name"] == "advance_frontier" and s["outcome"].get("ok", {}).get("status") == "advanced")
    assert d.step_index == first_advance and result.steps == first_advance + 1
    assert {(r.kind, r.status) for r in d.record_diffs} == {("mutations", "only_in_model")}
    assert len(d.record_diffs) == 2  # b and c were readied
    text = d.render()
    for expected in ("DIVERGENCE in trace 'adr0226-dependency-readied' at step", "advance_frontier",
                     '"runId": "run-1"', "model outcome:", "backend outcome:", '"status": "advanced"',
                     "model rules:     step:frontier.ready, step:frontier.ready",
                     "snapshot diff (2 record(s))", "mutations workflow-frontier:", "only in model"):
        assert expected in text, text
    assert json.loads(json.dumps(d.to_json()))["recordDiffs"][0]["status"] == "only_in_model"


def test_wrong_counter_is_caught_field_by_field() -> None:
    trace = CORPUS_BY_NAME["adr0227-worker-protocol"]
    with SqliteAdapter(store_factory=CounterForgettingStore) as port:
        result = run_lockstep(trace, port)
    d = result.divergence
    assert d is not None
    assert trace.steps[d.step_index]["name"] == "admit_task_attempt"  # first +1 counter write
    text = d.render()
    assert "runs run-1:" in text and "eventSequence: model=" in text, text


def test_backend_crash_is_reported_not_raised() -> None:
    class Exploding(SqliteStore):
        def cas_lease(self, old: dict[str, Any], new: dict[str, Any]) -> None:
            raise RuntimeError("boom")

    trace = CORPUS_BY_NAME["adr0227-worker-protocol"]
    with SqliteAdapter(store_factory=Exploding) as port:
        result = run_lockstep(trace, port)
    assert result.divergence is not None and result.divergence.kind == "backend_crash"
    assert "RuntimeError: boom" in result.divergence.render()


def test_stale_expectation_is_reported() -> None:
    trace = load(CORPUS_DIR / "adr0226-settled-replay.json")
    trace.steps[3] = trace.steps[3] | {"state": trace.steps[3]["state"] | {"digest": "0" * 64}}
    result = run_lockstep(trace, ModelPort())
    assert result.divergence is not None and result.divergence.kind == "expectation"
    assert result.divergence.step_index == 3


# ------------------------------------------------------------------------------------------------
# Trace format and diffs
def test_trace_round_trip(tmp_path: Path) -> None:
    trace = CORPUS_BY_NAME["adr0228-timeout-mapping"]
    save(trace, tmp_path / "t.json")
    again = load(tmp_path / "t.json")
    assert again.to_json() == trace.to_json() and again.name == "t"
    assert record(trace.inputs()).to_json() == trace.to_json()
    head = json.loads((tmp_path / "t.json").read_text())
    assert (head["format"], head["version"]) == ("qlwf-trace", 2)


@pytest.mark.parametrize("doc", [
    {"format": "other", "version": 1, "initialClock": 0, "steps": []},
    {"format": "qlwf-trace", "version": 3, "initialClock": 0, "steps": []},
    {"format": "qlwf-trace", "version": 1, "initialClock": -1, "steps": []},
    {"format": "qlwf-trace", "version": 1, "initialClock": 0, "steps": [{"op": "sleep"}]},
    {"format": "qlwf-trace", "version": 1, "initialClock": 0, "steps": [{"op": "advance_time", "deltaMs": -5}]},
    {"format": "qlwf-trace", "version": 1, "initialClock": 0, "steps": [{"op": "command", "name": "x"}]},
])
def test_malformed_traces_are_rejected(doc: dict[str, Any]) -> None:
    with pytest.raises(TraceFormatError):
        from_json(doc)


def test_snapshot_diff_names_kind_key_and_field() -> None:
    trace = CORPUS_BY_NAME["adr0226-settled-replay"]
    port = ModelPort(trace.initial_clock)
    for step in trace.inputs().steps[:2]:
        with contextlib.suppress(QlwfError):
            port.execute(step["name"], step["args"], now=trace.initial_clock)
    snap = port.snapshot()
    other = json.loads(json.dumps(snap))
    other["runs"][0]["version"] += 1
    del other["events"][-1]
    diffs = snapshot_diff(snap, other)
    rendered = "\n".join(d.render() for d in diffs)
    assert "runs run-1:\n    version: model=" in rendered
    assert "events run-1/" in rendered and "only in model" in rendered


# ------------------------------------------------------------------------------------------------
# CLI
def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    parser = argparse.ArgumentParser(prog="qlwf")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out.strip().splitlines()


SUMMARY = re.compile(r"^conform sqlite: PASS — (\d+) traces, (\d+) steps, [\d.]+ s, \d+ steps/s$")


def test_cli_conform_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _cli(["conform", "--backend", "sqlite", "--traces", "4", "--seed", "3", "--corpus"], capsys)
    assert code == 0
    m = SUMMARY.match(lines[-1])
    assert m and int(m.group(1)) == 4 + len(CORPUS)


def test_cli_conform_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _cli(["conform", "--traces", "2", "--json", "--no-invariants"], capsys)
    assert code == 0
    report = json.loads(lines[-2])
    assert report["passed"] and report["traces"] == 2 and report["coverage"]["backend"] == "sqlite"
    assert lines[-1].startswith("conform sqlite: PASS")


def test_cli_conform_that_checks_nothing_is_no_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    """`--traces 0` alone ran no step: before issue 33 it said `PASS — 0 traces` and exited 0, a pass on
    no evidence (`qlwf audit` of a store without a workflow Run is exit 3 for the same reason)."""
    code, lines = _cli(["conform", "--backend", "sqlite", "--traces", "0"], capsys)
    assert code == 3 and lines[-1] == "conform sqlite: NO VERDICT — 0 traces, 0 steps: nothing was checked"
    code, lines = _cli(["conform", "--backend", "sqlite", "--traces", "0", "--json"], capsys)
    report = json.loads(lines[-2])
    assert code == 3 and not report["passed"] and report["verdict"] == "unknown" and report["traces"] == 0


def test_cli_concurrency_run_of_no_operation_is_no_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    """--ops 0: the workers ran nothing, only the setup's admissions were replayed (was PASS, exit 0)."""
    code, lines = _cli(["conform", "--backend", "sqlite", "--concurrency", "2", "--ops", "0"], capsys)
    assert code == 3 and lines[-1] == ("concurrency sqlite[correct] K=2: NO VERDICT — no worker operation ran "
                                       "(2×0 ops): nothing concurrent was checked")
    # a lockstep pass does not make up for it; a failure would outweigh it
    code, lines = _cli(["conform", "--backend", "sqlite", "--traces", "1", "--concurrency", "2", "--ops", "0",
                        "--json"], capsys)
    assert code == 3 and json.loads(lines[-2])["unchecked"] and lines[-1].endswith("nothing concurrent was checked")
    from qlwf.cli.conform import _worse

    assert [_worse(a, b) for a, b in ((0, 0), (0, 3), (3, 0), (1, 3), (3, 1))] == [0, 3, 3, 1, 1]


def test_cli_replay_of_a_trace_without_steps_is_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(Trace("no steps", 0, [], "empty"), tmp_path / "empty.json")
    code, lines = _cli(["replay", str(tmp_path / "empty.json"), "--backend", "sqlite"], capsys)
    assert code == 3 and lines[-1] == "replay empty.json (unrecorded) on sqlite: NO VERDICT — 1 traces, 0 steps: " \
                                      "nothing was checked"


def test_cli_conform_fails_on_a_broken_backend(capsys: pytest.CaptureFixture[str]) -> None:
    backends.register("broken-sqlite", BrokenBackend, "test only")
    try:
        parser = argparse.ArgumentParser(prog="qlwf")
        register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["conform", "--backend", "broken-sqlite", "--traces", "0", "--corpus"])
        code = args.func(args)
        lines = capsys.readouterr().out.strip().splitlines()
    finally:
        backends.unregister("broken-sqlite")
    assert code == 1
    assert any(line.startswith("DIVERGENCE in trace") for line in lines)
    assert re.match(r"^conform broken-sqlite: FAIL \(\d+ failing\) — \d+ traces", lines[-1])


def test_cli_replay_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS_DIR / "adr0228-partial-completion-final.json"
    for backend in ("sqlite", "model"):
        code, lines = _cli(["replay", str(path), "--backend", backend], capsys)
        assert code == 0 and lines[-1].startswith(f"replay {path.name} (with recorded expectations) on {backend}: PASS")
    tampered = load(path)
    index = next(i for i, s in enumerate(tampered.steps) if s["op"] == "command")
    tampered.steps[index]["outcome"] = {"error": {"class": "Conflict", "code": "X", "reason": "y"}}
    save(tampered, tmp_path / "tampered.json")
    code, lines = _cli(["replay", str(tmp_path / "tampered.json"), "--backend", "sqlite"], capsys)
    assert code == 1 and "FAIL" in lines[-1]
    assert any("expectation" in line for line in lines)


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(KeyError):
        backends.get("oracle-db")
    parser = argparse.ArgumentParser(prog="qlwf")
    register(parser.add_subparsers(dest="command", required=True))
    with pytest.raises(SystemExit):
        parser.parse_args(["conform", "--backend", "oracle-db"])


def test_coverage_render_lists_totals() -> None:
    cov = Coverage("sqlite")
    cov.observe("advance_frontier", {"ok": {"status": "advanced"}}, ("step:frontier.ready",))
    cov.observe("advance_frontier", {"error": {"class": "Conflict", "code": "C", "reason": "run_missing"}}, ())
    text = cov.render()
    assert "commands                  1 / 18" in text
    assert "advance_frontier:Conflict:run_missing" in cov.report()["outcomes"]["errors"]


def test_sqlite_errors_are_not_leaked_by_the_runner(tmp_path: Path) -> None:
    """A file-backed SQLite backend works through the registry machinery too."""
    db = tmp_path / "store.db"
    backends.register("sqlite-file", lambda: backends.SqliteBackend(str(db)), "test only")
    try:
        summary = runner.run_traces("sqlite-file", [CORPUS_BY_NAME["adr0226-settled-replay"]], invariants=False)
    finally:
        backends.unregister("sqlite-file")
    assert summary.passed
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute('SELECT count(*) FROM "Runs"').fetchone()[0] == 1
