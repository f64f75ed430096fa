"""Application plumbing: stdout/stderr that survive a closed pipe (`stdio`), progress lines, the handling of
system stops (signals), and `preload`, which imports every module before a seeded run.

Layer: application (may import every layer).
"""
