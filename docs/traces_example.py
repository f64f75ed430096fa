"""Regenerates the example of docs/traces.md: a real exported 4-step trace, as `qlwf traces export` writes it.

    python docs/traces_example.py          # rewrite the example in docs/traces.md
    python docs/traces_example.py --check  # exit 1 if the document differs from a fresh recording

The inputs are written here; every expectation in the file is recorded through the model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from qlwf.conformance.generate import plans
from qlwf.conformance.traces.format import Trace, advance, command, dumps, record

DOC = Path(__file__).with_name("traces.md")
BEGIN, END = "<!-- example:begin (python docs/traces_example.py) -->", "<!-- example:end -->"
T0 = 1_000_000


def example_trace() -> Trace:
    plan = plans.make_plan("run-1", "plan-1", {"a": []}, T0)
    return record(Trace("docs/traces.md example: admit a one-step workflow, let 250 ms pass, request its "
                        "cancellation, then the cancellation of a Run that does not exist", T0, [
                            command("admit_workflow", {"plan": plan}),
                            advance(250),
                            command("request_cancel", {"runId": "run-1", "reason": "user",
                                                       "actor": {"type": "user", "id": "alice"}}),
                            command("request_cancel", {"runId": "run-2", "reason": "user",
                                                       "actor": {"type": "user", "id": "alice"}}),
                        ], "example"))


def render() -> str:
    """The last two steps pretty-printed (a change list, an error), then the whole file as exported."""
    trace = example_trace()
    steps = "\n".join(json.dumps(s, indent=2, ensure_ascii=False) for s in trace.steps[2:])
    return (f"{BEGIN}\nSteps 2 and 3 of the file below:\n\n```json\n{steps}\n```\n\n<details><summary>The whole "
            f"file, as <code>qlwf traces export</code> writes it (one step per line)</summary>\n\n```json\n"
            f"{dumps(trace)}```\n\n</details>\n{END}")


def updated(text: str, block: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + block + tail


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    new = updated(text, render())
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"{DOC} is stale: run python docs/traces_example.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
