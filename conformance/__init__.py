"""The harness: drives the model and each implementation with the same traces and compares them.

Layer: conformance. It may import `qlwf.model`, `qlwf.impl` and `qlwf.proofs`; never the
application (`qlwf.cli.entry`, the gate, campaigns). Rooms: `backends/` (the registry), `provision/`
(throwaway PostgreSQL servers), `drivers/` (reference drivers that need them), `checkers/`
(explorer, LIVE-1, replay), `stateful/` (the Hypothesis machine), `mutants/` (the mutant
manifest), and the modules for traces, generators, lockstep, faults, concurrency and the exec
protocol (docs/architecture.md).
"""
