"""`qlwf diff` (issue 14 §1) on a temporary copy of the repository: an ADR change, a pure refactor,
a check-order change, proofs against a base directory, and bad input.

The copy holds what a diff reads (pyproject.toml, model/, proofs/, examples/, the corpus); its
first commit is the base, the edit lives in its working tree. Each edit is one small helper that
rewrites the source text it needs, so the tests keep working while table rows gain fields.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.lockstep import runner
from qlwf.conformance.traces.format import load

from qlwf.review.model_diff import Options, diff
from qlwf.review.report import render_markdown
from qlwf.review.sources import DiffInputError, Tree, base_tree, extract_plain

REPO = Path(__file__).resolve().parents[3]
COPIED = ("pyproject.toml", "model", "proofs", "examples", "conformance/traces/corpus")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template") / "repo"
    for rel in COPIED:
        src, dst = REPO / rel, root / rel
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    return root


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(template, copy)
    return copy


def _replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name}: expected exactly one {old!r}"
    path.write_text(text.replace(old, new), encoding="utf-8")


# ---- the edits -----------------------------------------------------------------------------------
def timeout_times_out_pending(repo: Path, performer_row: bool = True) -> None:
    """ADR change: under reason timeout, pending StepRuns become timed_out (instead of cancelled).
    The convergence decision row is the change; the StepRun transition it needs is written into the
    §3.1 graph too, and the §3.4 performer row follows from the decision table (model/tables_*.py).
    Without `performer_row` the derivation leaves that move out, so no performer row allows it."""
    cancellation = repo / "model" / "tables_cancellation.py"
    state_machines = repo / "model" / "tables_state_machines.py"
    _replace_once(cancellation, '("pending", True): _CANCELLED', '("pending", True): _TIMED_OUT')
    _replace_once(state_machines, '"pending": frozenset({"ready", "skipped", "cancelled"})',
                  '"pending": frozenset({"ready", "skipped", "cancelled", "timed_out"})')
    if not performer_row:
        _replace_once(state_machines, 'if d.action == "mutate" and d.target is not None}',
                      'if d.action == "mutate" and d.target is not None and (s, d.target) != ("pending", "timed_out")}')


def pure_refactor(repo: Path) -> None:
    """Rename a private helper everywhere, swap two independent function definitions and two
    entries of a lookup table."""
    cancel = repo / "model" / "cmd_cancel.py"
    text = cancel.read_text(encoding="utf-8")
    assert text.count("_converge(") == 3
    cancel.write_text(text.replace("_converge(", "_converge_run("), "utf-8")
    attempt = ('def put_attempt(tx: StateWriter, attempt: Record) -> None:\n'
               '    tx.table("attempts")[attempt["id"]] = canonical(attempt, ATTEMPT_KEYS)\n')
    lease = ('def put_lease(tx: StateWriter, lease: Record) -> None:\n'
             '    tx.table("leases")[lease["attemptId"]] = canonical(lease, LEASE_KEYS)\n')
    _replace_once(repo / "model" / "cmd_context.py", attempt + "\n\n" + lease, lease + "\n\n" + attempt)
    _replace_once(repo / "model" / "tables_cancellation.py",
                  '("ready", False): _CANCELLED, ("ready", True): _TIMED_OUT,',
                  '("ready", True): _TIMED_OUT, ("ready", False): _CANCELLED,')


def lease_checked_before_attempt_status(repo: Path) -> None:
    """recover_attempt checks the lease before the attempt's status: an ended attempt whose lease
    is no longer leased now reports not_leased instead of attempt_state_mismatch."""
    status = ('    if a["status"] not in T.ACTIVE_ATTEMPT:\n'
              '        raise ctx.conflict("attempt_state_mismatch", M.attempt_is(a["status"]))\n')
    lease = ('    if lease is None or lease["status"] != "leased":\n'
             '        raise ctx.conflict("not_leased", M.NOT_LEASED)\n')
    _replace_once(repo / "model" / "cmd_recovery.py", status + lease, lease + status)


# ---- helpers -----------------------------------------------------------------------------------------
def page_converges_one_run(repo: Path) -> None:
    """The convergence page settles only its first candidate: nothing changes while there is one Run."""
    _replace_once(repo / "model" / "cmd_cancel.py", "    for row in rows[:limit]:\n",
                  "    for row in rows[:min(limit, 1)]:\n")


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qlwf.cli", "diff", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def replay_with_model_of(tree: Path, trace: Path) -> subprocess.CompletedProcess[str]:
    """`qlwf replay TRACE --backend model` with `tree`'s model (mapped as the diff's dumper maps it)."""
    code = ("import sys; from pathlib import Path; from qlwf.conformance.checkers.model_import import use_tree; "
            f"use_tree(Path({str(tree)!r}), ('qlwf.model',)); from qlwf.conformance.lockstep import runner; "
            f"sys.exit(runner.replay({str(trace)!r}, 'model', False, sys.stdout))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def step_run_status_after(trace_steps: list[dict[str, Any]], step_run_id: str) -> str | None:
    status = None
    for s in trace_steps:
        for c in s["state"]["changes"]:
            if c["kind"] == "stepRuns" and c["key"] == [step_run_id] and c["record"] is not None:
                status = c["record"]["status"]
    return status


# ---- tests -------------------------------------------------------------------------------------------
def test_adr_change_yields_exactly_the_expected_groups_with_valid_witnesses(repo: Path, tmp_path: Path) -> None:
    timeout_times_out_pending(repo)
    witnesses = tmp_path / "witnesses"
    with base_tree(repo, "HEAD") as base:  # the copy's first commit, unpacked as the CLI does
        report = diff(base, Tree(repo, "working tree"),
                      Options(max_steps=2, shapes=["2:a>b"], proofs_bound=None, witness_dir=witnesses))
    out = report.to_json()
    assert not report.identical
    # Only convergence changes: a pending StepRun exists only behind its need, and only converging
    # (directly or through a page) under reason timeout decides its target.
    groups = {(g["command"], tuple(g["rulesRemoved"]), tuple(g["rulesAdded"]), g["outcomeChange"])
              for g in out["behaviour"]["groups"]}
    assert groups == {(cmd, ("step:converge.pending_cancelled",), ("step:converge.pending_timed_out",), None)
                      for cmd in ("converge_cancellation", "converge_cancellation_page")}
    assert all(g["rulesRemovedInSome"] == [] and g["rulesAddedInSome"] == [] for g in out["behaviour"]["groups"])
    assert out["behaviour"]["statesOnlyInBase"] > 0 and out["behaviour"]["statesOnlyInHead"] > 0
    only = out["behaviour"]["statesOnly"]
    assert len(only["head"]) == min(out["behaviour"]["statesOnlyInHead"], 100)
    assert all("'run-x:b', 'timed_out'" in s["state"] for s in only["head"])  # b timed out: only the new rule
    assert not any("'run-x:b', 'timed_out'" in s["state"] for s in only["base"])
    assert {(c["table"], c["change"]) for c in out["tables"]} == {
        ("CANCEL_STEP_TABLE", "changed"), ("STEP_TRANSITIONS", "changed"), ("STEP_PERFORMERS", "added")}
    # examples/cancel-timeout-expired-lease.json: a chain under reason timeout, its later steps pending.
    changed = {a["input"] for a in out["oracle"]["changed"]}
    assert "examples/cancel-timeout-expired-lease.json" in changed
    assert all(a["head"] == "resolution" and a["base"] == "resolution" for a in out["oracle"]["changed"])
    # The golden corpus pins the old mapping ("pending steps to cancelled" under reason timeout).
    assert [(c["trace"], c["differs"]) for c in out["corpus"]["changed"]] == [
        ("adr0228-timeout-mapping", ["rules", "state"])]

    for g in out["behaviour"]["groups"]:
        w = g["witness"]
        path = Path(w["file"])
        assert w["show"] == f"qlwf show {path}" and path.is_file()
        trace = load(path)
        last = trace.steps[-1]
        assert last["name"] == g["command"] and w["firstDifference"] == len(trace.steps) - 1
        assert "step:converge.pending_timed_out" in last["rules"]
        assert step_run_status_after(trace.steps, "run-x:b") == "timed_out"  # recorded by the changed model
        changed_model = replay_with_model_of(repo, path)
        assert changed_model.returncode == 0, changed_model.stdout + changed_model.stderr
        # This process runs the unchanged model (the base): it diverges exactly at the last step.
        summary = runner.run_traces("model", [trace], invariants=False)
        divergence = summary.results[0].divergence
        assert divergence is not None and divergence.step_index == len(trace.steps) - 1

    markdown = render_markdown(report)
    assert markdown.splitlines()[2].startswith("**Behaviour differs**")
    for g in out["behaviour"]["groups"]:
        assert g["witness"]["show"] in markdown
    assert markdown.count("| # | step | base | head |") == len(out["behaviour"]["groups"])


def test_pure_refactor_is_an_empty_diff(repo: Path, tmp_path: Path) -> None:
    pure_refactor(repo)
    assert subprocess.run(["git", "-C", str(repo), "diff", "--quiet"]).returncode == 1  # the edit is there
    done = run_cli(repo, "--base", "HEAD", "--max-steps", "1", "--bound", "1", "--prove-only", "TBL-*",
                   "--json", "--witness-dir", str(tmp_path / "w"))
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["identical"] is True
    assert out["behaviour"]["groups"] == [] and out["tables"] == []
    assert out["behaviour"]["comparedStates"] == out["behaviour"]["statesHead"] > 1
    assert out["proofs"]["changed"] == [] and out["proofs"]["properties"][0] == out["proofs"]["properties"][1] > 0
    assert out["oracle"]["changed"] == [] and out["oracle"]["inputs"] > 0
    assert out["corpus"]["changed"] == [] and out["corpus"]["traces"] > 0
    assert not (tmp_path / "w").exists()  # no witness without a difference


def test_a_change_only_several_runs_show_is_found_in_the_two_run_scope(repo: Path, tmp_path: Path) -> None:
    page_converges_one_run(repo)
    common = ("--base", "HEAD", "--max-steps", "1", "--no-proofs", "--no-oracle", "--json",
              "--witness-dir", str(tmp_path / "w"))
    one_run = run_cli(repo, *common, "--workflows", "none")
    assert one_run.returncode == 0, one_run.stdout + one_run.stderr  # invisible with one Run
    assert json.loads(one_run.stdout)["scope"]["workflowScopes"] == []
    done = run_cli(repo, *common)  # the default scope adds two Runs, taken up to their permutations
    assert done.returncode == 1, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["scope"]["workflowScopes"] == ["2x1:-"] and out["scope"]["swapRuns"] is True
    groups = out["behaviour"]["groups"]
    assert groups and {g["command"] for g in groups} == {"converge_cancellation_page"}
    assert {shape for g in groups for shape in g["shapes"]} == {"2x1:-"}
    assert out["behaviour"]["statesHead"] > json.loads(one_run.stdout)["behaviour"]["statesHead"]
    # the witness replays through the changed model: two admissions, two cancels, one page
    trace = load(Path(groups[0]["witness"]["file"]))
    assert [s["args"]["plan"]["runId"] for s in trace.steps if s.get("name") == "admit_workflow"] == ["run-x", "run-y"]
    changed_model = replay_with_model_of(repo, Path(groups[0]["witness"]["file"]))
    assert changed_model.returncode == 0, changed_model.stdout + changed_model.stderr


def test_check_order_change_that_only_alters_the_error_is_found(repo: Path, tmp_path: Path) -> None:
    lease_checked_before_attempt_status(repo)
    done = run_cli(repo, "--base", "HEAD", "--max-steps", "1", "--no-proofs", "--witness-dir", str(tmp_path / "w"))
    assert done.returncode == 1, done.stdout + done.stderr
    md = done.stdout
    assert md.splitlines()[2].startswith("**Behaviour differs**")
    rows = [line for line in md.splitlines() if line.startswith("| adr0228-dead-worker-trusted-recovery |")]
    assert len(rows) == 1, md
    assert "recover_attempt" in rows[0] and "| outcome |" in rows[0]
    assert "Conflict attempt_state_mismatch" in rows[0] and "Conflict not_leased" in rows[0]
    # The explorer only offers recover_attempt on active attempts, where both orders agree.
    assert "* behaviour: 0 group(s)" in md


def test_proof_status_is_compared_against_a_base_directory(repo: Path, template: Path, tmp_path: Path) -> None:
    timeout_times_out_pending(repo, performer_row=False)  # a StepRun move no STEP_PERFORMERS row allows
    done = run_cli(tmp_path, "--base", str(template), "--repo", str(repo), "--max-steps", "1", "--bound", "2",
                   "--prove-only", "TBL-step-moves", "--prove-only", "TBL-run-moves", "--no-oracle", "--json",
                   "--witness-dir", str(tmp_path / "w"))
    assert done.returncode == 1, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["proofs"]["properties"] == [2, 2]
    assert out["proofs"]["changed"] == [{"property": "TBL-step-moves", "base": "proved", "head": "violated",
                                         "detail": out["proofs"]["changed"][0]["detail"]}]
    assert out["base"] == str(template)


def run_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    from qlwf.cli.entry import main
    try:
        code = main(["diff", *args])
    except SystemExit as e:  # argparse refuses the arguments
        code = int(e.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (("--base", "no-such-revision"), "unknown revision"),
    (("--base", "HEAD", "--max-steps", "0"), "--max-steps"),
    (("--base", "HEAD", "--max-steps", "two"), "--max-steps"),
    (("--base", "HEAD", "--bound", "-1"), "--bound"),
])
def test_bad_input_exits_2(repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                           args: tuple[str, ...], message: str) -> None:
    monkeypatch.chdir(repo)
    code, err = run_in_process(capsys, *args)
    assert code == 2 and message in err, err


def test_a_base_directory_that_is_not_a_copy_is_named_as_one(repo: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Before Q-110 it was "unknown revision", which hid that the directory was found but lacked a pyproject.toml."""
    (tmp_path / "model-only" / "model").mkdir(parents=True)
    monkeypatch.chdir(repo)
    code, err = run_in_process(capsys, "--base", str(tmp_path / "model-only"))
    assert code == 2 and "is a directory without a pyproject.toml" in err and "not a revision of" in err, err


def test_outside_a_repository_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = run_in_process(capsys, "--base", "HEAD~1")
    assert code == 2 and "not a git repository" in err, err


def test_a_base_directory_without_a_model_exits_2(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "pyproject.toml").write_text("[project]\nname = 'x'\n", "utf-8")
    monkeypatch.chdir(repo)
    code, err = run_in_process(capsys, "--base", str(tmp_path / "empty"))
    assert code == 2 and "no model" in err, err


def test_table_rows_are_compared_by_name_order_counts_only_for_sequences() -> None:
    from types import ModuleType
    from typing import NamedTuple

    from qlwf.review.table_diff import diff_tables, table_rows

    class Row(NamedTuple):
        rule: str
        target: str

    def module(rules: tuple[Row, ...], mapping: dict[tuple[str, bool], str], limit: int) -> ModuleType:
        m = ModuleType("fake_tables")
        m.RULES = rules  # type: ignore[attr-defined]
        m.MAPPING = mapping  # type: ignore[attr-defined]
        m.LIMIT = limit  # type: ignore[attr-defined]
        m.helper = lambda: None  # type: ignore[attr-defined]  # not a table
        return m

    base = table_rows(module((Row("a", "x"), Row("b", "y")), {("p", True): "c", ("q", False): "d"}, 1))
    same = table_rows(module((Row("a", "x"), Row("b", "y")), {("q", False): "d", ("p", True): "c"}, 1))
    assert diff_tables(base, same) == []  # a mapping's order is not behaviour
    head = table_rows(module((Row("b", "y"), Row("a", "z"), Row("c", "w")), {("p", True): "t", ("q", False): "d"}, 2))
    changes = {(c.table, c.key, c.change) for c in diff_tables(base, head)}
    assert changes == {("RULES", "a", "changed"), ("RULES", "c", "added"), ("RULES", "(row order)", "reordered"),
                       ("MAPPING", '["p",true]', "changed"), ("constants", "LIMIT", "changed")}


def test_an_unknown_shape_exits_2(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(repo)
    code, err = run_in_process(capsys, "--base", "HEAD", "--max-steps", "1", "--shape", "1:-", "--shape", "2:b>a",
                               "--no-proofs", "--no-oracle")
    assert code == 2 and "no DAG shape of 1..1 steps is named 2:a>b" in err, err  # named as the explorer names it


def test_a_shape_is_asked_for_by_the_explorers_name_whatever_labelling_is_given() -> None:
    from qlwf.cli import diff as cmd_diff

    parser = argparse.ArgumentParser()
    cmd_diff.register(parser.add_subparsers())
    args = parser.parse_args(["diff", "--base", "HEAD", "--max-steps", "3", "--shape", "3:b>c", "--shape", "3:c>a,c>b"])
    assert args.shape == ["3:a>b", "3:a>b,a>c"]
    with pytest.raises(SystemExit):
        parser.parse_args(["diff", "--base", "HEAD", "--shape", "2:a>b,b>a"])


@pytest.fixture(params=[True, False], ids=["data-filter", "python-before-3.11.4"])
def stdlib_filter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both ways `extract_plain` works: with the stdlib's "data" filter (where this Python has it) and
    as on a Python before 3.11.4, which has none."""
    if not request.param:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no extraction filters (it is older than 3.11.4)")
    return bool(request.param)


def test_a_base_revision_unpacks_with_or_without_the_stdlib_extraction_filter(
        repo: Path, stdlib_filter: bool) -> None:
    """The "data" extraction filter came with Python 3.11.4; Debian 12's python3 is 3.11.2, where the
    same refusal is made by hand (decisions Q-96)."""
    with base_tree(repo, "HEAD") as base:
        unpacked = base.root
        assert (unpacked / "model" / "tables.py").read_bytes() == (repo / "model" / "tables.py").read_bytes()
    assert not unpacked.exists()  # removed with the context


def _archive(*members: tuple[str, bytes | None, str | None]) -> tarfile.TarFile:
    """An in-memory tar of (name, file bytes or None, symlink target or None) members."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as out:
        for name, content, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                out.addfile(info)
            else:
                info.size = len(content or b"")
                out.addfile(info, io.BytesIO(content or b""))
    data.seek(0)
    return tarfile.open(fileobj=data)


@pytest.mark.parametrize("member", [("../escaped.py", b"x", None), ("model/link", None, "/etc/passwd")],
                         ids=["dotdot", "symlink-out"])
def test_an_archive_member_outside_the_tree_is_refused(tmp_path: Path, stdlib_filter: bool,
                                                       member: tuple[str, bytes | None, str | None]) -> None:
    into = tmp_path / "into"
    into.mkdir()
    with _archive(("model/ok.py", b"ok", None), member) as archive, pytest.raises(DiffInputError):
        extract_plain(archive, into)
    assert not (tmp_path / "escaped.py").exists()


def test_an_absolute_member_never_lands_outside_the_tree(tmp_path: Path, stdlib_filter: bool) -> None:
    """The stdlib filter strips the leading slash (the file lands inside); the fallback refuses it."""
    into = tmp_path / "into"
    into.mkdir()
    absolute = tmp_path / "absolute.py"  # an absolute name whose place outside `into` is ours to inspect
    with _archive((str(absolute), b"x", None)) as archive:
        try:
            extract_plain(archive, into)
        except DiffInputError:
            assert not stdlib_filter
        else:
            assert stdlib_filter and (into / str(absolute).lstrip("/")).read_bytes() == b"x"
    assert not absolute.exists()
