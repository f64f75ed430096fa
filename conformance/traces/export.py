"""`qlwf traces export`: self-contained qlwf-trace@1 files for test suites that never run qlwf.

Every exported file is recorded afresh through the model (the corpus scenarios' inputs, or
generated traces from their seeds), so what is written is what the model does today, whatever
the stored copy says. File names: `<corpus name>.json`, `generated[-FAMILY]-<seed>.json` (the family: boundary, pages).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from qlwf.conformance.generate.sequences import GeneratorConfig, generate
from qlwf.conformance.traces.corpus import CORPUS_DIR
from qlwf.conformance.traces.format import Trace, load, record, save


@dataclass(frozen=True)
class Exported:
    path: Path
    steps: int
    commands: int


def corpus_inputs(directory: Path = CORPUS_DIR) -> list[Trace]:
    return [load(p).inputs() for p in sorted(directory.glob("*.json"))]


def export(traces: Iterable[Trace], directory: str | Path, state_form: str = "changes") -> list[Exported]:
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for trace in traces:
        recorded = record(trace.inputs(), state_form)
        path = root / f"{trace.name}.json"
        save(recorded, path)
        written.append(Exported(path, len(recorded.steps), recorded.command_count))
    return written


def selected(corpus: bool, generated: int, seed: int, config: GeneratorConfig | None = None) -> list[Trace]:
    """The corpus (optional), then `generated` traces with seeds seed, seed+1, …"""
    out = corpus_inputs() if corpus else []
    return out + [generate(seed + i, config) for i in range(generated)]


def record_for_saving(trace: Trace) -> Trace:
    """A counterexample in the self-contained form when the model can run every step, else its inputs.

    A model that raises on a step (the finding itself may be that crash) cannot record it; the
    inputs alone still replay with `qlwf replay` and `qlwf.conformance.checkers.replay.replay_trace`."""
    try:
        return record(trace)
    except Exception:  # the crash is reported by the caller's own failure; keep the inputs
        return trace.inputs()
