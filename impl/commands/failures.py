"""Storage-level failures (commands.md §2.3). A command's typed errors are built by the model's
`CommandErrors` (model/errors.py), shared with the model; the storage error mapping is per dialect."""

from __future__ import annotations


class ConcurrentChange(Exception):
    """A compare-and-set matched no row; mapped to Conflict `concurrent_change` by the backend."""


# Storage-level reasons (commands.md §2.3) that the model never produces; `counter_overflow` is not
# among them because the model produces it too.
STORAGE_REASONS = frozenset({
    "constraint_violation", "concurrent_change", "storage_busy", "storage_closed", "storage_unreachable",
    "retry_exhausted", "storage_error", "authority_locked", "authority_drift",
})
