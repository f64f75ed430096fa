"""The command map of qlwf/cli/entry.py: each command builds from its own module alone, and the map is complete."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from qlwf.cli import entry as cli


def registered(module: str) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(module).register(sub)
    return set(sub.choices)


def test_the_map_names_exactly_what_each_module_registers() -> None:
    for module in set(cli.SUBCOMMANDS.values()):
        assert registered(module) == {c for c, m in cli.SUBCOMMANDS.items() if m == module}, module


def test_every_module_of_the_package_that_registers_a_command_is_in_the_map() -> None:
    from importlib import resources

    # qlwf/cli/ holds one module per command, besides the entry point and the shared argument types
    helpers = {"__init__", "__main__", "entry", "argtypes"}
    names = {p.name.removesuffix(".py") for p in resources.files("qlwf.cli").iterdir() if p.name.endswith(".py")}
    assert {f"qlwf.cli.{n}" for n in names - helpers} == set(cli.SUBCOMMANDS.values())


def test_a_command_parses_the_same_alone_as_in_the_whole_parser() -> None:
    argv = ["conform", "--backend", "sqlite", "--traces", "3", "--json"]
    alone, whole = cli.build_parser(cli.command_of(argv)).parse_args(argv), cli.build_parser().parse_args(argv)
    assert vars(alone) == vars(whole)
    assert cli.command_of(["-h"]) is None and cli.command_of(["no-such"]) is None and cli.command_of([]) is None


def test_an_oracle_process_loads_neither_the_prover_nor_the_backends() -> None:
    heavy = ("z3", "hypothesis", "psycopg", "qlwf.impl.sqlite.adapter")
    probe = ("import sys; from qlwf.cli import entry as cli; cli.build_parser(cli.command_of(['oracle'])); "
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
