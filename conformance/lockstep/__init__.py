"""The lockstep checker: one trace replayed on the model and a backend side by side, outcome and full durable
state compared after every step (`compare`), many traces per run (`runner`), record-level state diffs,
rule coverage, and the model behind the command port (`model_port`).

Layer: conformance (may import `qlwf.model`, `qlwf.impl`; inside conformance `traces`, `generate`,
`report`, `processes`, `exec`, `backends`).
"""
