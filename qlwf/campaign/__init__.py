"""Long verification campaigns: seeded shards over a local process pool or a Dask cluster.

Layer: application (`qlwf`): it may import every layer. `qlwf campaign` (qlwf/cli/campaign.py) is
its command; docs/cli.md "Long campaigns" is its manual.
"""
