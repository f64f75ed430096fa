"""The exhaustive explorer (conformance/checkers/explore/, `qlwf explore`): shapes, abstraction, counts
manifest, CLI."""

from __future__ import annotations

import argparse
import dataclasses
import io
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from qlwf.conformance.checkers import explore as E
from qlwf.conformance.checkers.explore import search
from qlwf.model import invariants as I
from qlwf.model import speedups
from qlwf.model.state import State
from qlwf.model.system import apply
from support.explored import explored, load_manifest

from qlwf.cli import explore as cmd_explore

# OEIS A003087: number of unlabeled DAGs with n nodes.
UNLABELED_DAGS = {1: 1, 2: 2, 3: 6, 4: 31}


def graph(shape: E.Shape) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(shape[0]))
    g.add_edges_from(shape[1])
    return g


def test_shapes_are_every_dag_once_up_to_isomorphism() -> None:
    for n, count in UNLABELED_DAGS.items():
        shapes = E.dag_shapes(n)
        assert len(shapes) == count
        graphs = [graph(s) for s in shapes]
        assert all(nx.is_directed_acyclic_graph(g) for g in graphs)
        assert not any(nx.is_isomorphic(a, b) for a, b in itertools.combinations(graphs, 2))
    pairs = [(i, j) for i in range(3) for j in range(3) if i != j]
    for bits in itertools.product((0, 1), repeat=len(pairs)):  # every labelled digraph on 3 nodes
        g = nx.DiGraph([p for p, b in zip(pairs, bits, strict=True) if b])
        g.add_nodes_from(range(3))
        if nx.is_directed_acyclic_graph(g):
            assert sum(nx.is_isomorphic(g, graph(s)) for s in E.dag_shapes(3)) == 1


@pytest.mark.parametrize("n", [3, 4, 5])
def test_each_shape_is_the_canonical_form_of_every_labelling_in_its_class(n: int) -> None:
    """dag_shapes relabels one member of each class only (Q-129); by definition a shape is the
    canonical_edges of every labelled DAG with edges i -> j, i < j, all 2^(n(n-1)/2) of them."""
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    every = {E.canonical_edges(n, tuple(p for p, b in zip(pairs, bits, strict=True) if b))
             for bits in itertools.product((0, 1), repeat=len(pairs))}
    assert [f for _, f in E.dag_shapes(n)] == sorted(every, key=lambda f: (len(f), f))


def test_the_selected_k_5_family_is_the_chain_and_the_diamonds() -> None:
    """explore.SELECTED[5], built here again with networkx: the 5-chain, the 1-3-1 diamond, and the
    1-2-1 diamond with a head step, with a tail step, or beside a free step; each once."""
    family, members = E.SELECTED[5]
    assert family == "chains and diamonds"
    shapes = members(5)
    diamond = nx.DiGraph([("s", "x"), ("s", "y"), ("x", "t"), ("y", "t")])
    expected = [nx.path_graph(5, create_using=nx.DiGraph),
                nx.DiGraph([("s", m) for m in "xyz"] + [(m, "t") for m in "xyz"]),
                nx.compose(diamond, nx.DiGraph([("h", "s")])),
                nx.compose(diamond, nx.DiGraph([("t", "u")])),
                nx.union(diamond, nx.empty_graph(["free"], create_using=nx.DiGraph))]
    assert len(shapes) == len(expected) and all(s in E.dag_shapes(5) for s in shapes)
    for g in expected:
        assert sum(nx.is_isomorphic(g, graph(s)) for s in shapes) == 1
    assert E.scope_shapes(2, (5,)) == (*E.dag_shapes(1), *E.dag_shapes(2), *shapes)


def test_the_manifest_pins_the_selected_families_and_their_totals() -> None:
    manifest = load_manifest()
    for k, (family, members) in E.SELECTED.items():
        pinned = manifest["selected"][str(k)]
        names = [E.shape_name(s) for s in members(k)]
        assert pinned["family"] == family and pinned["shapes"] == len(names)
        assert pinned["distinct_states"] == sum(manifest["shapes"][n]["distinct_states"] for n in names) > 10_000
    # the totals of K <= 4 count every shape of that size and none of the selected larger ones
    assert manifest["totals"]["4"]["shapes"] == sum(UNLABELED_DAGS.values())


def test_symmetric_states_share_one_identity() -> None:
    """In the two-independent-steps shape, admitting `a` or admitting `b` is the same explored state."""
    shape = E.dag_shapes(2)[0]
    assert shape == (2, ())
    plan = E.build_plan(E.RUN_ID, E.PLAN_ID, E.shape_needs(shape), E.INITIAL_CLOCK)
    root = apply(State(clock=E.INITIAL_CLOCK), {"name": "admit_workflow", "args": {"plan": plan}}).state
    renamings = [{f"{E.RUN_ID}:{E.step_key(i)}": f"{E.RUN_ID}:{E.step_key(p[i])}" for i in range(2)}
                 for p in E.automorphisms(shape)]
    keys = []
    for step in plan["steps"]:
        args = {"runId": E.RUN_ID, "stepRunId": step["stepRunId"], "binding": I.consistent_binding(plan, step)}
        out = apply(root, {"name": "admit_task_attempt", "args": args})
        keys.append(E.canonical_key(E.abstract_state(out.state), renamings))
    assert keys[0] == keys[1]
    assert E.abstract_state(root) != keys[0]


@pytest.mark.parametrize("shape", [s for k in (2, 3) for s in E.dag_shapes(k) if len(E.automorphisms(s)) > 1],
                         ids=E.shape_name)
def test_every_image_of_a_state_under_the_shape_symmetries_has_one_canonical_key(shape: E.Shape) -> None:
    plan = E.build_plan(E.RUN_ID, E.PLAN_ID, E.shape_needs(shape), E.INITIAL_CLOCK)
    root = apply(State(clock=E.INITIAL_CLOCK), {"name": "admit_workflow", "args": {"plan": plan}}).state
    renamings = [{f"{E.RUN_ID}:{E.step_key(i)}": f"{E.RUN_ID}:{E.step_key(p[i])}" for i in range(shape[0])}
                 for p in E.automorphisms(shape)]
    alphabet = E.default_alphabet(shape[0])
    level, seen = [root], 0
    for _ in range(3):  # every state within three actions of admission
        nxt = []
        for state in level:
            key = E.abstract_state(state)
            canonical = E.canonical_key(key, renamings)
            assert canonical in [E._rename(key, names) for names in renamings]  # one of the images ...
            for names in renamings:  # ... and the same one from each of them
                assert E.canonical_key(E._rename(key, names), renamings) == canonical
            seen += 1
            nxt += [E.take(state, a)[0] for a in E.actions(state, alphabet)]
        level = nxt
    assert seen > 10


def run_permutations(run_ids: tuple[str, ...], shape: E.Shape) -> list[dict[str, str]]:
    """Every renaming that permutes the Runs of a scope (each Run's StepRuns follow its Run)."""
    return [{**dict(zip(run_ids, perm, strict=True)),
             **{f"{r}:{E.step_key(i)}": f"{p}:{E.step_key(i)}" for r, p in zip(run_ids, perm, strict=True)
                for i in range(shape[0])}}
            for perm in itertools.permutations(run_ids)]


@pytest.mark.parametrize(("shape", "workflows"), [((1, ()), 2), ((1, ()), 3), ((2, ()), 2), ((2, ((0, 1),)), 2)],
                         ids=["2x1:-", "3x1:-", "2x2:-", "2x2:a>b"])
def test_every_image_of_a_state_under_run_permutations_has_one_canonical_key(shape: E.Shape, workflows: int) -> None:
    """Under the `runs` reduction, a state and every renaming of it (Runs permuted, each Run's steps under any
    automorphism of the shape) have one canonical key, which is one of the images; without it, Runs stay apart."""
    run_ids = tuple(r for r, _ in E.workflow_ids(workflows))
    swapping, apart = E.Symmetry(shape, run_ids, swap_runs=True), E.Symmetry(shape, run_ids, swap_runs=False)
    group = [{**perm, **{old: perm[new] for old, new in steps.items()}}
             for perm in run_permutations(run_ids, shape) for steps in E.run_renamings(shape, run_ids)]
    state = State(clock=E.INITIAL_CLOCK)
    for run_id, plan_id in E.workflow_ids(workflows):
        plan = E.build_plan(run_id, plan_id, E.shape_needs(shape), E.INITIAL_CLOCK)
        state = apply(state, {"name": "admit_workflow", "args": {"plan": plan}}).state
    alphabet = E.default_alphabet(shape[0] * workflows)
    level, seen, asymmetric = [state], 0, 0
    for _ in range(3):  # every state within three actions of admission
        nxt = []
        for s in level:
            key = E.abstract_state(s)
            images = [swapping.rename(key, names) for names in group]
            canonical = swapping.canonical(key)
            assert canonical in images
            assert all(swapping.canonical(image) == canonical for image in images)
            asymmetric += len({apart.canonical(image) for image in images}) > 1
            seen += 1
            nxt += [E.take(s, a)[0] for a in E.actions(s, alphabet)]
        level = nxt
    assert seen > 10 and asymmetric > 0  # some states do tell the Runs apart: the reduction has work



def test_manifest_pins_the_counts_for_k_1_to_3() -> None:
    report, _ = explored(3)
    assert not report.findings, "\n".join(f"{f.shape} {f.kind}: {f.message}" for f in report.findings[:5])
    counts = E.manifest_counts(report)  # the file itself is compared by tests/app/gate/test_artifacts.py
    manifest = load_manifest()
    pinned_totals = {k: v for k, v in manifest["totals"].items() if int(k) <= 3}
    pinned_shapes = {k: v for k, v in manifest["shapes"].items() if E.shape_size(k) <= 3}
    assert counts["totals"] == pinned_totals and counts["shapes"] == pinned_shapes, (
        "explorer counts changed; if intended, run `qlwf regenerate` and review the difference")


def test_incremental_and_full_invariant_evaluation_agree_on_every_state_of_k_3() -> None:
    report, _ = explored(3)  # explored with Config.cross_check: a disagreement is an `incremental` finding
    assert [f for f in report.findings if f.kind == "incremental"] == []
    assert report.cross_checked == report.distinct_states + report.checked_variants > 6000
    # the cross-check also drains every state whose LIVE-1 verdict the memo would have reused
    assert sum(s.drains for s in report.shapes) == report.distinct_states


def test_liveness_memo_drains_one_state_per_starting_identity() -> None:
    reused = E.explore(E.Config(max_steps=1))  # the one-step shape gets every choice (FULL)
    drained = E.explore(E.Config(max_steps=1, reuse_liveness=False))
    assert E.manifest_counts(reused) == E.manifest_counts(drained) and not reused.findings
    assert sum(s.drains for s in drained.shapes) == drained.distinct_states
    assert 0 < sum(s.drains for s in reused.shapes) < drained.distinct_states * 0.6


def test_liveness_memo_keeps_only_passing_verdicts_and_the_cross_check_catches_a_wrong_reuse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from qlwf.conformance.checkers.liveness import DrainReport

    verdicts = iter([(), ("planted: the Run stays running",), ()])

    def scripted_drain(state: State, **_: Any) -> DrainReport:
        return DrainReport(state.clock, 0, 0, (), next(verdicts), (), (), state)

    monkeypatch.setattr(search, "drain", scripted_drain)  # where the search looks it up
    shape = E.dag_shapes(1)[0]
    plan = E.build_plan(E.RUN_ID, E.PLAN_ID, E.shape_needs(shape), E.INITIAL_CLOCK)
    state = apply(State(clock=E.INITIAL_CLOCK), {"name": "admit_workflow", "args": {"plan": plan}}).state
    memo = E.LivenessMemo(lambda s: ("one identity for every state",))
    plain, crossed = E.Config(max_steps=1), E.Config(max_steps=1, cross_check=True)
    report = E.ShapeReport("1:-")
    assert memo.check(state, plain, report) == []  # drained, passed: remembered
    assert memo.check(state, plain, report) == []  # the memo answers: the planted failure is not drained
    found = memo.check(state, crossed, report)  # the cross-check drains it anyway and says the reuse was wrong
    assert [kind for kind, _, _ in found] == ["LIVE-1", "incremental"] and "planted" in found[1][1]
    fresh = E.LivenessMemo(lambda s: ("one identity for every state",))
    assert fresh.check(state, plain, report) == []
    assert report.drains == 3


def test_the_cross_check_reports_a_reuse_that_goes_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    real = speedups.reused
    calls = Counter[str]()

    def stale_lease_shape(kind: str, inputs: tuple[Any, ...], compute: Any) -> Any:
        # a reuse that answers from the wrong record: the second lease checked inherits a planted problem
        calls[kind] += 1
        if kind == "lease" and speedups._REUSE.get() is not None and calls[kind] > 1:
            return "planted stale answer"
        return real(kind, inputs, compute)

    monkeypatch.setattr(speedups, "reused", stale_lease_shape)
    shape = E.dag_shapes(1)[0]
    plain = E.explore(E.Config(max_steps=1, max_depth=4, shapes=(shape,)))
    crossed = E.explore(E.Config(max_steps=1, max_depth=4, shapes=(shape,), cross_check=True))
    assert {f.kind for f in plain.findings} == {"invariant"}  # the stale answer passes for a violation
    assert "incremental" in {f.kind for f in crossed.findings}
    first = next(f for f in crossed.findings if f.kind == "incremental")
    assert "planted stale answer" in first.message and "!= full []" in first.message


def test_reuse_is_by_record_identity() -> None:
    shape = E.dag_shapes(1)[0]
    plan = E.build_plan(E.RUN_ID, E.PLAN_ID, E.shape_needs(shape), E.INITIAL_CLOCK)
    state = apply(State(clock=E.INITIAL_CLOCK), {"name": "admit_workflow", "args": {"plan": plan}}).state
    (step_id, step), = state.step_runs.items()
    drifted = dataclasses.replace(state, step_runs={step_id: {**step, "status": "lost"}})
    with I.reusing_record_checks():
        assert I.check_invariants(state) == []
        # a new record object (a step's write) is evaluated again; the shared ones are reused
        assert "INV-6" in {v.invariant for v in I.check_invariants(drifted)}
        # the same record changed in place is not seen: the caller's promise is that this never happens
        step["status"] = "lost"
        assert "INV-6" not in {v.invariant for v in I.check_invariants(state)}
    assert "INV-6" in {v.invariant for v in I.check_invariants(state)}  # outside: evaluated in full


def test_jobs_do_not_change_the_report() -> None:
    cfg = E.Config(max_steps=3, max_depth=3)
    one, two = E.explore(cfg, jobs=1), E.explore(cfg, jobs=2)
    assert [s.shape for s in one.shapes] == [E.shape_name(s) for n in (1, 2, 3) for s in E.dag_shapes(n)]
    assert E.manifest_counts(one) == E.manifest_counts(two) and [s.shape for s in two.shapes] == \
        [s.shape for s in one.shapes]


def test_dispatch_order_hands_out_the_largest_shapes_first() -> None:
    cfg = E.Config(max_steps=3)
    work = [(s, cfg) for n in (1, 2, 3) for s in E.dag_shapes(n)]
    pinned = {name: c for name, c in load_manifest()["shapes"].items() if E.shape_size(name) <= 3}
    order = [E.shape_name(work[i][0]) for i in E.dispatch_order(work)]
    assert order[0] == "2:-" and sorted(order) == sorted(pinned)
    assert [pinned[n]["transitions"] for n in order] == sorted((c["transitions"] for c in pinned.values()),
                                                               reverse=True)
    unpinned = ((5, ((0, 1),)), cfg)  # a shape the manifest does not pin goes first (its work is unknown)
    assert E.dispatch_order([*work, unpinned])[0] == len(work)
    # a multi-workflow scope by its own pinned work, not by its shape's
    scopes = E.scope_work(E.Config(max_steps=1, workflow_scopes=("2x2:-", "2x1:-")))
    assert [E.scope_name(s, c.workflows) for s, c in scopes] == ["1:-", "2x2:-", "2x1:-"]
    assert E.dispatch_order(scopes) == [1, 2, 0]


def test_depth_limit_bounds_the_search() -> None:
    full = E.explore(E.Config(max_steps=1))
    shallow = E.explore(E.Config(max_steps=1, max_depth=3))
    assert shallow.depth == 3 < full.depth
    assert 1 < shallow.distinct_states < full.distinct_states


def explore_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    cmd_explore.register(parser.add_subparsers())
    return parser


def test_cli_json_prints_the_counts() -> None:
    out = io.StringIO()
    code = cmd_explore.run(argparse.Namespace(max_steps=1, depth=None, json=True), out)
    summary = json.loads(out.getvalue())
    assert code == 0
    expected = load_manifest()["totals"]["1"]
    for key in ("distinct_states", "transitions", "depth"):
        assert summary[key] == expected[key]
    assert summary["seconds"] > 0 and summary["violations"] == 0


def test_cli_table_and_parser() -> None:
    parser = explore_parser()
    args = parser.parse_args(["explore", "--max-steps", "1", "--depth", "2"])
    out = io.StringIO()
    assert args.func(args, out) == 0
    text = out.getvalue()
    assert "1:-" in text and "distinct states" in text and "states/s" in text


def test_cli_selected_explores_the_pinned_family_beside_every_smaller_shape() -> None:
    parser = explore_parser()
    args = parser.parse_args(["explore", "--max-steps", "1", "--selected", "5", "--depth", "3", "--json"])
    out = io.StringIO()
    assert args.func(args, out) == 0
    shapes = [row["shape"] for row in json.loads(out.getvalue())["per_shape"]]
    assert shapes == [E.shape_name(s) for s in (*E.dag_shapes(1), *E.SELECTED[5][1](5))]
    with pytest.raises(SystemExit):
        parser.parse_args(["explore", "--max-steps", "1", "--selected", "4"])  # no such family


@pytest.mark.parametrize(("name", "canonical"), [
    ("2:a>b", "2:a>b"), ("2:b>a", "2:a>b"), ("3:b>c", "3:a>b"), ("3:c>a,c>b", "3:a>b,a>c"), ("2:-", "2:-"),
    (" 3:a>b , b>c ", "3:a>b,b>c"), ("3:a>b,a>b", "3:a>b")])
def test_a_shape_is_named_as_the_table_names_it_or_by_any_relabelling(name: str, canonical: str) -> None:
    shape = E.parse_shape(name)
    assert E.shape_name(shape) == canonical and shape in E.dag_shapes(shape[0])


@pytest.mark.parametrize(("name", "why"), [
    ("2:a>b,b>a", "has a cycle"), ("3:a>b,b>c,c>a", "has a cycle"), ("3:a>d", "'a>d' in '3:a>d' is not an edge"),
    ("2:a>a", "is not an edge"), ("2:ab", "is not an edge"), ("7:-", "1 <= N <= 6"), ("0:-", "1 <= N <= 6"),
    ("a>b", "expected N:EDGES"), ("", "expected N:EDGES")])
def test_a_name_of_no_shape_says_why(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        E.parse_shape(name)


def test_cli_shape_explores_exactly_the_named_shapes_as_the_whole_scope_does() -> None:
    """The counts of each named shape are those the manifest pins for it within K = 1..4."""
    parser = explore_parser()
    args = parser.parse_args(["explore", "--shape", "2:b>a", "--shape", "1:-", "--shape", "2:a>b", "--json"])
    out = io.StringIO()
    assert args.func(args, out) == 0
    rows = json.loads(out.getvalue())["per_shape"]
    assert [row["shape"] for row in rows] == ["2:a>b", "1:-"]  # as given, each once
    pinned = load_manifest()["shapes"]
    for row in rows:
        for key in ("distinct_states", "transitions", "refusals", "depth"):
            assert row[key] == pinned[row["shape"]][key], (row["shape"], key)


@pytest.mark.parametrize("argv", [[], ["--shape", "1:-", "--max-steps", "1"], ["--shape", "1:-", "--selected", "5"]])
def test_cli_takes_either_a_scope_or_named_shapes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    parser = explore_parser()
    args = parser.parse_args(["explore", *argv])
    assert args.func(args, io.StringIO()) == 2
    assert "either --max-steps K (with any --selected) or --shape NAME" in capsys.readouterr().err


def test_cli_refuses_a_name_of_no_shape_as_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    parser = explore_parser()
    with pytest.raises(SystemExit) as bad:
        parser.parse_args(["explore", "--shape", "2:a>b,b>a"])
    assert bad.value.code == 2 and "argument --shape: '2:a>b,b>a' has a cycle" in capsys.readouterr().err


def test_cli_pinned_compares_every_count_with_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    parser = explore_parser()
    out = io.StringIO()
    args = parser.parse_args(["explore", "--shape", "2:a>b", "--shape", "1:-", "--pinned", "--jobs", "1"])
    assert args.func(args, out) == 0
    assert "every count as pinned (2 shape(s) or scope(s))" in out.getvalue()
    out = io.StringIO()
    args = parser.parse_args(["explore", "--shape", "2:a>b", "--pinned", "--depth", "4", "--jobs", "1"])
    assert args.func(args, out) == 1  # a bounded search is not the pinned one: a change detector that can fail
    assert "CHANGED FROM PINNED 2:a>b: {'distinct_states'" in out.getvalue()
    args = parser.parse_args(["explore", "--shape", "1:-", "--workflows", "2", "--full", "--pinned"])
    assert args.func(args, io.StringIO()) == 2  # nothing is pinned for two Runs with the full alphabet
    assert "pins no counts for 2x1:- with the full alphabet" in capsys.readouterr().err


def test_the_manifest_pins_the_full_alphabet_of_every_shape_up_to_k_3() -> None:
    full = load_manifest()["full"]
    assert set(full) == {E.shape_name(s) for n in (1, 2, 3) for s in E.dag_shapes(n)}
    one = E.explore(E.Config(max_steps=1, alphabet=E.full_alphabet))
    assert E.manifest_counts(one)["shapes"]["1:-"] == full["1:-"]


def test_cli_pin_writes_the_full_section_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from qlwf.gate import artifacts

    manifest = tmp_path / artifacts.EXPLORER_MANIFEST
    manifest.parent.mkdir(parents=True)
    before = load_manifest()
    manifest.write_text(json.dumps({k: v for k, v in before.items() if k != "full"}), encoding="utf-8")
    monkeypatch.setattr(artifacts, "source_root", lambda: tmp_path)
    parser = explore_parser()
    args = parser.parse_args(["explore", "--shape", "2:a>b", "--full", "--pin", "--jobs", "1", "--json"])
    out = io.StringIO()
    assert args.func(args, out) == 0
    after = json.loads(manifest.read_text(encoding="utf-8"))
    row = json.loads(out.getvalue())["per_shape"][0]
    assert list(after["full"]) == ["2:a>b"] and after["full"]["2:a>b"]["distinct_states"] == row["distinct_states"]
    assert after["full"]["2:a>b"] == before["full"]["2:a>b"]  # as the nightly-sized run pinned it
    assert {k: v for k, v in after.items() if k != "full"} == {k: v for k, v in before.items() if k != "full"}
    for refused in (["--shape", "1:-", "--pin"], ["--shape", "1:-", "--full", "--pin", "--depth", "3"]):
        args = parser.parse_args(["explore", *refused])
        assert args.func(args, io.StringIO()) == 2
    assert "--pin writes the full alphabet's one-Run counts" in capsys.readouterr().err
