"""qlwf: the application — the `qlwf` command line, the gate, review tools and campaigns.

Layer: application. It may import every other layer (`qlwf.model`, `qlwf.proofs`, `qlwf.impl`,
`qlwf.conformance`); nothing imports it but the tests and the `qlwf` entry point. The map of the
rooms and the layer contracts (checked by tests/repo/test_layers.py) are in docs/architecture.md.
"""
