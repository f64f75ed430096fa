"""impl/readonly.py `merge_by_run` (decisions Q-121): the audit's Run-by-Run read puts every row of a stream
in the part of its Run, in the stream's order, and no row of a run id that is not a workflow Run anywhere."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qlwf.impl.readonly import PART_KEYS, merge_by_run

IDS = st.text(alphabet="ab-1é", min_size=1, max_size=3)  # non-ASCII too: both readers order by code point


@given(st.lists(IDS, unique=True), st.lists(st.tuples(st.sampled_from(PART_KEYS[:4] + PART_KEYS[-2:]),
                                                      st.lists(IDS, max_size=12)), max_size=5))
def test_each_row_lands_in_its_runs_part_in_stream_order(run_ids: list[str],
                                                         streams: list[tuple[str, list[str]]]) -> None:
    run_ids = sorted(run_ids)
    # Each stream: rows ordered by run id, as the readers' ORDER BY run id gives them; ids of no workflow Run
    # (orphans, or Runs the query left out) fall anywhere between.
    rows = [(key, [(rid, {"n": i, "key": key, "runId": rid}) for i, rid in enumerate(sorted(ids))])
            for key, ids in streams if key != "runs"]
    parts = list(merge_by_run(((rid, {"id": rid}) for rid in run_ids), rows))
    assert [p["runs"] for p in parts] == [[{"id": rid}] for rid in run_ids]
    for part, rid in zip(parts, run_ids, strict=True):
        assert set(part) == set(PART_KEYS)
        for key in PART_KEYS:
            if key == "runs":
                continue
            want: list[dict[str, Any]] = [r for k, stream in rows if k == key for run, r in stream if run == rid]
            assert part[key] == want


@pytest.mark.parametrize(("runs", "rows"), [
    (["a", "b"], [("a", 1), ("b", 2), ("a", 3)]),  # a stream that goes back: its row would be skipped
    (["b", "a"], []),  # Runs out of order
    (["a", "a"], []),  # a Run twice
    (["A", "a"], [("a", 1), ("A", 2)]),  # case-insensitive order (a NOCASE column) is not code-point order
])
def test_rows_out_of_code_point_order_are_refused_not_misplaced(runs: list[str], rows: list[tuple[str, int]]) -> None:
    with pytest.raises(ValueError, match="not in code-point order"):
        list(merge_by_run(((r, {"id": r}) for r in runs), [("events", ((r, {"n": n}) for r, n in rows))]))
