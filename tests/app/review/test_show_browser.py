"""`qlwf show --html` in a real headless Chromium: the page loads with no console message and shows
every step key of every Run's DAG and every trace step.

Chromium is the Debian package (`./qlwfw install-browser`; under CI=true `./qlwfw test` installs it
as root). Missing Chromium fails under CI=true and skips elsewhere. Console messages are read from
Chromium's own log (`--enable-logging=stderr --v=0` prints each one as a `CONSOLE` line); the page
has no script, so any such line (an error, a blocked load) is a failure. A planted bad page proves
the log is read. The DOM after load comes from `--dump-dom`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import load, save

from qlwf.cli.entry import main as cli

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0", "--dump-dom")
WRAPPER = Path(__file__).resolve().parents[3] / "qlwfw"
TRACES = ("adr0226-dependency-readied", "adr0228-idle-siblings-cancelled-authority-blocks")
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\] (.*)")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        message = "Chromium is not installed (`./qlwfw install-browser`, or apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " — required under CI=true")
        pytest.skip(message)
    return exe


def load_page(exe: str, page: Path, profile: Path) -> tuple[str, list[str]]:
    """(DOM after load, console messages) of `page` in a fresh profile."""
    done = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [m.group(1) for m in CONSOLE.finditer(done.stderr)]


def test_console_errors_are_seen(tmp_path: Path) -> None:
    exe = chromium()
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('planted');missing();</script>"
                   "</body></html>", encoding="utf-8")
    dom, console = load_page(exe, bad, tmp_path / "profile")
    assert "<p>x</p>" in dom
    assert any("planted" in m for m in console) and any("ReferenceError" in m for m in console), console


@pytest.mark.parametrize("name", [*TRACES, "generated-3"])
def test_html_loads_cleanly_and_shows_every_step_key(name: str, tmp_path: Path) -> None:
    exe = chromium()
    source = CORPUS_DIR / f"{name}.json"
    if name.startswith("generated-"):  # several workflows in one trace
        source = tmp_path / f"{name}.json"
        save(generate(int(name.split("-")[1])), source)
    trace = load(source)
    page = tmp_path / f"{name}.html"
    assert cli(["show", str(source), "--html", str(page)]) == 0
    dom, console = load_page(exe, page, tmp_path / "profile")
    assert console == [], console
    keys = {(p["stepKey"], s["args"]["plan"]["runId"]) for s in trace.steps
            if s["op"] == "command" and s["name"] == "admit_workflow" for p in s["args"]["plan"]["steps"]}
    assert keys and (len({run for _, run in keys}) > 1 or not name.startswith("generated-"))
    for key, run_id in keys:
        figure = re.search(rf'<figure data-run-id="{re.escape(run_id)}">(.*?)</figure>', dom, re.S)
        assert figure is not None, run_id
        node = re.search(rf'<g class="node" data-step-key="{re.escape(key)}"[^>]*>.*?</g>', figure.group(1), re.S)
        assert node is not None and f">{key}</text>" in node.group(0), (run_id, key)
    rows = re.findall(r'<tr id="step-(\d+)"', dom)
    assert rows == [str(i) for i in range(len(trace.steps))]


def _fake_apt(tmp_path: Path, exit_code: int) -> tuple[dict[str, str], Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "apt-calls"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\nexit {exit_code}\n')
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, calls


@pytest.mark.parametrize("exit_code", [0, 100])
def test_wrapper_installs_chromium_and_graphviz(tmp_path: Path, exit_code: int) -> None:
    env, calls = _fake_apt(tmp_path, exit_code)
    out = subprocess.run([str(WRAPPER), "install-browser"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == exit_code, out.stderr
    asked = calls.read_text().splitlines()
    assert asked[0] == "update -qq"
    if exit_code == 0:
        assert asked[1].startswith("install -y") and asked[1].endswith("chromium graphviz")
    else:
        assert "installing chromium and graphviz failed (apt-get exit 100)" in out.stderr
