"""Partial drivers (issue 35 items 2–4): a declared surface, the ql3 profiles, the restricted SQLite
driver (`--profile edge`) with its planted faults, not-applicable traces, comparison levels, reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.exec import port as exec_port
from qlwf.conformance.exec import profiles, protocol_schema
from qlwf.conformance.exec.connection import DriverConnection
from qlwf.conformance.exec.port import ExecBackend
from qlwf.conformance.generate import plans
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.generate.surface import FULL, Surface, generate_within
from qlwf.conformance.lockstep import runner
from qlwf.conformance.report.paths import first_difference_path
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import FOREIGN_BINDING, Trace, advance, command, model_step
from qlwf.impl.driver_protocol import Server
from qlwf.impl.ql3_surfaces import EDGE_COMMANDS, EDGE_SURFACE, PAGE_COUNTERS
from qlwf.impl.sqlite.driver import MemoryStores
from qlwf.model import arguments
from qlwf.model import tables as T
from qlwf.model.evidence import evidence_binding
from qlwf.model.state import State
from qlwf.model.system import apply

from qlwf.cli import entry as cli

EDGE_DRIVER = [*exec_port.reference_driver("sqlite"), "--profile", "edge"]


@pytest.fixture
def edge_backend() -> Iterator[Any]:
    """Backend `exec` as the restricted driver, planted with the faults the test passes to it."""

    def configure(*plants: str) -> Any:
        argv = EDGE_DRIVER + [a for p in plants for a in ("--plant", p)]
        stack.append(exec_port.driver_configured("exec", " ".join(argv), None))
        return stack[-1].__enter__()

    stack: list[Any] = []
    yield configure
    for context in reversed(stack):
        context.__exit__(None, None, None)


# ---- the profiles are facts in qlwf's own names ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(profiles.PROFILES))
def test_a_profile_names_only_qlwf_commands_arguments_and_result_keys(name: str) -> None:
    surface = profiles.profile(name)
    assert surface.commands <= set(T.COMMAND_FAMILY) and surface.profile == name
    paged = set(T.QUERY_PAGES) | {"converge_cancellation_page"}
    for command_name, keys in surface.omitted_arguments.items():
        taken = {"after"} if command_name in paged else set(arguments.argument_keys(command_name))
        assert keys <= taken, (command_name, keys)
    for command_name, values in surface.argument_values.items():
        shapes = dict(arguments.ARGUMENTS[command_name])
        for key, allowed in values.items():
            shape = shapes[key]
            assert allowed and shape is not None and all(shape.problem(v) is None for v in allowed)
    page = apply(State(clock=5), {"name": "converge_cancellation_page", "args": {"limit": 1}}, 5).result
    assert page is not None and set(surface.result_keys["converge_cancellation_page"]) < set(page)
    assert surface.error_detail == "code" and surface.admission_evidence and len(surface.executor_types) == 1
    with pytest.raises(KeyError, match="known: edge, cluster"):
        profiles.profile("standalone")


def test_the_edge_and_cluster_profiles_differ_where_the_adapters_do() -> None:
    edge, cluster = profiles.EDGE, profiles.CLUSTER
    assert cluster.commands - edge.commands == {"claim_lease", "renew_lease", "release_lease"}
    assert edge.executor_types == {"local_process"} and cluster.executor_types == {"remote_worker"}
    assert not ({"cancellation_candidates", "converge_cancellation"} & (edge.commands | cluster.commands))


def test_the_restricted_driver_declares_exactly_the_edge_profile() -> None:
    """What the driver process says in hello, read by the harness, is the edge profile."""
    backend = ExecBackend(EDGE_DRIVER)
    try:
        port = backend.open()
        assert isinstance(port, exec_port.ExecPort) and port.surface == profiles.EDGE
        port.close()
    finally:
        backend.shutdown()
    assert profiles.EDGE.to_hello() == json.loads(json.dumps(EDGE_SURFACE, sort_keys=True))
    assert Surface.from_hello(EDGE_COMMANDS, profiles.EDGE.to_hello()) == profiles.EDGE
    factory = ExecBackend(EDGE_DRIVER)
    try:
        port = factory.open()
        assert port.surface == profiles.EDGE  # type: ignore[attr-defined]
        port.close()
    finally:
        factory.shutdown()


def test_an_old_hello_declares_the_full_surface() -> None:
    assert Surface.from_hello(T.COMMAND_FAMILY, None) == FULL and FULL.full
    assert not Surface.from_hello(["admit_workflow"], None).full
    assert generate_within(3, FULL).steps == generate(3).steps  # the whole port: the ordinary generator


class _Breach(Exception):
    """The driver process was failed for a protocol breach (raised by the test's stand-in)."""


class _Process:
    def fail(self, kind: str, message: str) -> None:
        raise _Breach(f"{kind}: {message}")


@pytest.mark.parametrize("surface", [
    [], {"errorDetail": "message"}, {"executorTypes": ["quantum"]}, {"resultKeys": {"not_a_command": []}},
    {"omittedArguments": {"converge_cancellation_page": "after"}}, {"admissionEvidence": 1}, {"extra": True}])
def test_a_malformed_surface_is_a_protocol_breach(surface: Any) -> None:
    connection = DriverConnection.__new__(DriverConnection)
    connection.process = _Process()  # type: ignore[assignment]
    with pytest.raises(_Breach, match=r"protocol: hello\.capabilities\.surface must be"):
        connection._surface(surface)
    assert connection._surface(EDGE_SURFACE) == EDGE_SURFACE and connection._surface(None) is None


# ---- applicability and comparison levels ---------------------------------------------------------------
def _trace(*steps: dict[str, Any]) -> Trace:
    return Trace("t", 1_000_000, list(steps), "t")


def test_a_trace_is_not_applicable_by_its_first_missing_piece() -> None:
    edge = profiles.EDGE
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, 1_000_000)
    admit = command("admit_workflow", {"plan": plan})
    binding, evidence = plans.admission(plan, "a", "local_process")
    task = {"runId": "run-1", "stepRunId": "run-1:a", "binding": binding}
    assert edge.missing_piece(_trace(admit, command("admit_task_attempt", task, evidence))) is None
    assert edge.missing_piece(_trace(admit, command("admit_task_attempt", task, None))) == "evidence"
    remote, remote_evidence = plans.admission(plan, "a", "remote_worker")
    assert edge.missing_piece(_trace(command("admit_task_attempt", {**task, "binding": remote}, remote_evidence),
                                     command("claim_lease", {}))) == "executor remote_worker"
    assert edge.missing_piece(_trace(advance(5), command("claim_lease", {}))) == "command claim_lease"
    assert edge.missing_piece(_trace(command("converge_cancellation_page",
                                             {"limit": 1, "after": {}}))) == "argument after"
    cancel = {"runId": "run-1", "reason": "timeout", "actor": {"type": "system"}}
    assert edge.missing_piece(_trace(command("request_cancel", cancel))) == "value reason=timeout"
    assert edge.missing_piece(_trace(command("request_cancel", {**cancel, "reason": "user"}))) is None
    assert edge.missing_piece(_trace(command("request_cancel", {**cancel, "reason": "whim"}))) is None  # malformed
    assert profiles.CLUSTER.missing_piece(_trace(command("recover_attempt", {"attemptId": "wta:x",
                                                                             "evidence": "unknown"}))) is None
    assert edge.missing_piece(_trace(command("recover_attempt", {"attemptId": "wta:x",
                                                                 "evidence": "unknown"}))) == "value evidence=unknown"
    # a malformed executor type is a wrong argument the store refuses, not a gap of the surface
    malformed = command("admit_task_attempt", {**task, "binding": {**binding, "executorType": "quantum"}}, evidence)
    assert edge.missing_piece(_trace(malformed)) is None
    assert FULL.missing_piece(_trace(command("claim_lease", {}))) is None


def test_outcomes_are_compared_at_the_declared_detail() -> None:
    error = {"error": {"class": "Conflict", "code": "C", "reason": "r"}}
    coarse = {"error": {"class": "Conflict", "code": "C", "reason": ""}}
    for detail, equal in (("class", True), ("code", True), ("reason", False)):
        surface = Surface(error_detail=detail)
        assert (surface.view("claim_lease", error) == surface.view("claim_lease", coarse)) is equal
    other_code = {"error": {"class": "Conflict", "code": "D", "reason": ""}}
    assert Surface(error_detail="class").view("x", other_code) == Surface(error_detail="class").view("x", error)
    assert Surface(error_detail="code").view("x", other_code) != Surface(error_detail="code").view("x", error)
    page: dict[str, Any] = {"ok": {"scanned": 1, "settledRuns": 0, "settledAttempts": 0, "blocked": 1, "hasMore": False,
                   "next": None, "outcomes": []}}
    counters = {"ok": {k: v for k, v in page["ok"].items() if k in PAGE_COUNTERS}}
    assert profiles.EDGE.view("converge_cancellation_page", page) == counters
    # a declared key the backend leaves out still differs
    short = {"ok": {k: v for k, v in counters["ok"].items() if k != "hasMore"}}
    assert profiles.EDGE.view("converge_cancellation_page", short) != counters
    assert "errors by class+code" in profiles.EDGE.describe() and "edge" in profiles.EDGE.describe()


def test_the_differing_path_is_found_and_never_clipped() -> None:
    long = "x" * 5000
    model = {"ok": {"outcomes": [{"runId": "a", "status": "settled"}, {"runId": "b", "note": long}]}}
    backend = {"ok": {"outcomes": [{"runId": "a", "status": "settled"}, {"runId": "b", "note": long + "y"}]}}
    assert first_difference_path(model, backend) == ("ok.outcomes[1].note", long, long + "y")
    assert first_difference_path({"ok": {"a": 1}}, {"ok": {"a": 1, "b": 2}}) == ("ok.b", None, 2)
    assert first_difference_path(model, model) is None


# ---- generation inside a surface ----------------------------------------------------------------------
def test_generated_traces_stay_inside_the_edge_surface_and_reach_its_hard_states() -> None:
    heads_drifted = full_pages = cancels = admitted = 0
    for seed in range(48):
        trace = generate_within(seed, profiles.EDGE)
        assert profiles.EDGE.missing_piece(trace) is None, (seed, profiles.EDGE.missing_piece(trace))
        run = trace.model_run
        assert run is not None
        for i, (step, done) in enumerate(zip(trace.steps, run.done, strict=True)):
            before = run.initial if i == 0 else run.done[i - 1].state
            if step["op"] == "corrupt":
                cands = apply(before, {"name": "cancellation_candidates", "args": {"limit": 1}}, before.clock)
                assert cands.result is not None
                heads = [c["runId"] for c in cands.result["candidates"]]
                heads_drifted += bool(heads) and step["key"][0].startswith(heads[0] + ":")
            elif step["op"] == "command" and done.outcome is not None and "ok" in done.outcome:
                name = step["name"]
                cancels += name == "request_cancel"
                admitted += name == "admit_task_attempt"
                full_pages += name == "converge_cancellation_page" and done.outcome["ok"]["scanned"] == step[
                    "args"]["limit"]
    assert heads_drifted >= 3 and full_pages >= 10 and cancels >= 20 and admitted >= 10


def _probes(trace: Trace) -> list[int]:
    return [i for i, step in enumerate(trace.steps) if "probe" in step]


@pytest.mark.parametrize("name", sorted(profiles.PROFILES))
def test_generated_traces_probe_that_a_deriving_store_derives_the_binding(name: str) -> None:
    """Under a surface with admissionEvidence, some admissions that would succeed are preceded by the same
    step with a foreign binding beside its real evidence, marked as a probe; the model side expects the
    §3A refusal (Invalid, ql3's admission-invalid code), nothing written; the admission itself follows."""
    surface = profiles.profile(name)
    probes = traces_with = 0
    foreign_kinds: set[str] = set()
    for seed in range(48):
        trace = generate_within(seed, surface)
        run = trace.model_run
        assert run is not None and surface.missing_piece(trace) is None
        traces_with += bool(_probes(trace))
        for i in _probes(trace):
            probes += 1
            step, after = trace.steps[i], trace.steps[i + 1]
            assert step["probe"] == FOREIGN_BINDING and step["evidence"] is not None
            before = run.done[i - 1].state if i else run.initial
            derived = evidence_binding(before.admission_of_run(step["args"]["runId"])[0]["plan"],
                                       step["evidence"]["taskReconciliation"], step["evidence"]["execution"],
                                       before.step_runs[step["args"]["stepRunId"]]["stepKey"])
            assert step["args"]["binding"] != derived
            assert step["args"]["binding"]["executorType"] in surface.executor_types
            foreign_kinds.add("invented" if step["args"]["binding"]["taskReconciliationReceiptDigest"] == "8" * 64
                              else "one digest" if step["args"]["binding"]["taskRevision"] == derived["taskRevision"]
                              else "other evidence")
            done = run.done[i]
            assert done.outcome == {"error": {"class": "Invalid", "reason": "input_invalid",
                                              "code": "PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION_INVALID"}}
            assert done.state is before and done.rules == ()
            # the lockstep's model side computes the same from the step alone (not from the generator's run)
            assert model_step(before, step).outcome == done.outcome
            # then the admission itself, with the derived binding and the same evidence, is admitted
            assert (after["args"] | {"binding": step["args"]["binding"]}, after["evidence"]) == (step["args"],
                                                                                               step["evidence"])
            assert after["args"]["binding"] == derived and "probe" not in after
            admitted = run.done[i + 1].outcome
            assert admitted is not None and "ok" in admitted
    assert probes >= 30 and traces_with >= 20 and foreign_kinds == {"invented", "one digest", "other evidence"}


def test_the_whole_port_gets_no_probe_and_counts_a_probe_as_not_applicable() -> None:
    """The built-in backends take the binding as given: their generated traces carry no probe, and a trace
    with one is not applicable to them (never a failure), as to any surface without admissionEvidence."""
    assert not any(_probes(generate(seed)) for seed in range(48))
    trace = next(t for t in (generate_within(seed, profiles.EDGE) for seed in range(8)) if _probes(t))
    assert FULL.missing_piece(trace) == "probe foreign-binding"
    assert Surface(commands=profiles.EDGE.commands, executor_types=profiles.EDGE.executor_types,
                   omitted_arguments=profiles.EDGE.omitted_arguments,
                   argument_values=profiles.EDGE.argument_values).missing_piece(trace) == "probe foreign-binding"
    summary = runner.run_traces("sqlite", [trace])
    assert summary.not_applicable == [(trace.name, "probe foreign-binding")] and not summary.results
    plain = Trace(trace.name, trace.initial_clock, [s for s in trace.steps if "probe" not in s], trace.name)
    assert runner.run_traces("sqlite", [plain]).verdict == "passed"


def test_under_the_edge_profile_most_plain_generated_traces_are_not_applicable() -> None:
    """What the profile filter is for: the ordinary generator's traces mostly need more than Edge has."""
    missing = [profiles.EDGE.missing_piece(generate(seed)) for seed in range(32)]
    assert sum(m is None for m in missing) < 8
    assert {"command claim_lease", "executor remote_worker"} & set(missing)


# ---- the restricted driver ------------------------------------------------------------------------------
def test_the_restricted_driver_passes_its_applicable_traces(edge_backend: Any) -> None:
    edge_backend()
    corpus = runner.run_traces("exec", runner.corpus_traces())
    assert corpus.verdict in ("passed", "unknown") and not corpus.failures
    assert corpus.not_applicable and all(piece for _, piece in corpus.not_applicable)
    generated = runner.run_generated("exec", 48, 7, surface=profiles.EDGE)
    assert generated.verdict == "passed" and len(generated.results) == 48 and not generated.not_applicable
    assert generated.surface == profiles.EDGE
    # the foreign-binding probes among them were run and refused as the model expected
    assert sum(len(_probes(t)) for t in runner.generated_traces(48, 7, surface=profiles.EDGE)) >= 30
    assert "compared: surface edge; errors by class+code" in generated.line()


def test_the_head_of_line_plant_is_found_by_generated_traces_under_the_edge_profile(edge_backend: Any) -> None:
    edge_backend("head-of-line")
    summary = runner.run_generated("exec", 48, 7, surface=profiles.EDGE)
    assert summary.failures
    causes = summary.causes()
    assert set(causes) == {"converge_cancellation_page × ok vs Unavailable/CLUSTER_RUN_CANCELLATION_CONVERGENCE"
                           "_UNAVAILABLE"}, causes
    divergence = summary.failures[0].divergence
    assert divergence is not None and "compared:        surface edge" in divergence.render()


def test_the_placeholder_plant_is_found_by_generated_traces_under_the_edge_profile(edge_backend: Any) -> None:
    """`--plant accept-placeholder` takes any binding: every generated trace with a foreign-binding probe
    fails at its first probe (ok where the model expects the §3A refusal), and only there."""
    edge_backend("accept-placeholder")
    traces = list(runner.generated_traces(48, 7, surface=profiles.EDGE))
    probed = {t.name: _probes(t)[0] for t in traces if _probes(t)}
    summary = runner.run_traces("exec", traces)
    assert summary.verdict == "failed" and len(summary.results) == 48
    assert {r.trace: r.divergence.step_index for r in summary.failures if r.divergence} == probed
    assert summary.causes() == {"admit_task_attempt × Invalid/PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION_INVALID"
                                " vs ok": len(probed)}, summary.causes()
    divergence = summary.failures[0].divergence
    assert divergence is not None and divergence.kind == "outcome"
    assert "[probe foreign-binding]" in divergence.render() and "foreign-binding probe" in divergence.message
    # without the probes the same traces cannot tell the plant from a store that derives the binding
    stripped = [Trace(t.name, t.initial_clock, [s for s in t.steps if "probe" not in s], t.name) for t in traces]
    assert runner.run_traces("exec", stripped).verdict == "passed"


def _admit(server: Server, plan: dict[str, Any], binding: dict[str, Any], evidence: Any) -> dict[str, Any]:
    assert server.handle({"id": 1, "type": "reset"}) == {"id": 1, "type": "reset"}
    at = plan["plannedAtMs"]
    assert "ok" in server.handle({"id": 2, "type": "apply", "command": "admit_workflow", "args": {"plan": plan},
                                  "atMs": at})["outcome"]
    request = {"id": 3, "type": "apply", "command": "admit_task_attempt", "atMs": at + 1,
               "args": {"runId": plan["runId"], "stepRunId": plan["steps"][0]["stepRunId"], "binding": binding}}
    response = server.handle(request if evidence is None else {**request, "evidence": evidence})
    assert protocol_schema.problems("response", "apply", response) == []
    outcome: dict[str, Any] = response["outcome"]
    return outcome


@pytest.mark.parametrize("plants", [(), ("accept-placeholder",)])
def test_the_restricted_driver_derives_the_binding_and_the_placeholder_plant_does_not(plants: tuple[str, ...]) -> None:
    server = Server(MemoryStores(True, frozenset(plants)), "edge", "0", ("corrupt",), EDGE_COMMANDS, EDGE_SURFACE)
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, 1_000_000)
    derived, evidence = plans.admission(plan, "a", "local_process")
    assert derived == evidence_binding(plan, evidence["taskReconciliation"], evidence["execution"], "a")
    ok = _admit(server, plan, derived, evidence)
    assert set(ok["ok"]) == {"status", "receipt"}
    placeholder = plans.binding("a", "local_process")
    refused = {"error": {"class": "Invalid", "code": "PLUGIN_PACKAGE_WORKFLOW_TASK_ATTEMPT_ADMISSION_INVALID"}}
    for evidence_sent in (evidence, None):
        outcome = _admit(server, plan, placeholder, evidence_sent)
        if plants:
            assert "ok" in outcome  # the plant takes the invented digests as given
        else:
            assert {"error": {k: v for k, v in outcome["error"].items() if k != "message"}} == refused
    server.shutdown()


def test_the_restricted_driver_refuses_what_it_does_not_declare() -> None:
    server = Server(MemoryStores(True), "edge", "0", ("corrupt",), EDGE_COMMANDS, EDGE_SURFACE)
    server.handle({"id": 1, "type": "reset"})
    hello = server.handle({"id": 2, "type": "hello", "protocol": "qlwf-backend@1",
                           "harness": {"name": "t", "version": "0"}})
    assert protocol_schema.problems("response", "hello", hello) == []
    assert hello["capabilities"]["surface"]["profile"] == "edge"
    for name, args in (("claim_lease", {"attemptId": "wta:x", "workerId": "w1", "durationMs": 5000}),
                       ("request_cancel", {"runId": "run-1", "reason": "policy", "actor": {"type": "system"}}),
                       ("converge_cancellation_page", {"limit": 1, "after": {"cancelRequestedAtMs": 1,
                                                                             "runId": "r"}})):
        response = server.handle({"id": 3, "type": "apply", "command": name, "args": args, "atMs": 5})
        assert "failure" in response, response
    page = server.handle({"id": 4, "type": "apply", "command": "converge_cancellation_page", "args": {"limit": 1},
                          "atMs": 5})
    assert list(page["outcome"]["ok"]) == list(PAGE_COUNTERS)
    server.shutdown()


# ---- the CLI: no verdict without applicable traces, --out, the per-cause tally ----------------------------
def test_a_run_with_no_applicable_trace_is_no_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["conform", "--backend", "exec", "--driver", " ".join(EDGE_DRIVER), "--corpus", "--traces", "0"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "NO VERDICT" in out and "0 applicable" in out and "not applicable (" in out


def test_conform_writes_counterexamples_to_out_and_tallies_causes(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    driver = " ".join([*EDGE_DRIVER, "--plant", "head-of-line"])
    code = cli.main(["conform", "--backend", "exec", "--driver", driver, "--traces", "24", "--seed", "7",
                     "--out", str(tmp_path / "ce")])
    out = capsys.readouterr().out
    assert code == 1, out
    saved = sorted((tmp_path / "ce").glob("*.json"))
    assert saved and f"trace:           {saved[0]}" in out
    assert "failures by cause (command × first differing field or error kind):" in out
    assert "converge_cancellation_page × ok vs Unavailable" in out and "differs at:" in out
    code = cli.main(["conform", "--backend", "exec", "--driver", driver, "--traces", "24", "--seed", "7", "--json",
                     "--out", str(tmp_path / "ce")])
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    assert report["applicable"] == 24 and report["notApplicable"] == {} and report["causes"]
    assert report["surface"]["profile"] == "edge" and report["surface"]["errorDetail"] == "code"
    assert all(f["compared"].startswith("surface edge") for f in report["failures"])


def test_replay_of_a_trace_outside_the_surface_is_not_applicable(capsys: pytest.CaptureFixture[str]) -> None:
    path = next(p for p in sorted(CORPUS_DIR.glob("*.json")) if "worker-protocol" in p.name)
    code = cli.main(["replay", str(path), "--backend", "exec", "--driver", " ".join(EDGE_DRIVER)])
    assert code == 3
    assert "NOT APPLICABLE — needs " in capsys.readouterr().out
