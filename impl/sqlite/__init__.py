"""The SQLite implementation (stdlib sqlite3, BEGIN IMMEDIATE, one connection) and its reference
driver (`python -m qlwf.impl.sqlite.driver`).

Layer: impl (may import `qlwf.model` and `qlwf.impl`).
"""
