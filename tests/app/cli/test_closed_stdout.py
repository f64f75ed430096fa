"""A reader of stdout that goes away (`qlwf … | head`) ends the command as SIGPIPE ends a pipeline's writer:
exit 141 and no traceback (decisions Q-114). Before, each ended in a BrokenPipeError traceback with exit 1,
which is the code of a divergence or a failed check."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv", [
    ["explore", "--max-steps", "1"],
    ["conform", "--traces", "2"],
    ["check", "--quick", "--only", "spec-vectors", "--jobs", "1"],
    ["prove", "--list"],
], ids=lambda argv: argv[0])
def test_a_closed_stdout_is_sigpipe_not_a_traceback(argv: list[str]) -> None:
    with subprocess.Popen([sys.executable, "-m", "qlwf.cli", *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the first line
        err = proc.stderr.read().decode()
        proc.wait(timeout=300)
    assert proc.returncode == 128 + signal.SIGPIPE, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_the_oracle_keeps_its_own_rule_a_closed_stdout_ends_it_normally() -> None:
    """qlwf oracle documents exit 0 when the reader closes stdout (its batch mode's normal end)."""
    with subprocess.Popen([sys.executable, "-m", "qlwf.cli", "oracle", "batch"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stdin.write(b'{"fn": "frontier", "input": {}}\n')
        proc.stdin.close()
        err = proc.stderr.read().decode()
        proc.wait(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err
