"""`qlwf show`: the step table and coloured DAG of a trace, in Markdown and in self-contained HTML.

Expected statuses come from the traces' own recorded state changes (written when the corpus was
recorded), not from the renderer's replay; the failing step comes from a planted fault.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.report import layout, render
from qlwf.conformance.report import svg as render_svg
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import Trace, corruption, load, model_step, save

from qlwf.cli.entry import main as cli

CORPUS = sorted(CORPUS_DIR.glob("*.json"))
READIED = CORPUS_DIR / "adr0226-dependency-readied.json"


def recorded_statuses(trace: Trace, upto: int) -> dict[tuple[str, str], str]:
    """StepRun statuses after step `upto`, folded from the recorded `state.changes` of the file."""
    out: dict[tuple[str, str], str] = {}
    for step in trace.steps[: upto + 1]:
        for c in step["state"]["changes"]:
            if c["kind"] == "stepRuns" and c["record"] is not None:
                out[(c["record"]["runId"], c["record"]["stepKey"])] = c["record"]["status"]
    return out


def plan_edges(trace: Trace) -> set[tuple[str, str, str]]:
    return {(s["args"]["plan"]["runId"], need, p["stepKey"]) for s in trace.steps
            if s["op"] == "command" and s["name"] == "admit_workflow" and s["outcome"].get("ok")
            for p in s["args"]["plan"]["steps"] for need in p["needs"]}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_every_corpus_trace_renders_what_was_recorded(path: Path) -> None:
    trace = load(path)
    view = render.build(trace)
    assert len(view.steps) == len(trace.steps)
    assert all(s.disagreement is None and s.crash is None for s in view.steps)
    for i in (0, len(trace.steps) // 2, len(trace.steps) - 1):
        assert view.steps[i].statuses == recorded_statuses(trace, i)
    edges = {(n.run_id, need, n.step_key) for n in view.nodes for need in n.needs}
    assert edges == plan_edges(trace)
    md = render.markdown(view)
    assert md.count("\n| ") == len(trace.steps) + 2  # header, separator, one row per step
    page = render_svg.html(view, engine="layered")
    for run_id, key in recorded_statuses(trace, len(trace.steps) - 1):
        assert f'data-step-key="{key}"' in page and f'data-run-id="{run_id}"' in page


def test_markdown_colours_the_dag_at_the_chosen_step() -> None:
    trace = load(READIED)
    advanced = next(i for i, s in enumerate(trace.steps) if s["op"] == "command" and s["name"] == "advance_frontier"
                    and s["outcome"]["ok"]["status"] == "advanced")
    md = render.markdown(render.build(trace), advanced)
    statuses = recorded_statuses(trace, advanced)
    dag = md.split("```mermaid", 1)[1]
    for (_, key), status in statuses.items():
        assert re.search(rf'\["{key}<br/>{status}"\]:::{status}', dag), (key, status, dag)
    assert dag.count(" --> ") == len(plan_edges(trace))
    assert 'subgraph run0["run-1 · running"]' in dag
    assert f"| **{advanced}** | `advance_frontier`" in md
    assert "step:frontier.ready" in md.split(f"| **{advanced}** |", 1)[1].split("\n", 1)[0]


def test_failing_step_is_the_default_and_names_the_violation() -> None:
    trace = load(READIED)
    # overwrite a StepRun's status behind the commands' back: its digest no longer matches
    steps = [*trace.inputs().steps[:3], corruption("stepRuns", ["run-1:b"], {"status": "succeeded"}),
             *trace.inputs().steps[3:6]]
    view = render.build(Trace("planted drift", trace.initial_clock, steps, "drift"))
    assert view.failing_step == 3 and view.default_step() == 3
    assert view.steps[3].statuses[("run-1", "b")] == "succeeded"
    assert any(v.startswith("INV-") for v in view.steps[3].violations)
    md = render.markdown(view)
    assert "**first failing step: 3**" in md and "| **3** | `corrupt stepRuns[run-1:b]`" in md
    page = render_svg.html(view, engine="layered")
    assert 'id="step-3" class="chosen failing"' in page


def test_a_recorded_step_the_model_no_longer_produces_is_flagged() -> None:
    trace = load(READIED)
    trace.steps[2] = trace.steps[2] | {"outcome": {"ok": {"status": "advanced"}}}
    view = render.build(trace)
    assert view.failing_step == 2 and "recorded outcome 'advanced', model 'unchanged'" in (view.steps[2].disagreement
                                                                                           or "")
    # the differing field in full: the recorded outcome lacks every key but status
    assert '(at ok.status: recorded "advanced", model "unchanged")' in (view.steps[2].disagreement or "")


def test_a_model_crash_is_shown_and_ends_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}

    def crashing(state: Any, step: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyError("planted")
        return model_step(state, step)

    monkeypatch.setattr(render, "model_step", crashing)
    view = render.build(load(READIED))
    assert len(view.steps) == 3 and view.steps[2].crash == "KeyError: 'planted'" and view.default_step() == 2


def test_step_out_of_range_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = len(load(READIED).steps)
    assert cli(["show", str(READIED), "--step", str(n)]) == 2
    assert f"--step {n}: the trace has {n} rendered step(s)" in capsys.readouterr().err
    assert cli(["show", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "x.json").write_text('{"format": "other"}', encoding="utf-8")
    assert cli(["show", str(tmp_path / "x.json")]) == 2
    assert "not a qlwf-trace document" in capsys.readouterr().err


def test_cli_writes_markdown_to_stdout_or_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["show", str(READIED)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# qlwf show: adr0226-dependency-readied") and "```mermaid" in out
    md, page = tmp_path / "t.md", tmp_path / "t.html"
    assert cli(["show", str(READIED), "--md", str(md), "--html", str(page), "--step", "0"]) == 0
    assert capsys.readouterr().out == ""
    assert md.read_text(encoding="utf-8").startswith("# qlwf show")
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text
    assert 'data-step-key="b" data-status="pending"' in text  # after the admission only a is ready
    assert 'data-step-key="a" data-status="ready"' in text


def test_html_is_self_contained() -> None:
    page = render_svg.html(render.build(load(READIED)), engine="layered")
    assert not re.search(r"<script|<link|<img|<iframe|@import|\bsrc=|\bhref=", page, re.I)
    assert set(re.findall(r"url\(([^)]*)\)", page)) == {"#arrow"}  # only the in-document marker


# ------------------------------------------------------------------------------------------------
# Layout: both paths
DIAMOND = layout.dag("abcde", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("a", "e")])


def _check_layout(pos: layout.Positions) -> None:
    assert set(pos) == set(DIAMOND.nodes)
    for a, b in DIAMOND.edges:
        assert pos[a][1] < pos[b][1], (a, b, pos)  # a need is drawn above what needs it
    boxes = list(pos.values())
    for i, (x1, y1) in enumerate(boxes):
        for x2, y2 in boxes[i + 1:]:
            assert abs(x1 - x2) >= layout.NODE_W or abs(y1 - y2) >= layout.NODE_H, pos  # no overlap


def test_layered_layout() -> None:
    pos, used = layout.positions(DIAMOND, "layered")
    assert used == "layered"
    _check_layout(pos)
    assert len({round(y) for _, y in pos.values()}) == 3  # three generations


def test_dot_layout_where_installed() -> None:
    if shutil.which("dot") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Graphviz `dot` is missing under CI=true (./qlwfw install-browser installs it)")
        pytest.skip("Graphviz `dot` not installed (./qlwfw install-browser installs it)")
    pos, used = layout.positions(DIAMOND, "dot")
    assert used == "dot"
    _check_layout(pos)
    assert 'layout: dot' in render_svg.html(render.build(load(READIED)))


def test_without_dot_auto_falls_back_and_dot_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert layout.positions(DIAMOND, "auto")[1] == "layered"
    assert "layout: layered" in render_svg.html(render.build(load(READIED)))
    assert cli(["show", str(READIED), "--html", str(tmp_path / "x.html"), "--layout", "dot"]) == 2


# ------------------------------------------------------------------------------------------------
# Every counterexample report prints the command that renders it
def test_conformance_divergence_saves_its_trace_and_prints_show(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from qlwf.conformance import backends
    from support.broken_backend import BrokenBackend

    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    backends.register("broken-show", BrokenBackend, "test only")
    try:
        code = cli(["conform", "--backend", "broken-show", "--traces", "0", "--corpus"])
    finally:
        backends.unregister("broken-show")
    out = capsys.readouterr().out
    assert code == 1
    shown = re.findall(r"render it: +(qlwf show (\S+) --step (\d+) --html \S+)", out)
    assert shown and len(shown) == out.count("DIVERGENCE in trace")
    for _, path, step in shown:
        trace = load(path)
        assert trace.description.startswith("conformance divergence on broken-show at step")
        assert len(trace.steps) == int(step) + 1  # cut at the diverging step, which is the default shown
        view = render.build(trace)
        assert view.default_step() == int(step)
        assert cli(["show", path, "--step", step, "--md", str(tmp_path / "out.md")]) == 0


def test_show_command_quotes_paths() -> None:
    assert render.show_command(Path("a b/c.json"), 3) == "qlwf show 'a b/c.json' --step 3 --html 'a b/c.html'"


def test_explore_counterexample_prints_show(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from qlwf.conformance.mutants import by_name

    from qlwf.cli import explore as cmd_explore

    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    plant = by_name("requeue_keeps_epoch").plant
    assert plant is not None
    plant(monkeypatch)
    out = io.StringIO()
    assert cmd_explore.run(argparse.Namespace(max_steps=1, depth=None, json=False, full=False, jobs=1), out) == 1
    paths = re.findall(r"render it: qlwf show (\S+) --html", out.getvalue())
    assert paths and all(Path(p).parent == tmp_path for p in paths)
    assert render.build(load(paths[0])).failing_step is not None


def test_saved_trace_round_trips_through_show(tmp_path: Path) -> None:
    trace = load(READIED)
    save(trace.inputs(), tmp_path / "plain.json")  # no expectations, as a stateful counterexample is saved
    plain, recorded = render.build(load(tmp_path / "plain.json")), render.build(trace)
    assert [s.statuses for s in plain.steps] == [s.statuses for s in recorded.steps]
    assert [s.rules for s in plain.steps] == [tuple(s.get("rules", ())) for s in trace.steps]


def test_the_gates_conformance_check_saves_and_names_its_counterexample(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    from qlwf.conformance import backends
    from support.broken_backend import BrokenBackend

    from qlwf.gate import checks

    monkeypatch.setenv("QLWF_TRACE_DIR", str(tmp_path))
    backends.register("broken-gate", BrokenBackend, "test only")
    try:
        evidence = checks._conformance("broken-gate", corpus=True, traces=0, seed=1)
    finally:
        backends.unregister("broken-gate")
    (problem,) = evidence.problems
    (path,) = re.findall(r"render it: +qlwf show (\S+) --step \d+ --html", problem)
    assert Path(path).parent == tmp_path and load(path).description.startswith("conformance divergence on broken-gate")


def test_a_traces_terminal_escapes_are_shown_not_obeyed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Decisions Q-124: a trace's description went to the terminal as it was, ESC sequences and all."""
    trace = load(CORPUS[0])
    evil = Trace("erase \x1b[2J\x1b[31mred\r and \x9b6n", trace.initial_clock, trace.steps, trace.name,
                 trace.state_form)
    path = tmp_path / "evil.json"
    save(evil, path)
    assert cli(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "erase \\x1b[2J\\x1b[31mred\\r and \\x9b6n" in out
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    assert cli(["show", str(path), "--md", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")]) == 0
    for report in ("r.md", "r.html"):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", (tmp_path / report).read_text(encoding="utf-8")), report
