"""Checkers of the model: they run the specification (`qlwf.model`) but are not part of it.

`explore` (the exhaustive small-scope explorer, `qlwf explore`), `liveness` (the LIVE-1 drain
procedure of state-machines.md §10) and `replay` (`qlwf replay --backend model`). They import
the model only through absolute `qlwf.model` imports, so `qlwf diff` can run them over another
tree's model (conformance/checkers/model_import.py maps `qlwf.model`, never `qlwf.conformance`).

Layer: conformance (may import `qlwf.model`, `qlwf.impl`, `qlwf.proofs`).
"""
