"""The example workflow .github/workflows/qlwf.yml is valid and calls only commands and flags that exist.

Every `./qlwfw COMMAND ARGS` in a `run:` script is parsed by qlwf's own argument parser (a missing
command, an unknown flag or a missing argument fails here); the wrapper's own commands are taken from
its usage text. `diff` is built on another branch (issue 14 §1): until it is registered it is the one
command allowed to be missing, and from then on it is checked like the others.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from qlwf.cli.entry import build_parser

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "qlwf.yml"


def workflow() -> dict[Any, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def steps(job: str) -> list[dict[str, Any]]:
    return list(workflow()["jobs"][job]["steps"])


def wrapper_commands() -> set[str]:
    out = subprocess.run([str(REPO / "qlwfw"), "--help"], capture_output=True, text=True, timeout=300, check=True)
    usage = out.stdout.split("\n\n", 2)[1]  # the wrapper's own command list, before qlwf's
    return {line.split()[0] for line in usage.splitlines() if line.startswith("  ") and line.split()}


# Shell expansions in run scripts, each replaced by a value of the kind the shell gives it.
SHELL_SAMPLES = {'"$(date -u +%Y%m%d)"': "20261202"}


def qlwfw_calls() -> list[tuple[str, list[str]]]:
    """(job, argv after ./qlwfw) for every call in every run script; expressions become placeholders,
    shell expansions their sample values (SHELL_SAMPLES)."""
    calls = []
    for name, job in workflow()["jobs"].items():
        for step in job["steps"]:
            script = re.sub(r"\$\{\{[^}]*\}\}", "PLACEHOLDER", step.get("run", ""))
            for expansion, sample in SHELL_SAMPLES.items():
                script = script.replace(expansion, sample)
            for line in script.splitlines():
                if "./qlwfw" not in line:
                    continue
                # shell words, operators (|, &&, ;, >) apart unless quoted: a shape name holds '>'
                lexer = shlex.shlex(line.split("./qlwfw", 1)[1], posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                words = list(lexer)
                operator = next((i for i, w in enumerate(words) if w and set(w) <= set("|&;<>()")), len(words))
                calls.append((name, words[:operator]))
    return calls


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_workflow_is_valid_yaml_with_the_expected_shape() -> None:
    doc = workflow()
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert triggers is not None
    assert set(triggers) == {"pull_request", "push", "schedule", "workflow_dispatch"}
    for name, job in doc["jobs"].items():
        assert job["runs-on"] and job["steps"], name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), (name, step)


def test_every_qlwfw_call_parses(capsys: pytest.CaptureFixture[str]) -> None:
    calls = qlwfw_calls()
    assert {argv[0] for _, argv in calls} >= {"check", "show", "diff", "campaign"}
    known, wrapper = subcommands(), wrapper_commands()
    assert {"check", "test", "install-postgres", "install-browser", "--help"} <= wrapper
    for job, argv in calls:
        command = argv[0]
        if command in wrapper - {"check"}:
            continue
        assert command in known, f"{job}: ./qlwfw {command} is not a qlwf command"
        try:
            build_parser().parse_args(argv)
        except SystemExit as e:  # argparse's refusal: name the call and its message
            pytest.fail(f"{job}: ./qlwfw {shlex.join(argv)} does not parse: {capsys.readouterr().err.strip()} ({e})")


def test_the_gate_reports_what_is_uploaded() -> None:
    gate = steps("gate")
    (check,) = [s for s in gate if "./qlwfw check" in s.get("run", "")]
    args = shlex.split(check["run"].split("./qlwfw", 1)[1])
    junit, report = args[args.index("--junit") + 1], args[args.index("--json") + 1]
    (upload,) = [s for s in gate if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()"  # a failing gate is exactly when the artifacts matter
    paths = upload["with"]["path"].split()
    trace_dir = workflow()["jobs"]["gate"]["env"]["QLWF_TRACE_DIR"]
    assert junit in paths and report in paths and trace_dir.rstrip("/") + "/" in paths
    assert any(f"{trace_dir}/*.json" in s.get("run", "") and "./qlwfw show" in s["run"] for s in gate)


def test_postgres_binaries_are_installed_before_the_gate() -> None:
    runs = [s.get("run", "") for s in steps("gate")]
    install = next(i for i, r in enumerate(runs) if "apt-get install" in r and "postgresql" in r)
    gate = next(i for i, r in enumerate(runs) if "./qlwfw check" in r)
    assert install < gate


def test_the_diff_is_posted_on_pull_requests_only() -> None:
    job = workflow()["jobs"]["behaviour-diff"]
    assert job["if"] == "github.event_name == 'pull_request'"
    assert job["permissions"]["pull-requests"] == "write"
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # the base revision must be in the clone
    runs = [s.get("run", "") for s in job["steps"]]
    diff = next(i for i, r in enumerate(runs) if "./qlwfw diff" in r)
    post = next(i for i, r in enumerate(runs) if "gh pr comment" in r)
    report = shlex.split(runs[diff].split("||")[0].split(">", 1)[1])[0]  # the Markdown report on stdout
    assert diff < post and f"--body-file {report}" in runs[post]


def test_the_nightly_campaign_runs_on_schedule_with_postgres_and_keeps_its_findings() -> None:
    doc = workflow()
    triggers = doc.get("on", doc.get(True))
    assert triggers is not None
    assert [t["cron"] for t in triggers["schedule"]]  # a nightly schedule exists
    job = doc["jobs"]["campaign"]
    assert job["if"] == "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
    runs = [s.get("run", "") for s in job["steps"]]
    install = next(i for i, r in enumerate(runs) if "apt-get install" in r and "postgresql" in r)
    campaign = next(i for i, r in enumerate(runs) if "./qlwfw campaign" in r)
    assert install < campaign  # without a server the PostgreSQL leg is unknown and the job must not pass
    (argv,) = [argv for name, argv in qlwfw_calls() if name == "campaign" and argv[0] == "campaign"]
    args = build_parser().parse_args(argv)
    assert args.minutes * 60 + 15 * 60 <= job["timeout-minutes"] * 60  # room to install, render and upload
    # the nightly explores beyond the gate's exhaustive scope (the manifest's largest K for every shape)
    manifest = json.loads((REPO / "conformance" / "checkers" / "explore_manifest.json").read_text(encoding="utf-8"))
    assert args.explore_max_steps > max(int(k) for k in manifest["totals"])
    out = args.out
    assert any(f"{out}/traces/*.json" in r and "./qlwfw show" in r for r in runs)
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    uploaded = {path.rstrip("/") for path in upload["with"]["path"].split()}
    assert upload["if"] == "always()" and out in uploaded


def test_the_nightly_explores_every_small_shape_with_the_full_alphabet_and_keeps_its_traces() -> None:
    """Every shape of up to 3 steps to the end, each compared with the manifest's full section, the three free
    steps alone so that the search is split across the cores (Q-131, Q-133, Q-150); a job of its own."""
    from qlwf.conformance.checkers.explore import dag_shapes, shape_name

    doc = workflow()
    job = doc["jobs"]["explore"]
    assert job["if"] == doc["jobs"]["campaign"]["if"]  # nightly and on demand, beside the campaign
    calls = [build_parser().parse_args(argv) for name, argv in qlwfw_calls()
             if name == "explore" and argv[0] == "explore" and "--workflows" not in argv]
    assert all(args.full and args.pinned and args.depth is None for args in calls)
    assert any(args.max_steps is not None and args.max_steps >= 2 for args in calls)
    named = [shape for args in calls for shape in args.shape]
    assert set(named) == set(dag_shapes(3)) and len(named) == len(set(named))
    (alone,) = [args for args in calls if (3, ()) in args.shape]
    assert alone.shape == [(3, ())]  # a lone scope: split across the --jobs processes
    manifest = json.loads((REPO / "conformance" / "checkers" / "explore_manifest.json").read_text(encoding="utf-8"))
    assert set(manifest["full"]) == {shape_name(s) for k in (1, 2, 3) for s in dag_shapes(k)}
    steps = [s for s in job["steps"] if "./qlwfw explore" in s.get("run", "")]
    (traces,) = {step["env"]["QLWF_TRACE_DIR"] for step in steps}
    assert any(f"{traces}/*.json" in s.get("run", "") and "./qlwfw show" in s.get("run", "") for s in job["steps"])
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()"
    assert traces in {path.rstrip("/") for path in upload["with"]["path"].split()}


def test_the_nightly_explores_every_multi_workflow_scope_of_the_manifest() -> None:
    """Every scope pinned under the manifest's "workflows" with its default alphabet (a scope that names a
    smaller one is covered by that), with the default (reduced) search, and two one-step Runs with the
    full alphabet."""
    from qlwf.conformance.checkers.explore import REDUCED, parse_scope, scope_name

    calls = [build_parser().parse_args(argv) for name, argv in qlwfw_calls()
             if name == "explore" and argv[0] == "explore" and "--workflows" in argv]
    manifest = json.loads((REPO / "conformance" / "checkers" / "explore_manifest.json").read_text(encoding="utf-8"))
    explored = {scope_name(shape, args.workflows) for args in calls if not args.full for shape in args.shape}
    assert explored == {parse_scope(name).name.partition("@")[0] for name in manifest["workflows"]}
    assert all(args.reduction == REDUCED for args in calls)
    assert all(args.pinned for args in calls if not args.full)
    assert any(args.full and args.workflows == 2 for args in calls)
