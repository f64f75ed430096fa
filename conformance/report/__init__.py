"""How results are shown: trace and divergence rendering (text, SVG and its layout) and `visible`, which makes
text from outside the harness safe to print.

Layer: conformance (may import `qlwf.model`; inside conformance `traces`).
"""
