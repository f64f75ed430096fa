"""The correctness gate: named checks, one result each, rendered as a table, JSON and JUnit XML."""

from __future__ import annotations

import json
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO


class Skip(Exception):
    """Raised by a check that cannot run on this machine (the message says why)."""


@dataclass
class CheckResult:
    name: str
    status: str  # passed | failed | skipped
    seconds: float
    summary: str
    details: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    run: Callable[[dict[str, Any]], str]  # returns a one-line summary or raises AssertionError / Skip


def run_checks(checks: list[Check], options: dict[str, Any], progress: TextIO | None = None) -> list[CheckResult]:
    """Run every check in order; `progress` (stderr in the CLI) gets a line as each starts and ends."""
    results = []
    for i, check in enumerate(checks, start=1):
        tag = f"qlwf check [{i}/{len(checks)}] {check.name}"
        if progress is not None:
            print(f"{tag}: started — {check.description}", file=progress, flush=True)
        t0 = time.perf_counter()
        try:
            summary = check.run(options)
            status, details = "passed", []
        except Skip as e:
            status, summary, details = "skipped", str(e), []
        except AssertionError as e:
            lines = str(e).splitlines() or ["assertion failed"]
            status, summary, details = "failed", lines[0], lines[1:]
        except Exception as e:
            status, summary, details = "failed", f"{type(e).__name__}: {e}", traceback.format_exc().splitlines()
        results.append(CheckResult(check.name, status, round(time.perf_counter() - t0, 3), summary, details))
        if progress is not None:
            print(f"{tag}: {status} in {results[-1].seconds:.1f} s — {summary}", file=progress, flush=True)
    return results


def render_table(results: list[CheckResult]) -> str:
    width = max([len(r.name) for r in results] + [5])
    lines = [f"{'check':<{width}}  {'result':<8} {'seconds':>8}  summary"]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status:<8} {r.seconds:>8.2f}  {r.summary}")
        lines += [f"{'':<{width}}    {d}" for d in r.details[:40]]
    return "\n".join(lines)


def write_json(results: list[CheckResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8")


def write_junit(results: list[CheckResult], path: Path) -> None:
    suite = ET.Element("testsuite", name="qlwf-gate", tests=str(len(results)),
                       failures=str(sum(r.status == "failed" for r in results)),
                       skipped=str(sum(r.status == "skipped" for r in results)),
                       time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname="qlwf.gate", name=r.name, time=f"{r.seconds:.3f}")
        if r.status == "failed":
            ET.SubElement(case, "failure", message=r.summary).text = "\n".join(r.details)
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", message=r.summary)
        else:
            ET.SubElement(case, "system-out").text = r.summary
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
