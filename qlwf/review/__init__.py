"""Reviewer tools: `qlwf diff` (the behaviour of two trees' models compared: `model_diff`, `sources`,
`behaviour`, `table_diff`, `report`) and `qlwf audit` (a live ql3 database read through the model's
checks: `audit`).

Layer: application (may import every layer).
"""
