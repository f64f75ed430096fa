"""Counterexamples of the explorer as trace files: one self-contained qlwf-trace per shape and kind of finding,
replayable with the model (`qlwf explore --counterexamples`, the gate's explorer check)."""

from __future__ import annotations

from pathlib import Path

from qlwf.conformance.checkers.explore import Finding
from qlwf.conformance.traces.export import record_for_saving
from qlwf.conformance.traces.format import Trace, save


def write_counterexamples(findings: list[Finding], directory: str | Path) -> list[Path]:
    """One trace file per finding (the first of each shape and kind), self-contained (qlwf-trace@1) when
    the model can record it, replayable with the model."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    seen: set[tuple[str, str]] = set()
    for f in findings:
        if (f.shape, f.kind) in seen:
            continue
        seen.add((f.shape, f.kind))
        t = f.trace()
        name = f"explore-{f.shape.replace(':', '_').replace('>', '-').replace(',', '_')}-{f.kind}".lower()
        path = root / f"{name}.json"
        save(record_for_saving(Trace(t["description"], t["initialClock"], t["steps"], name)), path)
        written.append(path)
    return written
