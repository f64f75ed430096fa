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
    monkeypatch.setattr(cli, "build_parser", lambda *_: parser)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    start = time.monotonic()
    assert cli.main([]) == 128 + sig
    assert time.monotonic() - start < 10
    assert unwound == ["finally ran"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("qlwf: ") and sig.name in err[0]
    assert {s: signal.getsignal(s) for s in before} == before
    assert logging.root.manager.disable == logging.NOTSET


def test_an_interrupted_in_process_main_keeps_the_callers_servers(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Only servers the command started are torn down: a test session's cluster survives."""
    from qlwf.impl.postgres import server

    stopped: list[str] = []

    class Fake:
        def __init__(self, name: str) -> None:
            self.name = name

        def stop(self) -> None:
            stopped.append(self.name)
            server._unregister(self)  # type: ignore[arg-type]

    callers = Fake("caller's")
    server._register(callers)  # type: ignore[arg-type]

    def command(args: argparse.Namespace) -> int:
        server._register(Fake("command's"))  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        return 0

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=command)
    monkeypatch.setattr(cli, "build_parser", lambda *_: parser)
    try:
        assert cli.main([]) == 128 + signal.SIGTERM
        assert stopped == ["command's"]
    finally:
        server._unregister(callers)  # type: ignore[arg-type]
    capsys.readouterr()
