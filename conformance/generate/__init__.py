"""Generators (Jepsen's role): command sequences over one or several workflows that the model runs as they
are drawn — seeded-random or Hypothesis-driven (`sequences`), page and boundary workloads, plan shapes,
the boundary table, and ql3-shaped twins of oracle inputs. `base` is the shared core the others build on.

Layer: conformance (may import `qlwf.model`, `qlwf.impl`; inside conformance `traces`).
"""
