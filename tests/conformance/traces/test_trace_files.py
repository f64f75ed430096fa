"""A file that is not a readable qlwf trace is bad input for every command that reads one (decisions
Q-103): `qlwf replay` and `qlwf show` print one line and exit 2, `qlwf traces check` calls it invalid
(exit 2). Before, `replay` ended each of these in a traceback with exit 1, the code of a divergence,
and `traces check` and `show` in one on a nesting deeper than the decoder's recursion limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from qlwf.conformance.traces.corpus import CORPUS_DIR

from qlwf.cli.entry import main

CORPUS_TRACE = CORPUS_DIR / "adr0226-dependency-readied.json"
TRACE_HEAD = '{"format":"qlwf-trace","version":1,"initialClock":1,"steps":'
BAD_FILES: dict[str, tuple[Callable[[Path], object], str]] = {
    "deep nesting": (lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
                     "not JSON: the text nests deeper than the JSON decoder's limit"),
    "NaN": (lambda p: p.write_text('{"a": NaN}'), "not JSON: non-finite number NaN is not JSON"),
    # a repeated name means two things to two parsers (json.loads kept the last: this one replayed)
    "a repeated key": (lambda p: p.write_text(TRACE_HEAD + '[{"op":"command","op":"advance_time","deltaMs":5}]}'),
                       "not JSON: duplicate key 'op'"),
    # a real trace with an escaped lone surrogate in its plan; `replay` crashed writing its report
    "a lone surrogate": (lambda p: p.write_text(CORPUS_TRACE.read_text("utf-8").replace('"nightly"', '"\\ud800"', 1)),
                         "not JSON: a string holds the lone surrogate \\ud800"),
    "latin-1": (lambda p: p.write_bytes(b'{"a": "caf\xe9"}'), "unreadable: 'utf-8' codec"),
    "a 5000-digit integer": (lambda p: p.write_text('{"a": ' + "7" * 5000 + "}"), "not JSON: Exceeds the limit"),
    "a directory": (lambda p: p.mkdir(), "unreadable: [Errno 21]"),
    "no file": (lambda p: None, "unreadable: [Errno 2]"),
    "not a trace": (lambda p: p.write_text("{}"), "not a qlwf-trace document"),
    "an unknown command": (lambda p: p.write_text(TRACE_HEAD + '[{"op":"command","name":"nope","args":{}}]}'),
                           "step 0: 'nope' is not a command"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
@pytest.mark.parametrize("argv", [["replay", "{path}", "--backend", "model"], ["replay", "{path}", "--json"],
                                  ["show", "{path}"]])
def test_a_bad_trace_file_is_one_line_and_exit_2(case: str, argv: list[str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    make, message = BAD_FILES[case]
    path = tmp_path / "bad.json"
    make(path)
    assert main([a.format(path=path) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"qlwf {argv[0]}: {path}: ") and message in captured.err, captured.err


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_traces_check_calls_a_bad_file_invalid(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, message = BAD_FILES[case]
    path = tmp_path / "bad.json"
    make(path)
    assert main(["traces", "check", str(path)]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"INVALID {path}") and "0 ok, 0 wrong, 1 invalid" in out
    if case not in ("not a trace", "an unknown command"):  # the schema reports these, in its own words
        assert message in out, out
