"""Concurrent workers: K threads over one store (`harness`), their workload (`workload`), the history
check that every committed order is one the model allows (`history`), and the gate's variants.

Layer: conformance (may import `qlwf.model`, `qlwf.impl`; inside conformance `traces`, `generate`,
`lockstep`, `faults`, `report`).
"""
