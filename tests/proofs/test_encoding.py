"""Direct unit tests of the proof encodings (proofs/domains.py, encoding.py, decode.py), beside the
end-to-end proofs of tests/proofs/test_proofs.py: the sorts are read from the model's tables, values
round-trip through them, Init decodes to the state the model admits, and decode/constraints are inverse."""

from __future__ import annotations

import itertools

import pytest
import z3
from qlwf.model import tables as T
from qlwf.proofs import decode
from qlwf.proofs.domains import dom
from qlwf.proofs.encoding import Encoding


@pytest.fixture(scope="module")
def enc() -> Encoding:
    return Encoding(3)


def test_the_sorts_are_the_tables_statuses(enc: Encoding) -> None:
    assert enc.d.step_status.values == tuple(enc.t.STEP_STATUSES) == tuple(T.STEP_STATUSES)
    assert enc.d.run_status.values == tuple(enc.t.RUN_STATUSES)
    assert enc.d.attempt_status.values == ("none", *enc.t.ATTEMPT_STATUSES)
    assert enc.d.reason.values == ("none", *T.CANCEL_REASONS)
    # a leased lease is live or expired at a given time; every other lease status is itself
    expected = ["absent", *itertools.chain.from_iterable(["live", "expired"] if s == "leased" else [s]
                                                         for s in T.LEASE_STATUSES)]
    assert list(enc.d.lease_state.values) == expected


def test_every_value_round_trips_through_its_sort(enc: Encoding) -> None:
    solver = z3.Solver()
    for domain in (enc.d.step_status, enc.d.attempt_status, enc.d.lease_state, enc.d.step_code, enc.d.text):
        x = domain.var(f"x_{domain.name}")
        for value in domain.values:
            solver.push()
            solver.add(x == domain(value))
            assert solver.check() == z3.sat
            assert domain.decode(solver.model().eval(x)) == value
            solver.pop()
        assert domain.isin(x, ["no such value"]).eq(z3.BoolVal(False))


def test_a_sort_is_declared_once_per_member_list() -> None:
    a, b = dom("TestSort", ["x", "y"]), dom("TestSort", ["x", "y"])
    c = dom("TestSort", ["x", "y", "z"])  # a mutated table: a fresh, suffixed sort
    assert a is b and c is not a and c.sort.name() != a.sort.name() and "z" in c and "z" not in a


def test_init_decodes_to_an_admitted_workflow(enc: Encoding) -> None:
    x = enc.fresh("init")
    solver = z3.Solver()
    solver.add(enc.init(x), enc.need_of([[False] * i for i in range(enc.n)]))  # three independent steps
    assert solver.check() == z3.sat
    state = decode.state(enc, solver.model(), x)
    assert state["run"]["status"] == "running"
    assert [s["status"] for s in state["steps"]] == ["ready"] * enc.n  # no needs: all ready at admission
    assert all(s["attempt"] is None for s in state["steps"])


def test_constraints_pin_exactly_the_decoded_state(enc: Encoding) -> None:
    x, y = enc.fresh("a"), enc.fresh("b")
    solver = z3.Solver()
    solver.add(enc.init(x))
    assert solver.check() == z3.sat
    decoded = decode.state(enc, solver.model(), x)
    pinned = z3.Solver()  # the state's constraints, and the same DAG (the need matrix is not part of a state)
    dag = [[j in s["needs"] for j in range(i)] for i, s in enumerate(decoded["steps"])]
    pinned.add(decode.constraints(enc, y, decoded), enc.need_of(dag))
    assert pinned.check() == z3.sat
    assert decode.state(enc, pinned.model(), y) == decoded
    # and nothing else: another status for step 0 contradicts the pin
    pinned.add(y.steps[0].st != enc.d.step_status(decoded["steps"][0]["status"]))
    assert pinned.check() == z3.unsat
