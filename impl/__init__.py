"""The storage implementations of the command port: product storage code only.

Layer: impl. It may import `qlwf.model` (records, tables, pure functions, typed errors; never the
model's command semantics: docs/architecture.md "What impl shares with the model") and nothing
else of qlwf. The harness that tests it lives in `qlwf.conformance`.
"""
