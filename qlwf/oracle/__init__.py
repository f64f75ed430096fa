"""The oracle's JSON protocol (`qlwf oracle`, `qlwf consult`): strict JSON in, one answer per request out,
shared by the CLI and campaigns.

Layer: application (may import every layer).
"""
