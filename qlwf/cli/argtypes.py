"""Argument types shared by the subcommands' parsers."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


def up_to(upper: float, unit: str) -> Callable[[str], float]:
    """An argparse type: a number of `unit` in (0, upper] (so never NaN or infinite, which a JSON
    report could not carry)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {text!r}") from None
        if not 0 < value <= upper:
            raise argparse.ArgumentTypeError(f"must be in (0, {upper:g}] {unit}")
        return value

    return parse


def seconds_up_to(upper: float) -> Callable[[str], float]:
    return up_to(upper, "seconds")


# Forked workers each hold a copy of the model and its caches (an explorer worker of the 5-step shapes
# reaches 833 MB), so a count beyond this is a typo, not a machine (decisions Q-128).
MAX_PROCESSES = 256


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high] (no upper bound when high is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be >= {low}" if high is None else f"must be in {low}..{high}")
        return value

    return parse


def processes() -> Callable[[str], int]:
    """An argparse type: a number of worker processes, 1..MAX_PROCESSES."""
    return integer(1, MAX_PROCESSES)


# Output paths are checked when the arguments are parsed, so that a run of minutes does not end in a
# traceback at the one write it was for (decisions Q-111). Nothing is created here: the command makes
# the directories when it writes, as before. Root passes every permission test, so what is checked for
# root is the shape: no directory where a file goes, no file where a directory goes.
def _dir_problem(path: Path) -> str | None:
    """Why `path` cannot be a directory to write into (None if it is one, or can be made one: its nearest
    existing ancestor is a writable directory)."""
    if path.exists():
        if not path.is_dir():
            return f"{str(path)!r} exists and is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else f"{str(path)!r} is not writable"
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{str(ancestor)!r} is not a directory"
    return None if os.access(ancestor, os.W_OK | os.X_OK) else f"{str(ancestor)!r} is not writable"


def output_dir(text: str) -> str:
    """An argparse type: a directory the command may write into (made when needed)."""
    problem = _dir_problem(Path(text))
    if problem is not None:
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}: {problem}")
    return text


def output_file(text: str) -> str:
    """An argparse type: a file the command may write (its directory made when needed)."""
    path = Path(text)
    problem = ("it is a directory" if not text or path.is_dir()
               else f"{text!r} is not writable" if path.exists() and not os.access(path, os.W_OK)
               else _dir_problem(path.parent))
    if problem is not None:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {problem}")
    return text


def same_output(args: argparse.Namespace, *flags: str) -> str | None:
    """Why two output flags may not be given together (one file, two reports, the last overwriting the
    first: decisions Q-122), or None. `flags` are option names (`--json`); unset ones are ignored."""
    given = [(flag, getattr(args, flag.lstrip("-").replace("-", "_"))) for flag in flags]
    seen: dict[str, str] = {}
    for flag, value in given:
        if value is None:
            continue
        where = os.path.realpath(value)
        if where in seen:
            return f"{seen[where]} and {flag} name the same file ({value!r}): each report needs its own"
        seen[where] = flag
    return None
