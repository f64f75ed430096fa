"""The golden corpus: hand-named traces (qlwf-trace files) that pin ADR clauses. Data only.

Layer: conformance; rebuilt by `qlwf regenerate` (conformance/build_corpus.py).
"""
