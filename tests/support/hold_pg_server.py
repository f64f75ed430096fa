"""Helper of tests/conformance/provision/test_pg_signals.py, never collected by the suite (not named test_*.py).

Run as `pytest tests/support/hold_pg_server.py` with QLWF_HOLD_PG_SERVER=1: it takes the session's
PostgreSQL server and holds it until the run is signalled, so the caller can check the teardown.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest


@pytest.mark.skipif(os.environ.get("QLWF_HOLD_PG_SERVER") != "1", reason="helper of test_pg_signals.py")
def test_hold_the_session_server(pg_server: Any) -> None:
    time.sleep(300)
