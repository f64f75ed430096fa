"""Progress reporting on stderr: a live bar on a terminal, plain lines in CI and pipes."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from qlwf.support.progress import Progress, interactive


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_bar_rewrites_one_line_and_ends_it() -> None:
    out = Tty()
    bar = Progress("conform sqlite", 4, out, live=True)
    for _ in range(4):
        bar.advance(1, 10)
    bar.close()
    text = out.getvalue()
    assert text.startswith("\r[") and text.endswith("\n") and text.count("\n") == 1
    assert "[########################] conform sqlite: 4/4 traces, 40 steps" in text


def test_plain_lines_are_throttled_and_the_last_one_is_complete() -> None:
    out = io.StringIO()
    bar = Progress("conform sqlite", 100, out, live=False, plain_every=3600)
    for _ in range(100):
        bar.advance(1, 2)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # the first advance, then the closing line
    assert lines[-1].startswith("conform sqlite: 100/100 traces, 200 steps")


@pytest.mark.parametrize(("ci", "tty", "live"), [("true", True, False), ("", True, True), ("", False, False)])
def test_live_only_for_a_person_at_a_terminal(monkeypatch: pytest.MonkeyPatch, ci: str, tty: bool,
                                              live: bool) -> None:
    monkeypatch.setenv("CI", ci)
    assert interactive(Tty() if tty else io.StringIO()) is live


def test_conform_reports_progress_on_stderr_and_the_verdict_on_stdout() -> None:
    out = subprocess.run([sys.executable, "-m", "qlwf.cli", "conform", "--traces", "3", "--seed", "5"],
                         capture_output=True, text=True, timeout=120, check=False, env={**os.environ, "CI": "true"})
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines()[-1].startswith("conform sqlite: 3/3 traces")
    assert out.stdout.splitlines()[-1].startswith("conform sqlite: PASS")
