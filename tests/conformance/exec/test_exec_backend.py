"""The exec backend: conformance of an implementation behind the qlwf-backend@1 process protocol.

Reference drivers must give the in-process verdicts; a driver with an injected store bug is caught
at its first divergent step; a driver that dies, hangs, answers garbage or breaks the protocol is
reported as such (last request, stderr tail) within the timeout, never as a pass, and is reaped.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.exec import port as exec_port
from qlwf.conformance.exec import protocol_schema
from qlwf.conformance.exec.connection import record_key
from qlwf.conformance.exec.port import ExecBackend, ExecFaultPort, ExecPort
from qlwf.conformance.exec.process import DriverFailure
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import load_invariant_check, run_lockstep
from qlwf.conformance.traces.format import Trace, record
from qlwf.impl.port import COMMAND_NAMES

from qlwf.cli import entry as cli

REPO = Path(__file__).resolve().parents[3]
BROKEN = [sys.executable, str(REPO / "tests" / "support" / "broken_driver.py")]
SQLITE_DRIVER = exec_port.reference_driver("sqlite")


def _children() -> set[int]:
    """Live child processes of this test process (every thread)."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            found |= {int(p) for p in (task / "children").read_text().split()}
        except OSError:
            continue
    return found


@pytest.fixture
def reaped() -> Any:
    """Fails the test if it leaves a child process behind."""
    before = _children()
    yield
    assert _children() - before == set(), "a driver process was not reaped"


def _corpus(name: str) -> Trace:
    return next(t for t in runner.corpus_traces() if t.name == name)


def _summary_key(summary: runner.RunSummary) -> list[tuple[str, bool, int, str | None, int | None]]:
    return [(r.trace, r.passed, r.steps, r.divergence.kind if r.divergence else None,
             r.divergence.step_index if r.divergence else None) for r in summary.results]


# ---- reference drivers give the in-process verdicts -----------------------------------------------
def test_sqlite_driver_matches_in_process_on_corpus_and_generated_traces(reaped: None) -> None:
    traces = runner.corpus_traces() + list(runner.generated_traces(12, 20261129))
    direct = runner.run_traces("sqlite", traces)
    driven = runner.run_traces("exec-sqlite", traces)
    assert direct.passed and len(direct.results) == len(traces)
    assert _summary_key(driven) == _summary_key(direct)
    assert driven.invariant_checks == direct.invariant_checks
    assert runner.covered_rule_rows([driven]) == runner.covered_rule_rows([direct])


def test_a_divergence_is_reported_alike_in_process_and_through_the_driver(reaped: None) -> None:
    """A trace the model disagrees with (a tampered recorded expectation) fails the same way on both."""
    trace = _corpus("adr0226-dependency-readied")
    steps = [dict(s) for s in trace.steps]
    steps[2] = {**steps[2], "state": {**steps[2]["state"], "digest": "0" * 64}}
    tampered = Trace(trace.description, trace.initial_clock, steps, "tampered")
    direct = runner.run_traces("sqlite", [tampered])
    driven = runner.run_traces("exec-sqlite", [tampered])
    assert _summary_key(direct) == _summary_key(driven) == [("tampered", False, 3, "expectation", 2)]


def test_without_the_fault_hook_a_drift_trace_diverges_as_in_process(reaped: None) -> None:
    factory = ExecBackend(SQLITE_DRIVER)
    try:
        port = factory.open()
        assert isinstance(port, ExecFaultPort)
        plain = exec_port.ExecPort(port.connection)
        result = run_lockstep(_corpus("adr0226-drift-rolls-back"), plain)
    finally:
        factory.shutdown()
    assert result.divergence is not None and result.divergence.kind == "fault_injection"


@pytest.mark.postgres
def test_postgres_driver_matches_in_process(pg_server: Any, monkeypatch: pytest.MonkeyPatch, reaped: None) -> None:
    monkeypatch.setenv("QLWF_PG_DSN", pg_server.dsn())  # the driver makes its own database on the session's server
    traces = [_corpus("adr0226-drift-rolls-back"), _corpus("adr0228-timeout-mapping"),
              *runner.generated_traces(3, 7)]
    direct = runner.run_traces("sqlite", traces)
    driven = runner.run_traces("exec-postgres", traces)
    assert direct.passed and _summary_key(driven) == _summary_key(direct)


# ---- a driver with a store bug is caught at its first divergent step -------------------------------
def _first_step(trace: Trace, hit: Any) -> int:
    recorded = trace if trace.recorded else record(trace)
    return next(i for i, s in enumerate(recorded.steps) if any(hit(s, c) for c in s["state"]["changes"]))


def _succeeded_attempt(step: dict[str, Any], change: dict[str, Any]) -> bool:
    return (step.get("name") == "complete_attempt" and change["kind"] == "attempts"
            and (change["record"] or {}).get("status") == "succeeded")


@pytest.mark.parametrize(("bug", "trace_name", "kind", "hit"), [
    ("wrong-terminal-status", "adr0227-worker-protocol", "attempts", _succeeded_attempt),
    ("skip-sequence", "adr0228-timeout-mapping", "events", lambda s, c: c["kind"] == "events"),
])
def test_a_store_bug_is_caught_at_its_first_divergent_step(bug: str, trace_name: str, kind: str, hit: Any,
                                                          reaped: None) -> None:
    trace = _corpus(trace_name)
    expected = _first_step(trace, hit)
    exec_port.register_driver("broken", [*BROKEN, bug])
    try:
        summary = runner.run_traces("broken", [trace])
    finally:
        from qlwf.conformance import backends

        backends.unregister("broken")
    d = summary.results[0].divergence
    assert d is not None and (d.step_index, d.kind) == (expected, "state")
    assert d.record_diffs and {r.kind for r in d.record_diffs} == {kind}
    assert d.rules, "the report names the model rules that fired"


def test_snapshot_changes_that_hide_a_store_bug_fail_the_run(reaped: None) -> None:
    """The changes lie (the stored status is wrong, the reported one right): lockstep alone would pass;
    the full snapshot at the end of the trace disagrees with them, so the run fails."""
    seen: list[Any] = []
    full = _corpus("adr0227-worker-protocol")
    # ends at the damaging command: a later step without a command would read a full snapshot
    # (and catch the lie at once, as a state divergence)
    trace = Trace(full.description, full.initial_clock, full.steps[:_first_step(full, _succeeded_attempt) + 1], "cut")
    exec_port.register_driver("broken", [*BROKEN, "hide-wrong-status"])
    try:
        with pytest.raises(DriverFailure, match="add up to a different state"):
            runner.run_traces("broken", [trace], on_result=seen.append)
    finally:
        from qlwf.conformance import backends

        backends.unregister("broken")
    assert [r.passed for r in seen] == [True]  # what the lie alone would have earned


def test_cli_reports_the_store_bug_like_a_built_in_backend(capsys: pytest.CaptureFixture[str], reaped: None) -> None:
    path = REPO / "conformance" / "traces" / "corpus" / "adr0227-worker-protocol.json"
    expected = _first_step(_corpus("adr0227-worker-protocol"), _succeeded_attempt)
    code = cli.main(["replay", str(path), "--backend", "exec", "--driver",
                     shlex.join([*BROKEN, "wrong-terminal-status"])])
    out = capsys.readouterr().out
    assert code == 1
    assert f"at step {expected}: state" in out and "complete_attempt(" in out
    assert "model outcome:" in out and "backend outcome:" in out and "model rules:" in out
    assert "snapshot diff (1 record(s)):" in out and "attempts wta:" in out
    assert "PASS" not in out


# ---- a driver that breaks the protocol ---------------------------------------------------------------
TIMEOUT = 2.0


@pytest.mark.parametrize(("bug", "problem", "detail"), [
    ("die-at:3", "exited", "exit status 3"),
    ("hang-at:3", "timeout", f"no response within {TIMEOUT:g} s"),
    ("garbage-at:3", "not_json", "this is not JSON"),
    ("deep-at:3", "not_json", "nests deeper than the JSON decoder's limit"),  # a RecursionError before
    ("dup-key-at:3", "not_json", "duplicate key 'id'"),  # json.loads kept the last "id", silently
    ("surrogate-at:3", "not_json", "lone surrogate \\ud800"),  # `conform --json` crashed writing it
    ("wrong-id-at:3", "protocol", "does not echo the request id"),
    ("missing-keys-at:3", "protocol", "missing keys ['outcome']"),
    ("bad-change-at:3", "protocol", "removes runs ['no-such-run'], which is not in the state"),
])
def test_a_driver_breaking_the_protocol_mid_trace_is_reported(bug: str, problem: str, detail: str,
                                                              capsys: pytest.CaptureFixture[str], reaped: None) -> None:
    started = time.monotonic()
    code = cli.main(["conform", "--backend", "exec", "--driver", shlex.join([*BROKEN, bug]), "--corpus",
                     "--traces", "3", "--driver-timeout", str(TIMEOUT)])
    elapsed = time.monotonic() - started
    out = capsys.readouterr().out
    assert code == 1 and "PASS" not in out
    assert elapsed < TIMEOUT + 8, "reported within the timeout (plus driver start-up)"
    assert "at step 2: driver" in out, out  # the third apply is step 2 of the first corpus trace
    assert f"driver {problem}:" in out and detail in out
    first = runner.corpus_traces()[0].steps[2]
    assert f'"type":"apply","command":"{first["name"]}"' in out, "the last request is in the report"
    assert f"broken driver: {bug.split(':')[0]} at apply 3" in out, "the stderr tail is in the report"
    assert "run aborted, the driver is broken" in out


def test_a_slow_start_is_not_a_timeout(capsys: pytest.CaptureFixture[str], reaped: None) -> None:
    """hello answers after the driver's start-up: it gets the start-up allowance, later requests the timeout."""
    late = int(TIMEOUT) + 2
    code = cli.main(["conform", "--backend", "exec", "--driver", shlex.join([*BROKEN, f"slow-start:{late}"]),
                     "--traces", "1", "--driver-timeout", str(TIMEOUT)])
    out = capsys.readouterr().out
    assert code == 0 and "PASS" in out, out


def test_a_driver_command_is_split_as_a_shell_would(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    reaped: None) -> None:
    """A driver under a directory with a space and a non-ASCII letter, given one argument with spaces:
    quoted as in a POSIX shell, each word reaches the driver whole (decisions Q-99)."""
    home = tmp_path / "a checkout ü"
    home.mkdir()
    driver = home / "driver.py"
    driver.write_bytes((REPO / "tests" / "support" / "broken_driver.py").read_bytes())
    command = shlex.join([sys.executable, str(driver), "slow-start:0", "one argument, three spaces"])
    code = cli.main(["conform", "--backend", "exec", "--driver", command, "--traces", "1",
                     "--driver-timeout", str(TIMEOUT)])
    out = capsys.readouterr().out
    assert code == 0 and "PASS" in out, out


# surrogate-at: the lone surrogate reached the JSON report, whose writer raised UnicodeEncodeError
# (exit 1, a traceback and no report) after the run had found the divergence.
@pytest.mark.parametrize("bug", ["garbage-at:1", "surrogate-at:1"])
def test_a_broken_driver_in_a_json_report(bug: str, capsys: pytest.CaptureFixture[str], reaped: None) -> None:
    code = cli.main(["conform", "--backend", "exec", "--driver", shlex.join([*BROKEN, bug]), "--traces",
                     "2", "--json"])
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    assert code == 1 and report["passed"] is False and report["driverFailure"]["problem"] == "not_json"
    assert f"{bug.split(':')[0]} at apply 1" in report["driverFailure"]["stderrTail"]


def test_a_drivers_terminal_escapes_are_shown_not_obeyed(capsys: pytest.CaptureFixture[str], reaped: None) -> None:
    """Decisions Q-124: the stderr tail and the offending line were printed as they came, so a driver's ESC
    sequences could erase the report's FAIL and draw a PASS in the reviewer's terminal."""
    code = cli.main(["conform", "--backend", "exec", "--driver", shlex.join([*BROKEN, "forge-at:1"]), "--traces", "1"])
    out = capsys.readouterr().out
    assert code == 1 and "driver not_json" in out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "\\x1b[1A\\x1b[2K\\rconform exec: PASS\\x07" in out  # the stderr tail, shown as escapes
    assert "\\x1b[2Jnot JSON" in out  # the line it wrote


def test_a_response_before_any_request_is_a_protocol_breach(capsys: pytest.CaptureFixture[str],
                                                           reaped: None) -> None:
    code = cli.main(["conform", "--backend", "exec", "--driver", shlex.join([*BROKEN, "early"]), "--traces", "1",
                     "--driver-timeout", str(TIMEOUT)])
    out = capsys.readouterr().out
    assert code == 1 and "PASS" not in out
    assert "driver protocol:" in out and '"type":"hello"' in out and "answering before any request" in out


def test_a_driver_killed_mid_trace_is_reported(reaped: None) -> None:
    class KillAt(ExecFaultPort):
        """Kills the driver (SIGKILL, from outside) just before the 4th command is sent (ahead)."""

        calls = 0

        def _send_ahead(self, key: tuple[Any, ...], fields: dict[str, Any]) -> None:
            KillAt.calls += 1
            if KillAt.calls == 3:  # steps 1, 2 and now 3 go ahead (step 0 is sent as it runs)
                os.kill(self.connection.process.driver_pid, signal.SIGKILL)
                self.connection.process._exited_within(2.0)
            super()._send_ahead(key, fields)

    factory = ExecBackend(SQLITE_DRIVER, timeout_s=TIMEOUT)
    try:
        port = factory.open()
        assert isinstance(port, ExecPort)
        started = time.monotonic()
        result = run_lockstep(_corpus("adr0227-worker-protocol"), KillAt(port.connection),
                              invariants=load_invariant_check())
        assert time.monotonic() - started < TIMEOUT + 5
        with pytest.raises(DriverFailure):  # the run stops: no silent restart of a broken driver
            factory.open()
    finally:
        factory.shutdown()
    d = result.divergence
    assert d is not None and (d.step_index, d.kind) == (3, "driver")
    assert "driver exited" in d.message and "killed by SIGKILL" in d.message
    assert '"type":"apply","command":"claim_lease"' in d.message and "driver stderr (tail): (empty)" in d.message


def test_a_driver_that_cannot_start_is_reported(capsys: pytest.CaptureFixture[str], reaped: None) -> None:
    script = "import sys; sys.stderr.write('no such store'); sys.exit(4)"
    driver = shlex.join([sys.executable, "-c", script])
    code = cli.main(["conform", "--backend", "exec", "--driver", driver, "--traces", "1"])
    out = capsys.readouterr().out
    assert code == 1 and "driver exited" in out and "exit status 4" in out and "no such store" in out


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            # the driver has the marker as an argument of its own; qlwf (and its pool workers) inside --driver's
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize(("bug", "jobs"), [("linger", "1"), ("linger", "2"), ("hang-at:5", "1"), ("escape", "1"),
                                         ("escape", "2"), ("escape-env", "1"), ("escape-env", "2")])
def test_sigterm_of_conform_leaves_no_driver_behind(tmp_path: Path, bug: str, jobs: str) -> None:
    """`linger` never exits by itself: only the harness can end it, also when the CLI terminates its
    pool workers (they die at once; their drivers' keepers get SIGTERM as their parent dies, and end
    the drivers). `hang-at` has the signal arrive while the harness waits for a response. `escape-env`
    with two jobs was out of reach before the keeper (Q-134): what a terminated worker's driver had
    orphaned with a cleared environment went to init."""
    marker = f"qlwf-exec-test-{os.getpid()}-{bug}-{jobs}"  # an extra argument, to find the driver by
    with subprocess.Popen([sys.executable, "-m", "qlwf.cli", "conform", "--backend", "exec", "--driver",
                           shlex.join([*BROKEN, bug, marker]), "--traces", "400", "--jobs", jobs,
                           "--driver-timeout", "60"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path) as proc:
        try:
            deadline = time.monotonic() + 30
            while len(_processes_with(marker)) < int(jobs) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _processes_with(marker), "the driver did not start"
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 128 + signal.SIGTERM
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    deadline = time.monotonic() + (5 if jobs != "1" else 0)  # qlwf reaps its own driver before it exits
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == []


def _kill_all(marker: str) -> None:
    for pid in _processes_with(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("mode", "extra"), [
    *((mode, extra) for mode in ("escape", "escape-env")
      for extra in ([], ["--jobs", "2"], ["hang-at:5", "--driver-timeout", "1"])),
    ("escape-env", ["die-at:2"]), ("escape-env-late", []), ("escape-env-late", ["--jobs", "2"])])
def test_what_a_driver_leaves_outside_its_process_group_is_killed(
        mode: str, extra: list[str], capsys: pytest.CaptureFixture[str], reaped: None) -> None:
    """`escape` starts a process in a session of its own whose parent exits at once (as pg_ctl starts a
    server): signalling the driver's group never reaches it. Found when the driver ends: after a passing
    run, from `--jobs` workers, after a breach (a driver that stops answering: the harness kills it) and
    after the driver died by itself. `escape` carries the driver's token (Q-126); `escape-env` clears its
    environment, and is found in the keeper's tree (Q-134). Before the keeper, an `escape-env` process
    was missed when its driver died by itself (`die-at`) or started it on close (`escape-env-late`)."""
    marker = f"qlwf-escape-test-{os.getpid()}-{mode}-{'-'.join(extra)}"
    bug = [a for a in extra if a.startswith(("hang-at", "die-at"))]
    driver = [*BROKEN, mode, marker, *bug]
    options = [a for a in extra if a not in bug]
    try:
        code = cli.main(["conform", "--backend", "exec", "--driver", shlex.join(driver), "--traces", "3", *options])
        out, err = capsys.readouterr()
        assert code == (1 if bug else 0), out + err
        assert _processes_with(marker) == [], err
        if "--jobs" not in extra:  # a forked worker's stderr does not reach capsys
            assert "process(es) running outside its process group, killed:" in err, err
    finally:
        _kill_all(marker)


@pytest.mark.parametrize("at", [1, 9, 20, 30, 45, 60, 80])
def test_an_interrupt_between_an_answer_and_its_record_is_not_blamed_on_the_driver(
        at: int, monkeypatch: pytest.MonkeyPatch, reaped: None) -> None:
    """A signal can land after the driver answered and before the port has recorded the changes it
    reported (decisions Q-87). The port's record is then short of the driver's state; checked at close,
    it looked like a driver breach, and the factory's failure replaced the interrupt (exit 1 for a
    SIGTERM, seen in CI). The interrupt must come out as itself, with the driver reaped."""
    calls = 0

    def interrupted_at(kind: str, record: Any) -> tuple[Any, ...]:
        nonlocal calls
        calls += 1
        if calls == at:
            raise KeyboardInterrupt
        return record_key(kind, record)

    monkeypatch.setattr(exec_port, "record_key", interrupted_at)
    with exec_port.driver_configured("exec", shlex.join(SQLITE_DRIVER), None), pytest.raises(KeyboardInterrupt):
        runner.run_traces("exec", [_corpus("adr0227-worker-protocol")])
    assert calls == at


def _start_with_sigint_deliverable(argv: list[str]) -> subprocess.Popen[bytes]:
    """The driver, started so that SIGINT reaches it whatever this process inherited. A child inherits
    an ignored SIGINT (a non-interactive shell starts its background jobs so, and CI may run the suite
    as one), and a Python program started with SIGINT ignored rightly keeps ignoring it; a handled
    signal is reset to its default at exec. So this process handles SIGINT while the child starts."""
    inherited = signal.getsignal(signal.SIGINT)
    if inherited is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        if inherited is signal.SIG_IGN:
            signal.signal(signal.SIGINT, inherited)


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_reference_driver_stopped_by_a_signal_says_so_in_one_line(sig: signal.Signals, status: int) -> None:
    """The harness ends a driver with SIGTERM and then quotes its stderr tail: a traceback there read
    as a crash of the driver. Now one line says what stopped it, and the exit status is the signal's."""
    with _start_with_sigint_deliverable(SQLITE_DRIVER) as proc:  # closes the pipes on the way out
        try:
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            proc.stdin.write(b'{"id":1,"type":"hello","protocol":"qlwf-backend@1"}\n')
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["type"] == "hello"  # serving: the handler is in place
            proc.send_signal(sig)
            assert proc.wait(30) == status
            assert proc.stderr.read().decode() == f"qlwf-sqlite driver: stopped by {sig.name}\n"
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_exec_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["conform", "--backend", "exec", "--traces", "1"]) == 2
    assert cli.main(["conform", "--backend", "sqlite", "--driver", "x", "--traces", "1"]) == 2
    assert "--driver" in capsys.readouterr().err


# ---- the schemas -----------------------------------------------------------------------------------
def test_every_message_of_a_run_validates_against_its_schema(reaped: None) -> None:
    lines: list[tuple[str, str]] = []
    factory = ExecBackend(SQLITE_DRIVER, transcript=lines)
    try:
        for trace in (_corpus("adr0226-drift-rolls-back"), _corpus("adr0228-timeout-mapping")):
            port = factory.open()
            assert run_lockstep(trace, port).passed
            port.snapshot()  # a snapshot request of its own (the lockstep's come with apply)
    finally:
        factory.shutdown()
    kinds: dict[int, str] = {}
    seen = set()
    for direction, line in lines:
        message = json.loads(line)
        if direction == ">":
            kinds[message["id"]] = message["type"]
        kind = kinds[message["id"]]
        seen.add((direction, kind, "error" in message.get("outcome", {})))
        assert protocol_schema.problems("request" if direction == ">" else "response", kind, message) == []
    assert {k for _, k, _ in seen} == {"hello", "reset", "apply", "snapshot", "corrupt", "close"}
    assert ("<", "apply", True) in seen and ("<", "apply", False) in seen


def test_the_schemas_reject_what_the_protocol_forbids() -> None:
    ok = {"id": 3, "type": "apply", "outcome": {"ok": {}}}
    assert protocol_schema.problems("response", "apply", ok) == []
    assert protocol_schema.problems("response", "apply", {"id": 3, "type": "apply"})
    assert protocol_schema.problems("response", "apply", {**ok, "outcome": {"error": {"class": "Oops", "code": "c",
                                                                                          "reason": "r"}}})
    assert protocol_schema.problems("response", "apply", {**ok, "snapshot": {"runs": []}})
    assert protocol_schema.problems("request", "apply", {"id": 0, "type": "apply", "command": "advance_frontier",
                                                         "args": {}, "atMs": 1})
    assert protocol_schema.problems("response", "reset", {"id": 2, "type": "reset", "failure": {"message": "x"}}) == []
    hello = json.loads((REPO / "conformance" / "exec" / "schema" / "hello.response.json").read_text())
    commands = hello["oneOf"][0]["properties"]["capabilities"]["properties"]["commands"]["items"]["enum"]
    assert sorted(commands) == sorted(COMMAND_NAMES)


def test_protocol_doc_example_is_a_real_current_transcript(reaped: None) -> None:
    sys.path.insert(0, str(REPO / "docs"))
    try:  # by name: docs/ is on no type checker's path
        protocol_example = importlib.import_module("protocol_example")
    finally:
        sys.path.pop(0)
    lines = protocol_example.transcript()  # validates every message against its schema
    assert [json.loads(line)["type"] for d, line in lines if d == ">"] == [
        "hello", "reset", "apply", "apply", "apply", "snapshot", "close"]
    text = protocol_example.DOC.read_text(encoding="utf-8")
    assert protocol_example.updated(text, protocol_example.render(lines)) == text, \
        "stale: run python docs/protocol_example.py"
