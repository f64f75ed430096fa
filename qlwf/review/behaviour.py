"""Dump one model's behaviour as JSON, in a process whose `qlwf.model` is another tree's.

    python -m qlwf.review.behaviour REQUEST.json OUT.json

REQUEST names the tree and what to dump: `explore` (K and optional shape names), `tables`,
`oracle` (a list of {id, fn, input}), `corpus` (traces whose inputs to run), `proofs` (a
bound) and `record` (step lists to run). The dumper is the running installation's code; of the
mapped tree it uses only the model's stable entry points (system.apply / advance_time,
state.State, tables, oracle.consult, errors, and what the explorer imports) and, for proofs,
`proofs.runner.run`. The explorer's alphabet and state abstraction (conformance/checkers/explore/) are the
running installation's, over the mapped model, so both sides of a diff are explored with the
same choices and the same state identity.

Exploration output, per shape: `nodes` {key: [depth, parent key, incoming step, snapshot digest,
incoming label, identity text]} and `edges` {key: [[label, step, outcome, rules, next key,
outcome digest, next snapshot digest]]}.
A key is a digest of the explorer's explored identity (symmetry-reduced); a label is the step
rewritten into that identity's frame (StepRun names after the symmetry, attempts by their StepRun
and ordinal, workers as the lease's holder or the other one, time steps by kind), so the same
choice carries the same label in both models whatever path reached the state.
"""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from qlwf.conformance.checkers.model_import import use_tree

Record = dict[str, Any]
ROOT = "init"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def snapshot_digest(state: Any) -> str:
    # orjson keeps each record's key order, so a change of key order is a difference, as in conformance.
    return _digest(orjson.dumps(state.snapshot()))


def outcome_summary(outcome: Any) -> list[Any] | None:
    if outcome is None:
        return None
    if outcome.error is not None:
        e = outcome.error
        return ["error", e.error_class, e.code, e.reason]
    result = outcome.result
    return ["ok", result.get("status") if isinstance(result, dict) else None]


def crash(e: Exception) -> list[Any]:
    return ["crash", f"{type(e).__name__}: {e}"[:200]]


def outcome_digest(outcome: Any) -> str | None:
    if outcome is None:
        return None
    body = {"ok": outcome.result} if outcome.error is None else {"error": outcome.error.to_json()}
    return _digest(orjson.dumps(body))


class Explorer:
    """Breadth-first search over the explored identities of one shape (no invariant checks: the
    diff compares behaviour; `qlwf explore` checks invariants)."""

    def __init__(self, x: ModuleType, system: ModuleType, state_mod: ModuleType) -> None:
        self.x, self.system, self.State = x, system, state_mod.State
        self.identity: dict[str, str] = {}  # key → the explorer's identity, as text

    def frame(self, state: Any, symmetry: Any) -> tuple[str, dict[str, str]]:
        abstract = self.x.collapse(self.x.detailed_state(state))
        names = symmetry.renaming(abstract)
        key = repr(abstract if symmetry.trivial else symmetry.rename(abstract, names))
        self.identity[_digest(key.encode())] = key
        return _digest(key.encode()), names

    def label(self, state: Any, step: Record, names: dict[str, str]) -> str:
        if step["op"] == "advance_time":
            _leases, deadlines = self.x._timers(state)
            kind = "deadlines" if deadlines and step["deltaMs"] == max(deadlines) - state.clock else "expire"
            return f"advance_time:{kind}"
        args = dict(step["args"])
        attempts = {a["id"]: f"{names.get(sid, sid)}#{i + 1}"
                    for sid, rows in self.x._attempts_by_step(state).items() for i, a in enumerate(rows)}
        if "runId" in args:
            args["runId"] = names.get(args["runId"], args["runId"])
        if "stepRunId" in args:
            args["stepRunId"] = names.get(args["stepRunId"], args["stepRunId"])
        if "binding" in args:
            args["binding"] = f"binding of {args.get('stepRunId')}"
        if "plan" in args:
            run_id = args["plan"]["runId"]
            args["plan"] = "the admitted plan" if run_id == self.x.RUN_ID and len(state.runs) <= 1 else \
                f"the plan of {names.get(run_id, run_id)}"
        if "workerId" in args:
            lease = state.leases.get(step["args"].get("attemptId"))
            if lease is not None:
                args["workerId"] = "holder" if lease["workerId"] == args["workerId"] else "other"
        if "attemptId" in args:
            args["attemptId"] = attempts.get(args["attemptId"], args["attemptId"])
        return str(step["name"]) + json.dumps(args, sort_keys=True, separators=(",", ":"))

    def take(self, state: Any, step: Record) -> tuple[Any, Any]:
        if step["op"] == "advance_time":
            return self.system.advance_time(state, step["deltaMs"]), None
        outcome = self.system.apply(state, {"name": step["name"], "args": step["args"]})
        return outcome.state, outcome

    def shape(self, shape: Any, workflows: int = 1, swap_runs: bool = True, alphabet_name: str | None = None
              ) -> Record:
        """The explored graph of `workflows` Runs of the shape, admitted one after the other; with
        `swap_runs`, states are taken up to permutations of the Runs (the explorer's "runs" reduction)."""
        x = self.x
        ids = x.workflow_ids(workflows)
        # as the explorer's search chooses it: a named alphabet, or the one for every Run's steps together
        alphabet = (x.default_alphabet if alphabet_name is None else x.ALPHABETS[alphabet_name])(shape[0] * workflows)
        admits = [{"op": "command", "name": "admit_workflow",
                   "args": {"plan": x.build_plan(run_id, plan_id, x.shape_needs(shape), x.INITIAL_CLOCK)}}
                  for run_id, plan_id in ids]
        symmetry = x.Symmetry(shape, tuple(run_id for run_id, _ in ids), swap_runs)
        start = self.State(clock=x.INITIAL_CLOCK)
        nodes: dict[str, list[Any]] = {ROOT: [0, None, None, snapshot_digest(start), None, "before admission"]}
        edges: dict[str, list[list[Any]]] = {}
        queue: list[tuple[Any, str, int]] = [(start, ROOT, 0)]
        head = 0
        while head < len(queue):
            state, key, depth = queue[head]
            head += 1
            if len(state.runs) < workflows:  # the admissions come first, in order
                names = {} if key == ROOT else self.frame(state, symmetry)[1]
                choices = [admits[len(state.runs)]]
            else:
                names = self.frame(state, symmetry)[1]
                choices = [a.step for a in x.actions(state, alphabet)]
            out_edges = []
            for step in choices:
                try:
                    new, outcome = self.take(state, step)
                except Exception as e:  # a model that crashes on a choice: that is its behaviour there
                    out_edges.append([self.label(state, step, names), step, crash(e), [], key, None,
                                      nodes[key][3]])
                    continue
                new_key = key if new is state else self.frame(new, symmetry)[0] if new.runs else ROOT
                rules = sorted(outcome.rules) if outcome is not None else []
                out_edges.append([self.label(state, step, names), step, outcome_summary(outcome), rules, new_key,
                                  outcome_digest(outcome), snapshot_digest(new)])
                if new_key not in nodes:
                    nodes[new_key] = [depth + 1, key, step, out_edges[-1][6], out_edges[-1][0],
                                      self.identity.get(new_key, "")]
                    queue.append((new, new_key, depth + 1))
            edges[key] = out_edges
        return {"nodes": nodes, "edges": edges}


def explore(req: Record) -> Record:
    # The explorer is the running installation's (qlwf.conformance is never mapped); its absolute
    # `qlwf.model` imports resolve to the mapped tree, so it explores that tree's semantics.
    import qlwf.conformance.checkers.explore as x
    import qlwf.model.state as state_mod
    import qlwf.model.system as system

    k = req["max_steps"]
    shapes = [s for n in range(1, k + 1) for s in x.dag_shapes(n)]
    if req.get("shapes"):
        wanted = set(req["shapes"])
        shapes = [s for s in shapes if x.shape_name(s) in wanted]
    explorer = Explorer(x, system, state_mod)
    out = {x.shape_name(s): explorer.shape(s) for s in shapes}
    for name in req.get("workflow_scopes") or ():
        scope = x.parse_scope(name)
        out[scope.name] = explorer.shape(scope.shape, scope.workflows, req.get("swap_runs", True), scope.alphabet)
    return out


def tables() -> Record:
    import qlwf.model.tables as t
    from qlwf.review.table_diff import table_rows
    return table_rows(t)


def oracle(inputs: list[Record]) -> Record:
    from qlwf.model import oracle as o
    from qlwf.model.errors import QlwfError

    answers: Record = {}
    for item in inputs:
        try:
            a = o.consult(item["fn"], item["input"])
            answers[item["id"]] = {"resolution": a.resolution, "explanation": a.explanation}
        except QlwfError as e:
            answers[item["id"]] = {"error": e.to_json()}
        except Exception as e:  # a crash of the model on an input is an answer worth reporting
            answers[item["id"]] = {"crash": f"{type(e).__name__}: {e}"}
    return answers


def proofs(bound: int, only: list[str] | None) -> list[Record]:
    from qlwf.proofs import runner

    results = runner.run(runner.Options(bound=bound, only=only))
    return [{"name": r.name, "result": r.result, "detail": r.detail} for r in results]


def record(step_lists: list[list[Record]], initial_clock: int, full: bool) -> list[Record]:
    """Run each step list from the empty state; per step the outcome, rules and snapshot digest,
    and with `full` the trace recorded in the project's format (conformance/traces/format.py)."""
    from qlwf.model.state import State
    from qlwf.model.system import advance_time, apply

    out = []
    for steps in step_lists:
        state = State(clock=initial_clock)
        rows: list[Record] = []
        for step in steps:
            try:
                if step["op"] == "advance_time":
                    state, outcome = advance_time(state, step["deltaMs"]), None
                else:
                    outcome = apply(state, {"name": step["name"], "args": step["args"]})
                    state = outcome.state
            except Exception as e:  # reported as this model's answer to the step; the rest is not run
                rows.append({"outcome": crash(e), "rules": [], "snapshot": None})
                break
            rows.append({"outcome": outcome_summary(outcome), "rules": list(outcome.rules) if outcome else [],
                         "snapshot": snapshot_digest(state)})
        item: Record = {"steps": rows}
        if full:
            from qlwf.conformance.traces.format import Trace
            from qlwf.conformance.traces.format import record as record_trace
            try:
                item["trace"] = record_trace(Trace("", initial_clock, [dict(s) for s in steps])).to_json()
            except Exception:  # the model crashes on a step (reported in `steps`): keep the inputs only
                item["trace"] = None
        out.append(item)
    return out


def corpus(traces: list[Record]) -> Record:
    """Each trace's inputs run through the model: per step [outcome, outcome digest, rules, snapshot digest]."""
    from qlwf.conformance.traces.drift_mirror import corrupt_state
    from qlwf.model.state import State
    from qlwf.model.system import advance_time, apply

    out: Record = {}
    for t in traces:
        state = State(clock=t["initialClock"])
        rows: list[list[Any]] = []
        for step in t["steps"]:
            outcome = None
            try:
                if step["op"] == "advance_time":
                    state = advance_time(state, step["deltaMs"])
                elif step["op"] == "corrupt":
                    state = corrupt_state(state, step["kind"], step["key"], step["patch"])
                else:
                    outcome = apply(state, {"name": step["name"], "args": step["args"]})
                    state = outcome.state
            except Exception as e:  # reported as this model's answer to the step; the rest is not run
                rows.append([crash(e), None, [], None])
                break
            rows.append([outcome_summary(outcome), outcome_digest(outcome),
                         sorted(outcome.rules) if outcome else [], snapshot_digest(state)])
        out[t["name"]] = rows
    return out


def run(req: Record) -> Record:
    use_tree(Path(req["tree"]), ("qlwf.model", "qlwf.proofs") if req.get("proofs") else ("qlwf.model",))
    out: Record = {}
    if req.get("tables"):
        out["tables"] = tables()
    if req.get("oracle") is not None:
        out["oracle"] = oracle(req["oracle"])
    if req.get("corpus") is not None:
        out["corpus"] = corpus(req["corpus"])
    if req.get("explore"):
        out["explore"] = explore(req["explore"])
    if req.get("record") is not None:
        out["record"] = record(req["record"], req["initial_clock"], bool(req.get("record_full")))
    if req.get("proofs"):
        out["proofs"] = proofs(req["proofs"]["bound"], req["proofs"].get("only"))
    return out


def main(argv: list[str]) -> int:
    request_path, out_path = argv
    req = json.loads(Path(request_path).read_text(encoding="utf-8"))
    try:
        body: Record = {"ok": run(req)}
        code = 0
    except Exception as e:  # reported to the parent, which says which tree failed and how
        body = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
        code = 3
    Path(out_path).write_bytes(orjson.dumps(body))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
