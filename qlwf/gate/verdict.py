"""The correctness gate: named checks, each with a three-valued verdict resting on its evidence.

A check returns `Evidence`: what it looked at (counts) and what it found wrong (problems). The
gate, not the check, decides the verdict (Jepsen's valid? true | false | unknown):

* failed  — the check found a problem (or crashed);
* unknown — no problem, but not enough evidence: a count below its floor in
  `qlwf/gate/evidence_floors.json`, a count the floors ask for that the check did not report, no floor
  defined for the check at all, a gap the check reported itself (a leg that could not run, a
  property list different from the registry), `NoEvidence` raised, or no verdict within the
  check's time limit (`check_timeout`: the check is stopped, so a hang cannot hold the gate);
* passed  — no problem and every floor met;
* skipped — left out on request (`--skip LEG`); the report says so.

No verdict logic uses `assert`, so `python -O` changes nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from qlwf.conformance.report.visible import visible
from qlwf.support import stdio
from qlwf.support.system_stops import system_stop


def _package_data(name: str) -> Path:
    """A data file of the gate, found as package data (so an installed `qlwf check` finds it too)."""
    from importlib import resources

    return Path(str(resources.files("qlwf.gate").joinpath(name)))


FLOORS_PATH = _package_data("evidence_floors.json")
VERDICTS = ("passed", "failed", "unknown", "skipped")
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3


class NoEvidence(Exception):
    """Raised by a check that could not gather any evidence here (the message says why)."""


class CheckTimedOut(BaseException):
    """Raised inside a check that ran past its time limit. A BaseException, like KeyboardInterrupt,
    so that a check's own `except Exception` cannot swallow it; its `with` blocks still clean up
    (pools kill their workers, throwaway databases are dropped)."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise CheckTimedOut in this thread once `seconds` have passed (a real-time interval timer and
    SIGALRM, so a check blocked in a system call is stopped too). Only the main thread receives
    signals: elsewhere, or with `seconds` None, there is no limit. An interval timer already armed
    (pytest-timeout's, say) is set aside and re-armed afterwards with what remains of it, unless it
    would fire first: then it is left alone and this limit is not armed."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if outer_delay and outer_delay <= seconds:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise CheckTimedOut(f"no verdict within {seconds:g} s")

    outer_handler = signal.signal(signal.SIGALRM, expire)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_delay:
            signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (time.monotonic() - start), 0.001),
                             outer_interval)


@dataclass(frozen=True)
class Evidence:
    summary: str
    counts: Mapping[str, int]
    problems: tuple[str, ...] = ()  # what the check found wrong: any problem fails the check
    gaps: tuple[str, ...] = ()  # why the evidence is incomplete, as the check itself knows it


@dataclass
class CheckResult:
    name: str
    status: str  # one of VERDICTS
    seconds: float
    summary: str
    details: list[str] = field(default_factory=list)
    evidence: dict[str, int] = field(default_factory=dict)
    floors: dict[str, int] = field(default_factory=dict)
    gaps: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    run: Callable[[dict[str, Any]], Evidence]
    leg: str = "core"  # the part of the gate it belongs to; `--skip LEG` leaves a whole leg out
    owns_server: bool = False  # uses storage this process provisions (a throwaway cluster): never forked


def load_floors(path: Path = FLOORS_PATH) -> dict[str, dict[str, dict[str, int]]]:
    """{profile: {check: {count: minimum}}} — the minimum evidence of each check per profile."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {profile: checks for profile, checks in data["profiles"].items()}


def judge(evidence: Evidence, floors: Mapping[str, int] | None) -> tuple[str, list[str]]:
    """The verdict of one check from its evidence and its floors, with the reasons for `unknown`."""
    if evidence.problems:
        return "failed", []
    gaps = list(evidence.gaps)
    if not floors:  # fail closed: a check that demands no evidence cannot pass
        gaps.append("no evidence floor is defined for this check and profile")
    else:
        for key, minimum in floors.items():
            if key not in evidence.counts:
                gaps.append(f"{key}: not reported (floor {minimum})")
            elif evidence.counts[key] < minimum:
                gaps.append(f"{key}: {evidence.counts[key]} < floor {minimum}")
    return ("unknown" if gaps else "passed"), gaps


def run_checks(checks: list[Check], options: dict[str, Any], progress: TextIO | None = None, *,
               floors: Mapping[str, Mapping[str, int]] | None = None,
               skip: frozenset[str] = frozenset(), lanes: int = 1) -> list[CheckResult]:
    """Run every check; `progress` (stderr in the CLI) gets a line as each starts and ends. The
    results are in the order of `checks` whatever the lanes.

    `floors` are this profile's floors by check name (default: read from the data file). With
    `lanes=2` the checks that own a server run in this process and the others on a forked lane and,
    once this process is free, here too (qlwf/gate/lanes.py); evidence and verdicts are the same as with
    one lane."""
    if floors is None:
        floors = load_floors()["quick" if options.get("quick") else "full"]
    profile_floors = floors

    def one(item: tuple[int, Check]) -> CheckResult:
        i, check = item
        tag = f"qlwf check [{i}/{len(checks)}] {check.name}"
        if progress is not None:
            print(f"{tag}: started — {check.description}", file=progress, flush=True)
        r = _run_one(check, options, profile_floors.get(check.name))
        if progress is not None:
            print(f"{tag}: {r.status} in {r.seconds:.1f} s — {r.summary}", file=progress, flush=True)
        return r

    def lost(item: tuple[int, Check], why: str) -> CheckResult:
        return CheckResult(item[1].name, "failed", 0.0, why, floors=dict(profile_floors.get(item[1].name) or {}))

    results: dict[int, CheckResult] = {
        i: CheckResult(c.name, "skipped", 0.0, f"skipped by request (--skip {c.leg})")
        for i, c in enumerate(checks, start=1) if c.leg in skip}
    todo = [(i, c) for i, c in enumerate(checks, start=1) if i not in results]
    if lanes > 1:
        from qlwf.gate.lanes import run_in_two_lanes

        home = [item for item in todo if item[1].owns_server]
        shared = [item for item in todo if not item[1].owns_server]
        done = run_in_two_lanes(home, shared, one, lost)
        results |= {item[0]: r for item, r in zip(home + shared, done[0] + done[1], strict=True)}
    else:
        results |= {item[0]: one(item) for item in todo}
    return [results[i] for i in range(1, len(checks) + 1)]


def _run_one(check: Check, options: dict[str, Any], floors: Mapping[str, int] | None) -> CheckResult:
    t0 = time.perf_counter()
    limit = options.get("check_timeout")
    try:
        with time_limit(limit):
            evidence = check.run(options)
    except CheckTimedOut as e:
        why = f"{e}: the check was stopped (a hang, or a host far slower than --check-timeout allows)"
        return CheckResult(check.name, "unknown", _since(t0), why, floors=dict(floors or {}), gaps=[why])
    except NoEvidence as e:
        return CheckResult(check.name, "unknown", _since(t0), str(e), floors=dict(floors or {}),
                           gaps=[f"no evidence: {e}"])
    except Exception as e:
        system = system_stop(e)
        if system is not None:  # memory gone, a worker killed: no evidence either way
            why = f"stopped by the system: {system}"
            return CheckResult(check.name, "unknown", _since(t0), why, floors=dict(floors or {}), gaps=[why])
        # a crashing check is a failed check, with its traceback
        return CheckResult(check.name, "failed", _since(t0), f"{type(e).__name__}: {e}",
                           traceback.format_exc().splitlines())
    status, gaps = judge(evidence, floors)
    details = [line for p in evidence.problems for line in p.splitlines()]
    summary = evidence.summary
    if status == "failed":
        summary = details[0] if details else summary
        details = details[1:]
    elif status == "unknown":
        summary = f"{summary} — insufficient evidence: {gaps[0]}"
        details = gaps[1:]
    return CheckResult(check.name, status, _since(t0), summary, details, dict(evidence.counts),
                       dict(floors or {}), gaps)


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 3)


def exit_code(results: list[CheckResult]) -> int:
    """0 only if every check that ran passed; a failure outranks an unknown."""
    statuses = {r.status for r in results}
    if "failed" in statuses:
        return EXIT_FAILED
    if "unknown" in statuses or not statuses - {"skipped"}:
        return EXIT_UNKNOWN
    return EXIT_PASSED


def render_table(results: list[CheckResult]) -> str:
    width = max([len(r.name) for r in results] + [5])
    lines = [f"{'check':<{width}}  {'result':<8} {'seconds':>8}  summary"]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status:<8} {r.seconds:>8.2f}  {r.summary}")
        lines += [f"{'':<{width}}    {d}" for d in r.details[:40]]
    return "\n".join(lines)


def render_counts(results: list[CheckResult]) -> str:
    counts = {v: sum(r.status == v for r in results) for v in VERDICTS}
    line = ", ".join(f"{counts[v]} {v}" for v in VERDICTS)
    skipped = sorted({r.summary for r in results if r.status == "skipped"})
    return f"qlwf check: {line}" + (f" ({'; '.join(skipped)})" if skipped else "")


def write_json(results: list[CheckResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {"verdict": {EXIT_PASSED: "passed", EXIT_FAILED: "failed"}.get(exit_code(results), "unknown"),
              "checks": [asdict(r) for r in results]}
    stdio.write_report(path, json.dumps(report, indent=2, allow_nan=False) + "\n")


def _xml_text(text: str) -> str:
    """`text` with every character XML 1.0 cannot carry, even as a character reference (§2.2: C0 controls
    but tab, newline and carriage return; surrogates; U+FFFE, U+FFFF), written as its Python escape, and the
    other controls with them. A driver's coloured stderr (ESC) in a check's details made the whole JUnit
    report not well-formed, so CI lost every result, the failing one first (decisions Q-123)."""
    return visible(text, keep="\t\n\r")


def write_junit(results: list[CheckResult], path: Path) -> None:
    # JUnit has no "unknown": it is reported as an error (the gate is red), distinct from a failure.
    suite = ET.Element("testsuite", name="qlwf-gate", tests=str(len(results)),
                       failures=str(sum(r.status == "failed" for r in results)),
                       errors=str(sum(r.status == "unknown" for r in results)),
                       skipped=str(sum(r.status == "skipped" for r in results)),
                       time=f"{sum(r.seconds for r in results):.3f}")
    x = _xml_text
    for r in results:
        case = ET.SubElement(suite, "testcase", classname="qlwf.gate.verdict", name=x(r.name), time=f"{r.seconds:.3f}")
        if r.evidence or r.floors:
            props = ET.SubElement(case, "properties")
            for key, value in r.evidence.items():
                ET.SubElement(props, "property", name=x(f"evidence.{key}"), value=x(str(value)))
            for key, value in r.floors.items():
                ET.SubElement(props, "property", name=x(f"floor.{key}"), value=x(str(value)))
        if r.status == "failed":
            ET.SubElement(case, "failure", message=x(r.summary)).text = x("\n".join(r.details))
        elif r.status == "unknown":
            ET.SubElement(case, "error", type="unknown", message=x(r.summary)).text = x("\n".join(r.gaps))
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", message=x(r.summary))
        else:
            ET.SubElement(case, "system-out").text = x(r.summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = io.BytesIO()
    ET.ElementTree(suite).write(document, encoding="utf-8", xml_declaration=True)
    stdio.write_report(path, document.getvalue())
