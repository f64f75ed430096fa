"""Regenerates the worked example of docs/protocol.md: a real transcript of a 3-step trace.

    python docs/protocol_example.py          # rewrite the example in docs/protocol.md
    python docs/protocol_example.py --check  # exit 1 if the document differs from a fresh run

The trace is the first three steps of the corpus trace adr0226-settled-replay, run in lockstep
through the SQLite reference driver; every line of the transcript is validated against its schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from qlwf.conformance.exec import port as exec_port
from qlwf.conformance.exec import protocol_schema
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import run_lockstep
from qlwf.conformance.traces.format import Trace

DOC = Path(__file__).with_name("protocol.md")
BEGIN, END = "<!-- transcript:begin (python docs/protocol_example.py) -->", "<!-- transcript:end -->"
SOURCE = "adr0226-settled-replay"


def example_trace() -> Trace:
    source = next(t for t in runner.corpus_traces() if t.name == SOURCE).inputs()
    return Trace(f"first 3 steps of {SOURCE}", source.initial_clock, source.steps[:3], "protocol-example")


def transcript() -> list[tuple[str, str]]:
    """The wire of one lockstep run (hello, reset, 3 applies, close); raises if the run or a message is wrong."""
    lines: list[tuple[str, str]] = []
    factory = exec_port.ExecBackend(exec_port.reference_driver("sqlite"), transcript=lines)
    try:
        port = factory.open()
        result = run_lockstep(example_trace(), port)
        port.close()
    finally:
        factory.shutdown()
    if not result.passed:
        raise SystemExit(f"the example trace diverges:\n{result.divergence.render() if result.divergence else ''}")
    sent: dict[int, str] = {}
    for direction, line in lines:
        message = json.loads(line)
        kind = message["type"] if direction == ">" else sent[message["id"]]
        if direction == ">":
            sent[message["id"]] = kind
        bad = protocol_schema.problems("request" if direction == ">" else "response", kind, message)
        if bad:
            raise SystemExit(f"{direction} {kind} breaks its schema: {bad}")
    return lines


def render(lines: list[tuple[str, str]]) -> str:
    body = "\n".join(f"{d} {line}" for d, line in lines)
    return f"{BEGIN}\n```text\n{body}\n```\n{END}"


def updated(text: str, block: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + block + tail


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    new = updated(text, render(transcript()))
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"{DOC} is stale: run python docs/protocol_example.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
