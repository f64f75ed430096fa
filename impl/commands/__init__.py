"""Dialect-neutral command logic shared by the SQLite and PostgreSQL backends (storage.md, D-10).

Each writing command is a check sequence and its effects over records rebuilt from rows: argument
validation, the integrity loads of commands.md §2.4, the model's pure functions and the writes of
storage.md §4. A backend contributes only a `Store` (rows, compare-and-set, lock hooks, database
time), its transaction discipline and its error mapping.

Layer: impl (may import `qlwf.model` and `qlwf.impl`).
"""
