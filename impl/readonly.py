"""What the read-only readers of a stored database (impl/*/readonly.py) raise on input they cannot audit."""

from __future__ import annotations


class UnreadableDatabase(Exception):
    """The database cannot be opened read-only, or does not hold the ql3 layout of storage.md."""
