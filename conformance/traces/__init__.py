"""Traces: the qlwf-trace format, its check against the protocol schemas, export, the golden corpus and its
builder, and the model's mirror of a `corrupt` step.

Layer: conformance (may import `qlwf.model`, `qlwf.impl`, `qlwf.proofs`; inside conformance only `report`).
"""
