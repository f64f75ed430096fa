"""Clients across a process boundary (Jepsen's role): the `qlwf-backend@1` protocol (docs/protocol.md) — the
driver process and its keeper, the connection, the command port over it, and the JSON schemas of
every message (`schema/`, data).

Layer: conformance (may import `qlwf.model`, `qlwf.impl`; inside conformance `processes`, `report`).
"""
