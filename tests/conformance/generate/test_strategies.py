"""The plan strategies produce admissible plans of every advertised shape (qlwf.conformance.stateful.strategies)."""

from __future__ import annotations

import re

import networkx as nx
from hypothesis import find, given, settings
from qlwf.conformance.stateful.strategies import Needs, chains, dag_needs, diamonds, fans, large_dags, signed_plan
from qlwf.model.invariants import check_invariants
from qlwf.model.records import normalize_plan
from qlwf.model.state import State
from qlwf.model.system import apply

HARNESS_ID = re.compile(r"[a-z0-9][a-z0-9:-]*")
STEP_KEY = re.compile(r"[a-z][a-z0-9-]{0,62}")


def dag(needs: Needs) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(needs)
    g.add_edges_from((n, k) for k, ns in needs.items() for n in ns)
    return g


@settings(max_examples=40, deadline=None)
@given(needs=dag_needs())
def test_generated_plans_are_signed_admissible_and_in_the_harness_alphabet(needs: Needs) -> None:
    plan = signed_plan("run-0001", "plan-0001", needs, 1_000)
    assert normalize_plan(plan) == plan
    assert 1 <= len(plan["steps"]) <= 128
    assert all(STEP_KEY.fullmatch(s["stepKey"]) and HARNESS_ID.fullmatch(s["stepRunId"]) for s in plan["steps"])
    out = apply(State(clock=1_000), {"name": "admit_workflow", "args": {"plan": plan}})
    assert out.error is None and not check_invariants(out.state)


@settings(max_examples=20, deadline=None)
@given(chain=chains(), diamond=diamonds(), fan=fans())
def test_shapes_are_what_they_say(chain: Needs, diamond: Needs, fan: Needs) -> None:
    c = dag(chain)
    assert nx.is_directed_acyclic_graph(c) and (len(c) == 1 or nx.dag_longest_path_length(c) == len(c) - 1)
    d = dag(diamond)
    assert sum(1 for n in d if d.in_degree(n) == 0) == 1 and sum(1 for n in d if d.out_degree(n) == 0) == 1
    f = dag(fan)
    assert nx.is_directed_acyclic_graph(f) and max(dict(f.degree).values()) == len(f) - 1


def test_large_plans_appear_and_reach_the_limit() -> None:
    big = find(large_dags(), lambda n: len(n) == 128, settings=settings(database=None, derandomize=True))
    assert nx.is_directed_acyclic_graph(dag(big))
    assert find(dag_needs(), lambda n: len(n) > 8, settings=settings(database=None, derandomize=True))
