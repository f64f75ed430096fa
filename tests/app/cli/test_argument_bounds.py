"""Counts given on the command line are whole numbers in a stated range: a value no run can use is bad
usage (exit 2, naming the option) before anything starts (decisions Q-128)."""

from __future__ import annotations

import argparse

import pytest
from qlwf.conformance.checkers.explore import MAX_SHAPE_STEPS, dag_shapes

from qlwf.cli import entry as cli
from qlwf.cli.argtypes import MAX_PROCESSES, integer, processes


def parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser(cli.command_of(argv)).parse_args(argv)


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as bad:
        parse(argv)
    assert bad.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("low", "high", "text", "value"), [
    (0, None, "0", 0), (1, None, "12", 12), (1, 6, "6", 6), (1, 6, " 3 ", 3)])
def test_a_whole_number_in_range_is_taken(low: int, high: int | None, text: str, value: int) -> None:
    assert integer(low, high)(text) == value


@pytest.mark.parametrize(("low", "high", "text", "message"), [
    (1, None, "0", "must be >= 1"), (0, None, "-1", "must be >= 0"), (1, 6, "7", "must be in 1..6"),
    (1, 6, "2.5", "expected a whole number, got '2.5'"), (1, None, "many", "expected a whole number")])
def test_anything_else_is_an_argument_error_that_says_why(low: int, high: int | None, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        integer(low, high)(text)


def test_a_process_count_is_between_one_and_the_cap() -> None:
    assert processes()("1") == 1 and processes()(str(MAX_PROCESSES)) == MAX_PROCESSES
    for text in ("0", str(MAX_PROCESSES + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match=f"1..{MAX_PROCESSES}"):
            processes()(text)


def test_the_explorer_refuses_shapes_it_could_not_even_list() -> None:
    """There are 243,668 shapes of 7 steps: listing them takes a long time, with no output, and no search
    over them could end."""
    with pytest.raises(ValueError, match=f"at most {MAX_SHAPE_STEPS}"):
        dag_shapes(MAX_SHAPE_STEPS + 1)


@pytest.mark.parametrize("argv", [
    ["explore", "--max-steps", str(MAX_SHAPE_STEPS + 1)],
    ["explore", "--max-steps", "3", "--jobs", "0"],
    ["explore", "--max-steps", "3", "--jobs", str(MAX_PROCESSES + 1)],
    ["campaign", "--minutes", "1", "--explore-max-steps", str(MAX_SHAPE_STEPS + 1)],
    ["campaign", "--minutes", "1", "--workers", "0"],
    ["campaign", "--minutes", "1", "--workers", str(MAX_PROCESSES + 1)],
    ["conform", "--jobs", "0"],  # was taken as 1 without a word
    ["conform", "--jobs", str(MAX_PROCESSES + 1)],
    ["diff", "--base", "HEAD", "--max-steps", "5"],
    ["show", "trace.json", "--step", "-1"],
    ["traces", "export", "out-dir", "--generated", "-1"],
])
def test_a_count_no_run_can_use_is_bad_usage_naming_the_option(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    option = next(a for a in reversed(argv) if a.startswith("--"))
    assert f"argument {option}:" in refused(argv, capsys)


def test_the_bounds_themselves_are_accepted() -> None:
    explore = parse(["explore", "--max-steps", str(MAX_SHAPE_STEPS), "--jobs", str(MAX_PROCESSES)])
    assert (explore.max_steps, explore.jobs) == (MAX_SHAPE_STEPS, MAX_PROCESSES)
    assert parse(["campaign", "--minutes", "1", "--explore-max-steps", str(MAX_SHAPE_STEPS),
                  "--workers", str(MAX_PROCESSES)]).workers == MAX_PROCESSES
    assert parse(["conform", "--jobs", "1"]).jobs == 1


def test_the_default_worker_count_is_within_the_cap() -> None:
    assert 1 <= parse(["campaign", "--minutes", "1"]).workers <= MAX_PROCESSES
