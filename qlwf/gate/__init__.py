"""The gate (`qlwf check`): the checks and their legs (`checks`), the verdict from evidence and the evidence
floors (`verdict`, `evidence_floors.json`), lanes and budgets (`lanes`), the self-test that plants one
fault per layer (`selftest`), the spec's published vectors (`vectors`) and the generated artifacts that
must be current (`artifacts`).

Layer: application (may import every layer).
"""
