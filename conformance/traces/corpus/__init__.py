"""The golden corpus: hand-named traces (qlwf-trace files) that pin ADR clauses, and `CORPUS_DIR`, where they lie.

Layer: conformance; rebuilt by `qlwf regenerate` (conformance/traces/corpus_build.py).
"""

from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent  # the corpus files, next to this module
