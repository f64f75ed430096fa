"""Stateful Hypothesis verification of the whole-system model (README §7).

The machine itself (qlwf.conformance.stateful.machine, importable by `qlwf campaign`) drives several
workflows at once through every command of commands.md §3; INV-1..31 are checked after every step,
every command against the table-shaped postconditions of qlwf.conformance.stateful.postconditions,
and at teardown the LIVE-1 drain (conformance/checkers/liveness.py) must terminalize every cancelling Run within
the bound and quiesce every other one. A failing (shrunk) behaviour is written as a self-contained
qlwf-trace@1 file to $QLWF_TRACE_DIR (default reports/counterexamples/).
"""

from __future__ import annotations

from qlwf.conformance.stateful.machine import COVERAGE
from support.stateful_run import run_machine


def test_workflow_machine() -> None:
    run_machine()


def test_every_table_row_is_reached_or_declared_unreachable() -> None:
    """Coverage witnesses: the ci campaign plus the explorer reach every reachable row of every table."""
    from qlwf.conformance.stateful.coverage import UNREACHABLE, all_rows, outcome_rows
    from support.explored import explored

    if not COVERAGE:  # run alone: the campaign of test_workflow_machine has not run in this process
        run_machine()
    _, by_explorer = explored(3)
    rows = all_rows()
    reached = (COVERAGE | by_explorer) & set(rows)
    never = sorted(set(rows) - reached - set(UNREACHABLE))
    assert not never, "rows never reached (add a scenario or declare them unreachable with a clause): " + ", ".join(
        f"{rows[r]}:{r}" for r in never)
    wrong = sorted(reached & set(UNREACHABLE))
    assert not wrong, f"rows declared unreachable were reached: {wrong}"
    assert set(UNREACHABLE) <= set(rows), f"stale unreachable names: {sorted(set(UNREACHABLE) - set(rows))}"
    missing_outcomes = sorted(outcome_rows() - COVERAGE - by_explorer)
    assert not missing_outcomes, f"command outcomes never produced: {missing_outcomes}"
    print(f"rows: {len(reached)} reached ({len(COVERAGE & set(rows))} by the ci campaign, "
          f"{len(by_explorer & set(rows))} by the explorer), {len(UNREACHABLE)} unreachable in v1")


def test_a_derandomized_run_does_not_depend_on_what_the_process_imported_before() -> None:
    """Before Q-113, 40 derandomized examples took 928 steps in a fresh process and 1,093 after the oracle's
    modules had been imported (Hypothesis reads constants from the checkout's imported modules)."""
    import json
    import subprocess
    import sys

    program = ("import importlib, json, sys\n"
               "for name in sys.argv[1:]: importlib.import_module(name)\n"
               "from qlwf.conformance.stateful.machine import WorkflowMachine, run_machine\n"
               "from qlwf.support.preload import load_every_module\n"
               "steps = []\n"
               "class Counted(WorkflowMachine):\n"
               "    coverage = None\n"
               "    def teardown(self):\n"
               "        steps.append(len(self.steps)); super().teardown()\n"
               "load_every_module()\n"
               "run_machine(Counted, max_examples=40, stateful_step_count=40, derandomize=True, database=None)\n"
               "print(json.dumps(steps))\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", program, *imports], capture_output=True, text=True,
                                      timeout=300, check=True).stdout)
            for imports in ([], ["qlwf.oracle.protocol", "qlwf.conformance.checkers.oracle_fuzz"])]
    assert runs[0] == runs[1]
