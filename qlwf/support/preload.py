"""Every module of the distribution, imported once per process before a derandomized or seeded run.

Hypothesis mixes into its draws constants it reads from the source of the non-test modules of the
checkout that the process has imported so far, so a derandomized or seeded run of the stateful machine
drew differently after other code had been imported (a campaign shard after an oracle shard; the
suite's stateful test after another test file in the same worker). With every module loaded first,
those constants are the same in every process (decisions Q-113).

It lives in the application layer because it imports all of it: the campaign's stateful shard and the
test session call it (conformance, which the machine belongs to, may not import the application).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

# The distribution's packages (pyproject.toml package-dir).
PACKAGES = ("qlwf", "qlwf.model", "qlwf.impl", "qlwf.conformance", "qlwf.proofs")


@functools.cache
def load_every_module() -> None:
    """Import every module of the distribution (once per process), except `__main__` modules: importing one
    runs its command line."""
    for top in PACKAGES:
        package = importlib.import_module(top)
        for module in pkgutil.walk_packages(package.__path__, f"{top}."):
            if module.name.rpartition(".")[2] != "__main__":
                importlib.import_module(module.name)
