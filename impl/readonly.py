"""What the read-only readers of a stored database (impl/*/readonly.py) raise on input they cannot audit."""

from __future__ import annotations


class UnreadableDatabase(Exception):
    """The database cannot be opened read-only, or does not hold the ql3 layout of storage.md."""


# Snapshot key the readers add: each StepRun's stored JSON mirror, {id, runId, json}. The harness snapshot
# rebuilds StepRuns from their columns only; storage.md §3 requires the mirror to agree with them.
MIRRORS = "stepRunMirrors"
