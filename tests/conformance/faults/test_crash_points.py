"""docs/crash-points.md is a measured run: one trace re-measured on both backends must match its row,
and the table covers every writing command on both backends."""

from __future__ import annotations

import re

import pytest
from qlwf.conformance.faults.crash_points import DOC, measure_trace, trace_row
from qlwf.conformance.lockstep import runner
from qlwf.conformance.provision import PgServer
from qlwf.model import tables as T

pytestmark = pytest.mark.postgres

TRACE = "adr0228-page-isolates-drifted-workflow"


def test_the_committed_table_matches_a_fresh_measurement(pg_server: PgServer) -> None:
    text = DOC.read_text(encoding="utf-8")
    trace = next(t for t in runner.corpus_traces() if t.name == TRACE)
    sqlite, pg = measure_trace(trace, pg_server)
    commands = sum(1 for s in trace.steps if s["op"] == "command" and s["name"] in T.WRITING_COMMANDS)
    row = trace_row(TRACE, (commands, sqlite.crash_points, pg.crash_points, pg.round_trip_points))
    assert row in text.splitlines(), "docs/crash-points.md is stale: run python -m qlwf.conformance.faults.crash_points"


def test_every_writing_command_has_crash_points_on_postgres() -> None:
    rows = {m.group(1): tuple(int(m.group(i)) for i in range(2, 6)) for m in
            re.finditer(r"^\| (\w+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", DOC.read_text(encoding="utf-8"),
                        re.M)}
    assert set(T.WRITING_COMMANDS) <= set(rows)
    assert all(rows[name][2] > 0 for name in T.WRITING_COMMANDS)
    # every round trip is a crash point too: each command's first at least
    assert all(rows[name][3] >= rows[name][0] for name in T.WRITING_COMMANDS)
    assert all(rows[name][1] > 0 for name in T.WRITING_COMMANDS if name != "converge_cancellation_page")
