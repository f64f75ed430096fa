"""Output paths are refused when the arguments are parsed (decisions Q-111): a run of minutes must not end
in a traceback, with exit 1, at the one write it was for, and with its results lost."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from qlwf.conformance.traces.corpus import CORPUS_DIR

from qlwf.cli.argtypes import output_dir, output_file
from qlwf.cli.entry import main


@pytest.fixture()
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    (tmp_path / "a-dir").mkdir()
    return tmp_path


# Each was a traceback at the end of the run before Q-111 (the campaign's after its deadline, exit 1).
@pytest.mark.parametrize(("argv", "message"), [
    (["check", "--quick", "--only", "spec-vectors", "--junit", "a-dir"], "cannot write 'a-dir': it is a directory"),
    (["check", "--quick", "--only", "spec-vectors", "--json", "a-file/r.json"],
     "cannot write 'a-file/r.json': 'a-file' exists and is not a directory"),
    (["campaign", "--minutes", "0.01", "--kinds", "oracle", "--out", "a-file"],
     "cannot write into 'a-file': 'a-file' exists and is not a directory"),
    (["campaign", "--minutes", "0.01", "--kinds", "oracle", "--out", "a-file/deeper/still"],
     "cannot write into 'a-file/deeper/still': 'a-file' is not a directory"),
    (["diff", "--base", "HEAD", "--witness-dir", "a-file"], "cannot write into 'a-file'"),
    (["prove", "--counterexamples", "a-dir"], "cannot write 'a-dir': it is a directory"),
    (["show", "nothing.json", "--html", "a-dir"], "cannot write 'a-dir': it is a directory"),
    (["show", "nothing.json", "--md", "a-file/x.md"], "cannot write 'a-file/x.md'"),
    (["traces", "export", "a-file", "--corpus"], "cannot write into 'a-file'"),
])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(
        places: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as refused:
        main(argv)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and message in err, err
    assert sorted(p.name for p in places.iterdir()) == ["a-dir", "a-file"]  # nothing ran, nothing was written


def test_a_path_that_can_be_made_is_accepted_and_not_made_yet(tmp_path: Path) -> None:
    deep = tmp_path / "new" / "deeper"
    assert output_dir(str(deep)) == str(deep) and output_file(str(deep / "r.json")) == str(deep / "r.json")
    assert output_dir(str(tmp_path)) == str(tmp_path)
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root passes every permission test: only the shape is checked")
def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(argparse.ArgumentTypeError, match="is not writable"):
        output_dir(str(locked / "out"))
    with pytest.raises(argparse.ArgumentTypeError, match="is not writable"):
        output_file(str(locked / "r.json"))


# Decisions Q-122: two reports named by one path were both written, the second over the first, so a CI job
# reading the JSON report found the JUnit XML (and the run had said nothing).
@pytest.mark.parametrize(("argv", "message"), [
    (["check", "--only", "spec-vectors", "--json", "r.out", "--junit", "./r.out"],
     "qlwf check: --json and --junit name the same file ('./r.out'): each report needs its own"),
    (["show", "TRACE", "--md", "page", "--html", "link-to-page"],
     "qlwf show: --md and --html name the same file ('link-to-page'): each report needs its own"),
])
def test_two_reports_on_one_path_are_refused_before_any_work(
        places: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    trace = CORPUS_DIR / "adr0226-dependency-readied.json"
    (places / "link-to-page").symlink_to(places / "page")  # a dangling link: the page is not written yet
    assert main([str(trace) if a == "TRACE" else a for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == message + "\n" and captured.out == ""
    assert sorted(p.name for p in places.iterdir()) == ["a-dir", "a-file", "link-to-page"], "nothing was written"
