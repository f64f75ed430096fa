"""What a PostgreSQL test does when something its leg needs is missing: the backend registry's policy,
a skip with the reason, and under CI=true (which must provide the leg) a failure."""

from __future__ import annotations

from typing import NoReturn

import pytest
from qlwf.conformance import backends


def missing(reason: str) -> NoReturn:
    verdict, message = backends.get("postgres").requirement(reason)
    if verdict == "fail":
        pytest.fail(message)
    pytest.skip(message)
