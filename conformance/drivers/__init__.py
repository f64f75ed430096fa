"""Reference drivers (docs/protocol.md, qlwf-backend@1) that need the harness: run as `python -m`.

Layer: conformance. A driver here may import `qlwf.model`, `qlwf.impl` and `qlwf.proofs` and the rest of
conformance; nothing of the application (`qlwf.cli.entry`, the gate).

`postgres` serves the PostgreSQL backend on a throwaway cluster (`conformance/provision`), which is test
machinery and so cannot live in impl. The SQLite driver needs no server and stays with its backend,
`python -m qlwf.impl.sqlite.driver`.
"""
