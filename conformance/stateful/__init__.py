"""The Hypothesis rule-based state machine of the whole model, its strategies, contracts and
postconditions, and its coverage.

Layer: conformance (may import `qlwf.model`, `qlwf.impl`, `qlwf.proofs`).
"""
