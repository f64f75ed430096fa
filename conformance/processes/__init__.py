"""Process plumbing shared by the harness and the application: the fork pool that runs traces in worker
processes and the sweep that finds and ends processes a run left behind.

Layer: conformance (may import `qlwf.model`; nothing else of qlwf).
"""
