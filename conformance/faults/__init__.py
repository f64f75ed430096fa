"""Nemeses (Jepsen's role): crash at every statement boundary (SQLite `sqlite_crashes`, PostgreSQL
`pg_crashes`, the boundary map `crash_points`), lost commit responses (`lost_commits`) and server
outages (`outage`).

Layer: conformance (may import `qlwf.model`, `qlwf.impl`; inside conformance `traces`, `generate`,
`lockstep`, `provision`, `report`).
"""
