"""JSON schemas of the driver protocol (qlwf-backend@1) and of the trace format. Data only.

Layer: conformance; docs/protocol.md and docs/traces.md describe them.
"""
