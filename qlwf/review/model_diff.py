"""`qlwf diff`: which behaviours does a model change add, remove or alter?

Both models are dumped by qlwf/review/behaviour.py, each in its own process (the two run
in parallel), over the same small scope: the explorer's DAG shapes of 1..K steps with its
alphabets. This module compares the dumps:

* tables: model/tables.py row by row (qlwf/review/table_diff.py);
* behaviour: over the explored identities (conformance/checkers/explore/) reachable in either model, every
  (state, choice) present in both whose outcome (ok status or error class/code/reason), fired
  rules (as a set) or next state differs; choices offered in one model only; and, where both
  models reached a state through the same concrete records, the full outcome and the records
  written. Differences are grouped by command, what differs and the rule rows that stopped or
  started firing; states reachable in one model only are counted under the group whose
  transition first leads to them. Each group gets a shortest witness from the initial state,
  recorded through the working tree's model as a `qlwf-trace` v1 file;
* proofs: the proof runner's result per property at one bound;
* oracle: every answer on the example snapshots and the corpus snapshots, and every step of the
  golden corpus traces run through both models (outcome, rules, records).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from qlwf.conformance.lockstep.state_diff import value_diff
from qlwf.conformance.traces.format import Trace, from_json, save
from qlwf.review.sources import DiffInputError, Tree, corpus_traces, oracle_inputs
from qlwf.review.table_diff import RowChange, diff_tables

Record = dict[str, Any]
INITIAL_CLOCK = 1_000_000  # conformance/checkers/explore/ INITIAL_CLOCK: every explored path starts there
MAX_LISTED_STATES = 100  # per side in --json; the counts are always complete


class DumpError(RuntimeError):
    """A model could not be evaluated (its tree fails to import, or a dump crashed)."""


DIFF_WORKFLOW_SCOPES = ("2x1:-",)  # two Runs of one step: where Runs meet at the page and under time steps


@dataclass
class Options:
    max_steps: int = 2
    shapes: list[str] | None = None
    proofs_bound: int | None = 2  # None: proofs not run
    proofs_only: list[str] | None = None  # fnmatch patterns of property names (the runner's `only`)
    oracle: bool = True
    witness_dir: Path = Path("reports/diff")
    # multi-workflow scopes ("2x1:-") explored besides the shapes, up to permutations of the Runs unless
    # swap_runs is off (the explorer's "runs" reduction: docs/explorer-reduction.md)
    workflow_scopes: tuple[str, ...] = DIFF_WORKFLOW_SCOPES
    swap_runs: bool = True


# ------------------------------------------------------------------------------------------------
# Running the dumper
def run_dumps(jobs: list[tuple[Tree, Record]]) -> list[Record]:
    """One dumper process per job, all at once; every child is reaped on every exit path."""
    with tempfile.TemporaryDirectory(prefix="qlwf-diff-") as tmp:
        procs: list[tuple[Tree, Path, subprocess.Popen[bytes]]] = []
        try:
            for i, (tree, request) in enumerate(jobs):
                req_path, out_path = Path(tmp) / f"req-{i}.json", Path(tmp) / f"out-{i}.json"
                req_path.write_bytes(orjson.dumps({"tree": str(tree.root), **request}))
                env = {**os.environ, "PYTHONHASHSEED": "0"}  # both sides iterate sets alike
                cmd = [sys.executable, "-m", "qlwf.review.behaviour", str(req_path), str(out_path)]
                procs.append((tree, out_path, subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                                               stderr=subprocess.PIPE)))
            results = []
            for tree, out_path, proc in procs:
                _, err = proc.communicate()
                body = orjson.loads(out_path.read_bytes()) if out_path.is_file() else None
                if body is None or "error" in body:
                    detail = body["error"] if body else err.decode(errors="replace").strip()[-800:]
                    trace = body.get("traceback", "") if body else ""
                    raise DumpError(f"the {tree.label} model could not be evaluated: {detail}\n{trace}".rstrip())
                results.append(body["ok"])
            return results
        finally:
            for _, _, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()


# ------------------------------------------------------------------------------------------------
# Behaviour comparison
@dataclass
class Member:
    shape: str
    node: str
    label: str
    depth: int
    base: list[Any] | None  # the edge: [label, step, outcome, rules, next, outcome digest, next snapshot digest]
    head: list[Any] | None


@dataclass
class Group:
    """Differences of one command with the same aspects and outcome change; when the outcome is the
    same, also the same rule rows stopping and starting to fire (then they are what changed)."""

    command: str
    aspects: tuple[str, ...]
    outcome_change: tuple[str, str] | None
    rule_delta: tuple[tuple[str, ...], tuple[str, ...]] | None  # part of the key only without an outcome change
    members: list[Member] = field(default_factory=list)
    states_only_base: int = 0
    states_only_head: int = 0
    witness: Record | None = None

    def _rules(self, side: int) -> tuple[list[str], list[str]]:
        """(rows in every member's delta, rows in some members' delta only) for side 0 removed / 1 added."""
        deltas = [set(_rule_delta(m)[side]) for m in self.members]
        always = set.intersection(*deltas) if deltas else set()
        return sorted(always), sorted(set.union(*deltas) - always) if deltas else []

    @property
    def rules_removed(self) -> list[str]:
        return self._rules(0)[0]

    @property
    def rules_added(self) -> list[str]:
        return self._rules(1)[0]

    def title(self) -> str:
        parts = [f"`{self.command}`: {', '.join(self.aspects)} differ"]
        if self.outcome_change:
            parts.append(f"outcome {self.outcome_change[0]} → {self.outcome_change[1]}")
        if self.rules_removed:
            parts.append("no longer fires " + ", ".join(f"`{r}`" for r in self.rules_removed))
        if self.rules_added:
            parts.append("now fires " + ", ".join(f"`{r}`" for r in self.rules_added))
        return "; ".join(parts)

    def to_json(self) -> Record:
        removed_some, added_some = self._rules(0)[1], self._rules(1)[1]
        return {"command": self.command, "aspects": list(self.aspects),
                "outcomeChange": list(self.outcome_change) if self.outcome_change else None,
                "rulesRemoved": self.rules_removed, "rulesAdded": self.rules_added,
                "rulesRemovedInSome": removed_some, "rulesAddedInSome": added_some,
                "transitions": len(self.members), "shapes": sorted({m.shape for m in self.members}),
                "statesOnlyInBase": self.states_only_base, "statesOnlyInHead": self.states_only_head,
                "title": self.title(), "witness": self.witness}


def _rule_delta(m: Member) -> tuple[tuple[str, ...], tuple[str, ...]]:
    b = set(m.base[3]) if m.base is not None else set()
    h = set(m.head[3]) if m.head is not None else set()
    return tuple(sorted(b - h)), tuple(sorted(h - b))


def outcome_text(summary: list[Any] | None) -> str:
    if summary is None:
        return "time step"
    if summary[0] == "crash":
        return f"crash {summary[1]}"
    if summary[0] == "ok":
        return f"ok {summary[1]}" if summary[1] else "ok"
    return f"{summary[1]} {summary[3]} ({summary[2]})"


def _command_of(label: str) -> str:
    return label.split("{", 1)[0].split(":", 1)[0]


def _edges_by_label(edges: list[list[Any]]) -> dict[str, list[list[Any]]]:
    by: dict[str, list[list[Any]]] = defaultdict(list)
    for e in edges:
        by[e[0]].append(e)
    return by


def _group_key(member: Member) -> tuple[Any, ...]:
    b, h = member.base, member.head
    command = _command_of(member.label)
    if b is None or h is None:
        return (command, (f"offered only in {'head' if b is None else 'base'}",), None, None)
    aspects = []
    if b[2] != h[2]:
        aspects.append("outcome")
    if b[3] != h[3]:
        aspects.append("rules")
    if b[4] != h[4]:
        aspects.append("next state")
    if not aspects:
        aspects.append("records written" if b[6] != h[6] else "result")
    if b[2] != h[2]:
        return (command, tuple(aspects), (outcome_text(b[2]), outcome_text(h[2])), None)
    return (command, tuple(aspects), None, _rule_delta(member))


@dataclass
class BehaviourDiff:
    groups: list[Group]
    compared_states: int
    compared_transitions: int
    states_base: int
    states_head: int
    only_base: dict[str, list[str]]
    only_head: dict[str, list[str]]
    listed: dict[str, list[Record]] = field(default_factory=dict)  # side → the shallowest such states

    @property
    def identical(self) -> bool:
        return not self.groups and not any(self.only_base.values()) and not any(self.only_head.values())


def compare_behaviour(base: dict[str, Record], head: dict[str, Record]) -> BehaviourDiff:
    members: list[Member] = []
    compared_states = compared_transitions = 0
    only_base: dict[str, list[str]] = {}
    only_head: dict[str, list[str]] = {}
    for shape in sorted(set(base) | set(head)):
        b = base.get(shape, {"nodes": {}, "edges": {}})
        h = head.get(shape, {"nodes": {}, "edges": {}})
        only_base[shape] = [k for k in b["nodes"] if k not in h["nodes"]]
        only_head[shape] = [k for k in h["nodes"] if k not in b["nodes"]]
        for key, h_node in h["nodes"].items():
            if key not in b["nodes"]:
                continue
            b_node = b["nodes"][key]
            compared_states += 1
            same_records = b_node[3] == h_node[3]
            b_by, h_by = _edges_by_label(b["edges"].get(key, [])), _edges_by_label(h["edges"].get(key, []))
            for label in list(h_by) + [lb for lb in b_by if lb not in h_by]:
                bs, hs = b_by.get(label, []), h_by.get(label, [])
                for i in range(max(len(bs), len(hs))):
                    be = bs[i] if i < len(bs) else None
                    he = hs[i] if i < len(hs) else None
                    compared_transitions += be is not None and he is not None
                    differs = be is None or he is None or be[2:5] != he[2:5] or (
                        same_records and (be[5], be[6]) != (he[5], he[6]))
                    if differs:
                        members.append(Member(shape, key, label, min(b_node[0], h_node[0]), be, he))
    groups: dict[tuple[Any, ...], Group] = {}
    where: dict[tuple[str, str, str], Group] = {}
    for m in sorted(members, key=lambda m: (m.depth, m.shape, m.node, m.label)):
        k = _group_key(m)
        g = groups.setdefault(k, Group(*k))
        g.members.append(m)
        where[(m.shape, m.node, m.label)] = g
    ordered = sorted(groups.values(), key=lambda g: (g.command, g.aspects, g.outcome_change or (), g.rule_delta or ()))
    for side, only in (("base", only_base), ("head", only_head)):
        dumps = base if side == "base" else head
        other = head if side == "base" else base
        for shape, keys in only.items():
            for key in keys:
                entry = _entry_group(dumps[shape]["nodes"], other.get(shape, {"nodes": {}})["nodes"], key, shape,
                                     where)
                if entry is not None:
                    if side == "base":
                        entry.states_only_base += 1
                    else:
                        entry.states_only_head += 1
    listed = {"base": _listed(base, only_base), "head": _listed(head, only_head)}
    return BehaviourDiff(ordered, compared_states, compared_transitions,
                         sum(len(v["nodes"]) for v in base.values()), sum(len(v["nodes"]) for v in head.values()),
                         only_base, only_head, listed)


def _listed(dumps: dict[str, Record], only: dict[str, list[str]]) -> list[Record]:
    rows = [{"shape": shape, "depth": dumps[shape]["nodes"][k][0], "state": dumps[shape]["nodes"][k][5]}
            for shape, keys in only.items() for k in keys]
    return sorted(rows, key=lambda r: (r["depth"], r["shape"], r["state"]))[:MAX_LISTED_STATES]


def _entry_group(nodes: dict[str, list[Any]], other: dict[str, list[Any]], key: str, shape: str,
                 where: dict[tuple[str, str, str], Group]) -> Group | None:
    """The group of the transition by which the BFS first left the states both models reach."""
    cur = key
    while True:
        node = nodes[cur]
        parent = node[1]
        if parent is None:
            return None
        if parent in other:
            return where.get((shape, parent, node[4]))
        cur = parent


def path_to(nodes: dict[str, list[Any]], key: str) -> list[Record]:
    steps: list[Record] = []
    cur: str | None = key
    while cur is not None and nodes[cur][1] is not None:
        steps.append(nodes[cur][2])
        cur = nodes[cur][1]
    return steps[::-1]


def witness_steps(group: Group, base: dict[str, Record], head: dict[str, Record]) -> list[Record]:
    """The group's shallowest member: the path to its state in the model that has the transition
    (the working tree's when both do), then that transition."""
    m = group.members[0]
    side, edge = (head, m.head) if m.head is not None else (base, m.base)
    if edge is None:  # a group member is a transition of one model at least: it has an edge on some side
        raise ValueError(f"group member {m.shape} {m.node} has a transition in neither model")
    return [*path_to(side[m.shape]["nodes"], m.node), edge[1]]


# ------------------------------------------------------------------------------------------------
# Proofs and oracle
def compare_proofs(base: list[Record], head: list[Record]) -> list[Record]:
    b = {r["name"]: r for r in base}
    h = {r["name"]: r for r in head}
    out = []
    for name in list(h) + [n for n in b if n not in h]:
        br, hr = b.get(name), h.get(name)
        if br is None or hr is None or br["result"] != hr["result"]:
            out.append({"property": name, "base": br["result"] if br else "absent",
                        "head": hr["result"] if hr else "absent", "detail": (hr or br or {}).get("detail", "")})
    return out


def compare_corpus(traces: list[Record], base: Record, head: Record) -> list[Record]:
    """Per corpus trace whose steps differ: the first differing step and how many differ."""
    out = []
    for t in traces:
        b, h = base.get(t["name"], []), head.get(t["name"], [])
        differing = [i for i in range(max(len(b), len(h))) if i >= len(b) or i >= len(h) or b[i] != h[i]]
        if not differing:
            continue
        i = differing[0]
        step = t["steps"][i]
        bs, hs = (b[i] if i < len(b) else None), (h[i] if i < len(h) else None)
        what = [name for name, j in (("outcome", 1), ("rules", 2), ("state", 3)) if bs is None or hs is None
                or bs[j] != hs[j]]
        out.append({"trace": t["name"], "file": t["file"], "step": i, "command": _step_text(step),
                    "differs": what, "base": outcome_text(bs[0]) if bs else "absent",
                    "head": outcome_text(hs[0]) if hs else "absent", "differingSteps": len(differing),
                    "baseRules": bs[2] if bs else [], "headRules": hs[2] if hs else []})
    return out


def answer_text(answer: Record | None) -> str:
    if answer is None:
        return "absent"
    if "error" in answer:
        e = answer["error"]
        return f"{e['class']} {e['code']} {e['reason']}"
    if "crash" in answer:
        return f"crash: {answer['crash']}"
    return "resolution"


def compare_oracle(base: Record, head: Record) -> list[Record]:
    out = []
    for key in list(head) + [k for k in base if k not in head]:
        b, h = base.get(key), head.get(key)
        if orjson.dumps(b) == orjson.dumps(h):
            continue
        fields = value_diff(b, h) if b is not None and h is not None else []
        out.append({"input": key, "base": answer_text(b), "head": answer_text(h),
                    "fields": [{"path": f.path, "base": f.model, "head": f.backend} for f in fields[:6]]})
    return out


# ------------------------------------------------------------------------------------------------
# The whole diff
@dataclass
class DiffReport:
    base: Tree
    head: Tree
    options: Options
    tables: list[RowChange]
    behaviour: BehaviourDiff
    proofs: list[Record] | None  # None: not run
    proof_count: tuple[int, int]
    proof_results: tuple[dict[str, int], dict[str, int]]  # per side: how many properties per result
    oracle: list[Record] | None
    oracle_count: int
    corpus: list[Record] | None = None
    corpus_count: int = 0
    seconds: float = 0.0

    @property
    def identical(self) -> bool:
        return (not self.tables and self.behaviour.identical and not self.proofs and not self.oracle
                and not self.corpus)

    def to_json(self) -> Record:
        b = self.behaviour
        return {
            "base": self.base.label, "head": self.head.label, "identical": self.identical,
            "scope": {"maxSteps": self.options.max_steps, "shapes": self.options.shapes,
                      "workflowScopes": list(self.options.workflow_scopes), "swapRuns": self.options.swap_runs,
                      "proofBound": self.options.proofs_bound, "proofsOnly": self.options.proofs_only},
            "tables": [c.to_json() for c in self.tables],
            "behaviour": {"statesBase": b.states_base, "statesHead": b.states_head,
                          "comparedStates": b.compared_states, "comparedTransitions": b.compared_transitions,
                          "statesOnlyInBase": sum(len(v) for v in b.only_base.values()),
                          "statesOnlyInHead": sum(len(v) for v in b.only_head.values()),
                          "statesOnly": b.listed,
                          "groups": [g.to_json() for g in b.groups]},
            "proofs": None if self.proofs is None else {"properties": list(self.proof_count),
                                                        "results": list(self.proof_results), "changed": self.proofs},
            "oracle": None if self.oracle is None else {"inputs": self.oracle_count, "changed": self.oracle},
            "corpus": None if self.corpus is None else {"traces": self.corpus_count, "changed": self.corpus},
            "seconds": round(self.seconds, 2),
        }


def check_shapes(opts: Options) -> None:
    """Shape names are the explorer's (the running installation's, which both dumpers use)."""
    from qlwf.conformance.checkers.explore import dag_shapes, parse_scope, shape_name

    known = {shape_name(s) for n in range(1, opts.max_steps + 1) for s in dag_shapes(n)}
    unknown = sorted(set(opts.shapes or ()) - known)
    if unknown:
        raise DiffInputError(f"no DAG shape of 1..{opts.max_steps} steps is named {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
    for name in opts.workflow_scopes:
        try:
            parse_scope(name)
        except ValueError as e:
            raise DiffInputError(str(e)) from None


def _results(results: list[Record]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    return dict(sorted(counts.items()))


def _request(opts: Options, inputs: list[Record] | None, traces: list[Record] | None) -> Record:
    req: Record = {"tables": True, "explore": {"max_steps": opts.max_steps, "shapes": opts.shapes,
                                               "workflow_scopes": list(opts.workflow_scopes),
                                               "swap_runs": opts.swap_runs}}
    if inputs is not None:
        req["oracle"] = inputs
    if traces is not None:
        req["corpus"] = traces
    if opts.proofs_bound is not None:
        req["proofs"] = {"bound": opts.proofs_bound, "only": opts.proofs_only}
    return req


def diff(base: Tree, head: Tree, opts: Options) -> DiffReport:
    import time
    start = time.perf_counter()
    check_shapes(opts)
    inputs = oracle_inputs(head.root) if opts.oracle else None
    traces = corpus_traces(head.root) if opts.oracle else None
    b, h = run_dumps([(base, _request(opts, inputs, traces)), (head, _request(opts, inputs, traces))])
    behaviour = compare_behaviour(b["explore"], h["explore"])
    report = DiffReport(base, head, opts, diff_tables(b["tables"], h["tables"]), behaviour,
                        compare_proofs(b["proofs"], h["proofs"]) if "proofs" in b else None,
                        (len(b.get("proofs", [])), len(h.get("proofs", []))),
                        (_results(b.get("proofs", [])), _results(h.get("proofs", []))),
                        compare_oracle(b["oracle"], h["oracle"]) if inputs is not None else None,
                        len(inputs or []),
                        compare_corpus(traces, b["corpus"], h["corpus"]) if traces is not None else None,
                        len(traces or []))
    if behaviour.groups:
        write_witnesses(report, b["explore"], h["explore"])
    report.seconds = time.perf_counter() - start
    return report


def write_witnesses(report: DiffReport, base: dict[str, Record], head: dict[str, Record]) -> None:
    groups = report.behaviour.groups
    paths = [witness_steps(g, base, head) for g in groups]
    rec_base, rec_head = run_dumps([
        (report.base, {"record": paths, "initial_clock": INITIAL_CLOCK}),
        (report.head, {"record": paths, "initial_clock": INITIAL_CLOCK, "record_full": True})])
    directory = report.options.witness_dir
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("diff-[0-9][0-9]-*.json"):  # an earlier run's witnesses: never mix two reports
        stale.unlink()
    for n, (g, steps, rb, rh) in enumerate(zip(groups, paths, rec_base["record"], rec_head["record"], strict=True), 1):
        rows = []
        first = None
        for i, (step, sb, sh) in enumerate(zip(steps, rb["steps"], rh["steps"], strict=False)):
            differs = (sb["outcome"], sorted(sb["rules"]), sb["snapshot"]) != (
                sh["outcome"], sorted(sh["rules"]), sh["snapshot"])
            if differs and first is None:
                first = i
            rows.append({"step": i, "command": _step_text(step), "base": outcome_text(sb["outcome"]),
                         "head": outcome_text(sh["outcome"]), "baseRules": sb["rules"], "headRules": sh["rules"],
                         "differs": differs})
        m = g.members[0]
        name = f"diff-{n:02d}-{g.command.replace('_', '-')}"
        description = (f"qlwf diff witness {n} (shape {m.shape}): {g.title()}. Recorded through the working "
                       f"tree's model; the base ({report.base.label}) first differs at step "
                       f"{first if first is not None else '(none)'}")
        path = directory / f"{name}.json"
        if rh["trace"] is not None:
            t = from_json(rh["trace"], name)
            save(Trace(description, t.initial_clock, t.steps, name), path)
        else:  # the working tree's model crashes on the path: an unrecorded (inputs only) trace
            save(Trace(description, INITIAL_CLOCK, steps, name), path)
        g.witness = {"file": str(path), "shape": m.shape, "steps": rows, "firstDifference": first,
                     "show": f"qlwf show {path}", "replay": f"qlwf replay {path} --backend model"}


def _step_text(step: Record) -> str:
    if step["op"] == "advance_time":
        return f"advance_time +{step['deltaMs']} ms"
    args = step["args"]
    shown = []
    for k, v in args.items():
        if k in ("plan", "binding", "actor"):
            continue
        if isinstance(v, str) and len(v) > 24:
            v = v[:14] + "…"
        shown.append(f"{k}={v}")
    return f"{step['name']}({', '.join(shown)})"
