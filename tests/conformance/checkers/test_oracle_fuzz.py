"""Fuzz campaign for `qlwf oracle` (issue 9 §3): one bad line never costs the others.

Lines are valid snapshots (examples/ and the model fixtures) or one-field mutations of them, generated
from a seed that is printed (set QLWF_FUZZ_SEED to replay a run, QLWF_FUZZ_LINES to change its size).
All of them go through ONE `qlwf oracle batch` process, which must answer every line with exactly one
JSON answer, never with QLWF_ORACLE_INTERNAL_ERROR, and still be alive at the end.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from model_fixtures import cancelling_run, make_plan, make_run, step_run_for, step_runs_for
from qlwf.conformance.checkers.oracle_fuzz import Fuzzer, check_answer
from qlwf.model.errors import QlwfError
from qlwf.model.oracle import FUNCTIONS, consult
from support.oracle_batch import ORACLE_COMMAND, REPO, STARTUP_S, BatchClient

EXAMPLES = REPO / "examples"
LINES = int(os.environ.get("QLWF_FUZZ_LINES", "10000"))


# --------------------------------------------------------------------------------------------------
# The valid pool
EXAMPLE_FUNCTIONS = {
    "frontier-chain-root-failed.json": "frontier", "frontier-diamond-root-succeeded.json": "frontier",
    "cancel-running-sibling-blocks.json": "cancel", "cancel-timeout-expired-lease.json": "cancel",
    "recover-unstarted-claim.json": "recover", "admit-attempt-fetch.json": "admit-attempt",
    "admit-workflow-diamond.json": "admit-workflow",
}
DAGS = [{"fetch": [], "report": ["fetch"]},
        {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]},
        {f"s{i}": [f"s{i - 1}"] if i else [] for i in range(8)},
        {"x": [], "y": [], "z": [], "w": ["x", "y", "z"]}]


def transition(current: dict[str, Any], at_ms: int) -> dict[str, Any]:
    return {"current": current,
            "command": {"expectedVersion": current["version"], "expectedDigest": current["stepRunDigest"],
                        "mutationId": "m-1", "to": "ready", "atMs": at_ms},
            "context": {"expectedRunVersion": 9, "expectedRunEventSequence": 9, "eventId": "e-1", "dedupeKey": "e-1",
                        "actor": {"type": "reconciler"}}}


def valid_pool() -> list[tuple[str, Any]]:
    """(fn, input) pairs the oracle resolves: every example, the batch example and fixture-built snapshots."""
    pool = [(fn, json.loads((EXAMPLES / name).read_text(encoding="utf-8"))) for name, fn in EXAMPLE_FUNCTIONS.items()]
    batch = [json.loads(line) for line in (EXAMPLES / "batch.jsonl").read_text(encoding="utf-8").splitlines()]
    pool += [(r["fn"], r["input"]) for r in batch[:-1]]  # its last request is invalid on purpose
    for dag in DAGS:
        plan = make_plan(dag)
        root, child = plan["steps"][0]["stepKey"], plan["steps"][-1]["stepKey"]
        pool.append(("admit-workflow", plan))
        for statuses in ({}, {root: "succeeded"}, {root: "failed"}):
            pool.append(("frontier", {"plan": plan, "run": make_run(plan, version=20),
                                      "stepRuns": step_runs_for(plan, statuses), "observedAtMs": 5000}))
        pool.append(("cancel", {"run": cancelling_run(plan, version=20), "stepRuns": step_runs_for(plan, {}),
                                "activeTaskAttempts": [], "observedAtMs": 7000}))
        pool.append(("step-transition", transition(step_run_for(plan, child, "pending"), 2000)))
    return pool


@pytest.fixture(scope="module")
def pool() -> list[tuple[str, Any, Any]]:
    """The valid pool with each entry's resolution; every entry must resolve."""
    out = []
    for fn, inp in valid_pool():
        try:
            out.append((fn, inp, consult(fn, inp).resolution))
        except QlwfError as e:  # a broken fixture would silently turn the valid lines into error lines
            raise AssertionError(f"pool entry {fn} does not resolve: {e}") from e
    assert {fn for fn, _, _ in out} == set(FUNCTIONS)
    return out


def test_one_batch_process_answers_every_fuzzed_line(pool: list[tuple[str, Any, Any]]) -> None:
    seed = int(os.environ.get("QLWF_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"oracle fuzz: seed {seed} (QLWF_FUZZ_SEED={seed} replays), {LINES} lines")
    fuzzer = Fuzzer(random.Random(seed), [(fn, inp) for fn, inp, _ in pool])
    lines = [fuzzer.line() for _ in range(LINES)]
    kinds = Counter(expect for _, expect, _ in lines)
    assert kinds["valid"] > 0 and kinds["json_invalid"] > 0 and kinds["any"] > 0, kinds
    started = time.monotonic()
    with BatchClient() as client:
        client.send(b"".join(line + b"\n" for line, _, _ in lines))  # the reader thread drains stdout meanwhile
        problems = []
        for n, (line, expect, i) in enumerate(lines):
            problem = check_answer(client.answer(), expect, pool[i][2])
            if problem:
                problems.append(f"line {n} ({expect}, seed {seed}): {problem}; line {line[:160]!r}")
        assert client.proc.poll() is None, f"batch died (seed {seed})"
        fn, inp, resolution = pool[0]
        assert client.ask(json.dumps({"fn": fn, "input": inp}).encode() + b"\n") == {"ok": resolution}
        rc, stderr = client.close()
    print(f"oracle fuzz: {LINES + 1} lines answered in {time.monotonic() - started:.1f} s; {dict(kinds)}")
    assert not problems, f"{len(problems)} bad answers (seed {seed}):\n" + "\n".join(problems[:20])
    assert (rc, stderr) == (0, b""), stderr.decode("utf-8", "replace")[-2000:]


# --------------------------------------------------------------------------------------------------
# The single-file command: exit 0 or 2 with exactly one stderr line, never 1 or 70
SINGLE_CASES = 24


def _single(case: tuple[str, bytes | None, str]) -> tuple[subprocess.CompletedProcess[bytes], str]:
    fn, body, path = case
    out = subprocess.run([*ORACLE_COMMAND, fn, path], input=body, capture_output=True, cwd=REPO,
                         timeout=STARTUP_S * 2)
    return out, f"{fn} {path!r} {body[:120] if body else None!r}"


def test_single_command_fuzz_exits_0_or_2_with_one_line(pool: list[tuple[str, Any, Any]], tmp_path: Path) -> None:
    seed = int(os.environ.get("QLWF_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"oracle single-file fuzz: seed {seed} (QLWF_FUZZ_SEED={seed} replays)")
    singles = [(fn, inp) for fn, inp, _ in pool if fn != "step-transition"]  # batch only
    fuzzer = Fuzzer(random.Random(seed), singles)
    cases: list[tuple[str, bytes | None, str]] = []
    for n in range(SINGLE_CASES):
        line, _, i = fuzzer.line()
        fn = singles[i][0]
        try:  # the snapshot alone, as a file holds it (the envelope is batch syntax)
            body = json.dumps(json.loads(line)["input"]).encode() if n % 3 == 0 else line
        except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: a deeply nested line
            body = line
        if n % 5 == 4:  # a weird path instead of content
            cases.append((fn, None, str(tmp_path / fuzzer.rng.choice(["no\nsuch", "tab\there", "esc\x1b[1m", "dir"]))))
            (tmp_path / "dir").mkdir(exist_ok=True)
        elif n % 2:
            cases.append((fn, body, "-"))
        else:
            path = tmp_path / f"case-{n}.json"
            path.write_bytes(body)
            cases.append((fn, None, str(path)))
    with ThreadPoolExecutor(max_workers=3) as pool_:
        results = list(pool_.map(_single, cases))
    for out, label in results:
        assert out.returncode in (0, 2), f"seed {seed}: exit {out.returncode} for {label}: {out.stderr[-500:]!r}"
        if out.returncode == 0:
            assert out.stderr == b"" and out.stdout.count(b"\n") == 1 and json.loads(out.stdout), label
        else:
            assert out.stdout == b"" and out.stderr.count(b"\n") == 1 and out.stderr.endswith(b"\n"), label
            assert b"Traceback" not in out.stderr, label
