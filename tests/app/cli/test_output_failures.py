"""Output that cannot be written, and exceptions no command turned into a verdict (decisions Q-117).

Before, both ended in a traceback with exit 1, the code of a counterexample: `qlwf replay … > /dev/full`
said "divergence" to a CI script, and `check --json` on a full disk left a truncated report, or the
previous run's, under the name CI reads. Now an I/O error is one line and exit 74 (EX_IOERR), an
unexpected exception its traceback and exit 70 (EX_SOFTWARE), and a report is written whole or not at all.
"""

from __future__ import annotations

import errno
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from qlwf.cli import show as cmd_show
from qlwf.cli.entry import EXIT_INTERNAL, EXIT_IO, main
from qlwf.support import stdio

REPO = Path(__file__).resolve().parents[3]
TRACE = REPO / "conformance" / "traces" / "corpus" / "adr0226-dependency-readied.json"
FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")


def qlwf(*argv: str, stdout: int | None = subprocess.PIPE, file_size_limit: int | None = None
         ) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # CPython ignores SIGXFSZ: a write past the limit fails with EFBIG
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run([sys.executable, "-m", "qlwf.cli", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120, preexec_fn=limit, cwd=REPO)


@needs_dev_full
@pytest.mark.parametrize("argv", [["replay", str(TRACE), "--backend", "model"], ["traces", "check", str(TRACE)],
                                  ["explore", "--max-steps", "1"]])
def test_stdout_on_a_full_device_is_one_line_and_exit_74(argv: list[str]) -> None:
    with FULL.open("w") as full:
        done = qlwf(*argv, stdout=full.fileno())
    assert done.returncode == EXIT_IO, done.stderr
    assert done.stderr.splitlines()[-1] == (f"qlwf {argv[0]}: stopped by an I/O error, no verdict: "
                                            f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}")
    assert "Traceback" not in done.stderr


@needs_dev_full
def test_a_report_on_a_full_device_names_it() -> None:
    done = qlwf("show", str(TRACE), "--html", str(FULL))
    assert done.returncode == EXIT_IO and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith(f"No space left on device: '{FULL}'")


def test_a_report_past_the_file_size_limit_leaves_no_report_not_even_the_last_one(tmp_path: Path) -> None:
    report = tmp_path / "trace.html"
    report.write_text("<p>an earlier run's page</p>")
    done = qlwf("show", str(TRACE), "--html", str(report), file_size_limit=4096)  # the page is far larger
    assert done.returncode == EXIT_IO, done.stderr
    assert done.stderr.strip().endswith(f"[Errno {errno.EFBIG}] {os.strerror(errno.EFBIG)}: '{report}'")
    assert list(tmp_path.iterdir()) == [], "neither the stale report nor a partial one is left"


@pytest.mark.parametrize("flag", ["--json", "--junit"])
def test_a_gate_report_on_a_full_disk_is_exit_74_and_leaves_no_stale_report(
        flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "gate.out"
    report.write_text("an earlier run's passing report")

    def no_space(src: str, dst: str) -> None:  # the disk fills up as the report lands
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", no_space)
    assert main(["check", "--only", "spec-vectors", flag, str(report)]) == EXIT_IO
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"qlwf check: stopped by an I/O error, no verdict: [Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}: "
        f"'{report}'")
    assert list(tmp_path.iterdir()) == []


def test_a_report_is_replaced_whole_with_the_mode_a_new_file_gets(tmp_path: Path) -> None:
    target = tmp_path / "r.xml"
    target.write_text("old")
    old_umask = os.umask(0o027)
    try:
        stdio.write_report(target, "new")
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.xml"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_report_through_a_symbolic_link_lands_where_the_link_points(tmp_path: Path) -> None:
    real = tmp_path / "reports" / "junit.xml"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "junit.xml"
    link.symlink_to(real)
    stdio.write_report(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["junit.xml"]


def test_a_failed_rename_removes_the_temporary_file_and_the_old_report(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")

    def no_space(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(OSError) as raised:
        stdio.write_report(target, "new")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []


def test_an_unexpected_exception_is_exit_70_with_its_traceback(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a planted bug")

    monkeypatch.setattr(cmd_show, "build", broken)
    assert main(["show", str(TRACE)]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "a planted bug" in err
    assert err.splitlines()[-1] == (
        "qlwf show: internal error (a bug in qlwf), no verdict: ZeroDivisionError: a planted bug")
