"""Argument types shared by the subcommands' parsers."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def seconds_up_to(upper: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds in (0, upper]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not 0 < value <= upper:
            raise argparse.ArgumentTypeError(f"must be in (0, {upper:g}] seconds")
        return value

    return parse
