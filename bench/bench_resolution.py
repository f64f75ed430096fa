"""Frontier and cancellation resolution on 128-step plans (chain, wide fan-out, random DAG).

Cold first: an oracle client sends a different snapshot every time, so the exact-input memo misses.
Cold inputs are the same snapshot with every object's keys shuffled per request (each request is a
distinct JSON text, so no cache can hit, and every answer must be byte-identical); warm inputs repeat
one text. Both are measured in-process (`consult`, on parsed inputs) and per request through one
`qlwf oracle batch` subprocess (write a line, read the answer line, repeat).

Reproducible: fixed shapes and seed (printed); reports the median wall time per request.
Run: python bench/bench_resolution.py [--repeat N] [--shapes chain,fan-out,random-dag] [--spaced]
The last lines compare the worst cold batch figures with the targets of issue 9 §4.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from generate import demo_plan
from qlwf.model import canonical
from qlwf.model.canonical import canonical_text
from qlwf.model.oracle import consult
from qlwf.model.system import WorkflowSystem

from qlwf.oracle.protocol import answer_bytes

N = 128
SEED = 20261129


def shapes() -> dict[str, list[tuple[str, list[str]]]]:
    keys = [f"s{i:03d}" for i in range(N)]
    rng = random.Random(SEED)
    return {
        "chain": [(k, [keys[i - 1]] if i else []) for i, k in enumerate(keys)],
        "fan-out": [(k, [keys[0]] if i else []) for i, k in enumerate(keys)],
        "random-dag": [(k, sorted(rng.sample(keys[:i], min(i, rng.randint(0, 3))))) for i, k in enumerate(keys)],
    }


def snapshots(name: str, steps: list[tuple[str, list[str]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A frontier snapshot (admitted, now later) and a cancellation snapshot (intent recorded)."""
    w = WorkflowSystem(clock=1000)
    plan = demo_plan(f"run-{name}", f"plan-{name}", steps)
    assert w.apply("admit_workflow", plan=plan).ok
    w.advance(1000)
    run_id = plan["runId"]
    frontier = {"plan": plan, "run": w.state.runs[run_id], "stepRuns": w.state.steps_of_run(run_id),
                "observedAtMs": w.state.clock}
    assert w.apply("request_cancel", runId=run_id, reason="user", actor={"type": "user"}).ok
    cancel = {"run": w.state.runs[run_id], "stepRuns": w.state.steps_of_run(run_id), "activeTaskAttempts": [],
              "observedAtMs": w.state.clock}
    return frontier, cancel


def shuffled(x: Any, rng: random.Random) -> Any:
    """x with every object's keys in a random order (same JSON value, different text)."""
    if type(x) is dict:
        items = list(x.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if type(x) is list:
        return [shuffled(v, rng) for v in x]
    return x


def variants(snapshot: dict[str, Any], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """n distinct key orders of `snapshot` (distinct canonical texts, so the memo cannot hit)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(out) < n:
        v = shuffled(snapshot, rng)
        text = canonical_text(v)
        if text not in seen:
            seen.add(text)
            out.append(v)
    return out


# The fastest exact encoder of the code under test (these inputs hold no floats), as `oracle batch` uses.
_ENCODE = getattr(canonical, "plain_canonical_json", canonical.canonical_json)


def in_process(fn: str, inputs: list[Any], expected: Any) -> tuple[list[float], list[str]]:
    """Seconds of consult + canonical encoding of the answer, one input per call, and the answers.

    Answers may differ in key order between variants (a cancellation copies the input Run in its key
    order, cancellation.md §6), never in value."""
    samples, answers = [], []
    for inp in inputs:
        t0 = time.perf_counter()
        text = _ENCODE(consult(fn, inp).resolution).decode("utf-8")
        samples.append(time.perf_counter() - t0)
        answers.append(text)
    assert all(json.loads(a) == expected for a in answers), "answer value differs between key orders"
    return samples, answers


def handler_cpu(lines: list[bytes], expected: Any) -> list[float]:
    """CPU seconds (this thread's, so other jobs on the machine barely move it) of the batch line
    handler itself, in this process: parse, gate, resolve, encode; no pipe, no scheduling wait.
    `lines` are texts this process has not seen (its memo cannot hit)."""
    samples = []
    for line in lines:
        t0 = time.thread_time()
        answer = answer_bytes(line)
        samples.append(time.thread_time() - t0)
        assert json.loads(answer) == {"ok": expected}, f"handler answer differs: {answer[:200]!r}"
    return samples


class Batch:
    """One `qlwf oracle batch` subprocess driven one request at a time, over binary pipes (a client
    reads answer bytes; decoding them is the client's business, not the oracle's)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "qlwf.cli", "oracle", "batch"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)

    def request(self, line: bytes) -> bytes:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def through_batch(batch: Batch, warmup: bytes, lines: list[bytes], answers: list[str]) -> list[float]:
    """Seconds from writing a request line to reading its answer line (byte-checked against in-process).

    `warmup` is sent first and not timed: it warms the subprocess's code paths, and when cold it is
    a text of its own, so it fills no memo entry that a timed request could hit."""
    batch.request(warmup)
    samples = []
    for line, want in zip(lines, answers, strict=True):
        t0 = time.perf_counter()
        answer = batch.request(line)
        samples.append(time.perf_counter() - t0)
        assert answer == ('{"ok":' + want + "}\n").encode("utf-8"), f"batch answer differs: {answer[:200]!r}"
    return samples


def request_line(fn: str, inp: Any, spaced: bool) -> bytes:
    """One request line: compact like JSON.stringify (ql3's client) and canonical writers, or with
    json.dumps's default `, ` and `: ` separators (--spaced)."""
    separators = None if spaced else (",", ":")
    return (json.dumps({"fn": fn, "input": inp}, ensure_ascii=False, separators=separators) + "\n").encode("utf-8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--shapes", default="chain,fan-out,random-dag")
    parser.add_argument("--spaced", action="store_true",
                        help="send request lines with json.dumps's default separators instead of compact ones")
    args = parser.parse_args()
    wanted = args.shapes.split(",")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"seed {SEED}; ms per request over {args.repeat} requests, {N}-step plans; "
          f"load average {load} on {os.cpu_count()} CPUs")
    print("cold = object keys shuffled per request (every request a new text: no cache hit); warm = one text "
          "repeated (memo hits)")
    print("frontier: run admitted, roots ready; cancel-all: intent right after admission, 128 StepRun mutations")
    print("in-process = consult + canonical answer (inputs parsed beforehand);\n"
          "batch = one `qlwf oracle batch` subprocess, line in, line out "
          f"({'spaced' if args.spaced else 'compact'} request lines, binary pipes)")
    print("each case: the median, then the minimum (the sample least disturbed by other load on the machine)")
    print("handler cpu = CPU time of the batch line handler on the cold lines, in this process (no pipe)")
    cols = ("in-proc cold", "in-proc warm", "cold/warm", "batch cold", "batch warm", "cold/warm", "batch/in-proc",
            "handler cpu")
    print(f"{'case':<28}" + "".join(f"{c:>14}" for c in cols))
    rng = random.Random(SEED)
    batch = Batch()
    cold_batch: dict[str, list[tuple[float, float]]] = {"frontier": [], "cancel": []}  # (median, min) per shape
    try:
        for name, steps in shapes().items():
            if name not in wanted:
                continue
            frontier, cancel = snapshots(name, steps)
            for fn, label, snap in (("frontier", "frontier", frontier), ("cancel", "cancel-all", cancel)):
                expected = consult(fn, snap).resolution
                warmup, *cold_inputs = variants(snap, 2 * args.repeat + 1, rng)
                cold_inputs, handler_inputs = cold_inputs[: args.repeat], cold_inputs[args.repeat:]
                consult(fn, warmup)
                # Parsed from text like a request (fresh strings, not the snapshot's own objects); untimed.
                parsed = [json.loads(json.dumps(v)) for v in cold_inputs]
                ip_cold, cold_answers = in_process(fn, parsed, expected)
                ip_warm, warm_answers = in_process(fn, [snap] * args.repeat, expected)
                cold_lines = [request_line(fn, v, args.spaced) for v in cold_inputs]
                b_cold = through_batch(batch, request_line(fn, warmup, args.spaced), cold_lines, cold_answers)
                warm_line = request_line(fn, snap, args.spaced)
                b_warm = through_batch(batch, warm_line, [warm_line] * args.repeat, warm_answers)
                h_cold = handler_cpu([request_line(fn, v, args.spaced) for v in handler_inputs], expected)
                for stat in (statistics.median, min):
                    a, b, c, d, e = (stat(x) * 1000 for x in (ip_cold, ip_warm, b_cold, b_warm, h_cold))
                    cells = (a, b, a / b, c, d, c / d, c / a, e)
                    case = f"{name} {label} {stat.__name__}"
                    print(f"{case:<28}" + "".join(f"{x:>14.3f}" for x in cells), flush=True)
                cold_batch[fn].append((statistics.median(b_cold) * 1000, min(b_cold) * 1000))
    finally:
        batch.close()
    # Issue 9 §4: cold, per request through `oracle batch`, frontier <= 4 ms, 128-mutation cancellation <= 6 ms.
    for fn, target in (("frontier", 4.0), ("cancel", 6.0)):
        if cold_batch[fn]:
            worst_median = max(m for m, _ in cold_batch[fn])
            worst_min = max(m for _, m in cold_batch[fn])
            verdict = "met" if worst_median <= target else ("met by the minimum only" if worst_min <= target
                                                            else "not met")
            print(f"target {fn} batch cold <= {target:g} ms: worst median {worst_median:.3f} ms, "
                  f"worst minimum {worst_min:.3f} ms over the shapes -> {verdict}")


if __name__ == "__main__":
    main()
