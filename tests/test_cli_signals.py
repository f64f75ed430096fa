"""`qlwf.cli.main` in-process: an interrupt returns 128 + signal and leaves the caller's process as it was."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time

import pytest

from qlwf import cli


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_returns_its_code_and_restores_the_process(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], sig: signal.Signals) -> None:
    unwound: list[str] = []

    def command(args: argparse.Namespace) -> int:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(30)  # the handler interrupts the sleep
            return 0
        finally:
            unwound.append("finally ran")

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=command)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    start = time.monotonic()
    assert cli.main([]) == 128 + sig
    assert time.monotonic() - start < 10
    assert unwound == ["finally ran"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("qlwf: ") and sig.name in err[0]
    assert {s: signal.getsignal(s) for s in before} == before
    assert logging.root.manager.disable == logging.NOTSET
