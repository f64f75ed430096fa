"""The PostgreSQL implementation (psycopg 3, SERIALIZABLE, the ADR lock order, bounded retry), its
read-only audit reader and the `QLWF_PG_DSN` check.

Layer: impl (may import `qlwf.model` and `qlwf.impl`). Throwaway servers for tests are the
harness's: `qlwf.conformance.provision`.
"""
