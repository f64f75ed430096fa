# ruff: noqa: B018  (a whitelist is a list of bare attribute accesses)
"""False positives of the dead-code scan (vulture), one per entry with the reason it is used.

Never imported: vulture only reads the names. The scan (docs/reviewers-guide.md):
    .venv/bin/vulture model/ impl/ conformance/ proofs/ qlwf/ tests/ bench/ docs/ vulture_whitelist.py \
        --min-confidence 60 --exclude conformance/checkers
(tests/, bench/ and docs/ are scanned as users of the code; their own findings are not acted on.)
"""

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# Plugins named by "module:attribute" strings in conformance/backends/__init__.py (register, lazy_provisioner).
_.ModelBackend  # conformance/backends/model.py
_.gate_crashes  # conformance/faults/sqlite_crashes.py and conformance/faults/pg_crashes.py
_.unconfigured  # conformance/exec/port.py
_.postgres_driver  # conformance/exec/port.py
_.PostgresProvisioner  # conformance/backends/postgres.py
_.PostgresConcurrencyHost  # conformance/backends/postgres.py

# impl/driver_protocol.py dispatches a request to `getattr(self, "_" + request["type"])`.
_._reset
_._apply
_._snapshot
_._close

# impl/port.py CommandPort: protocol methods, implemented by every backend and called by name.
_.recovery_candidates
_.cancellation_candidates

# __exit__(self, exc_type, exc, tb): the context-manager protocol fixes the signature.
_.tb
_.exc_type  # also read nowhere else since conformance/lockstep/runner.py dropped its thread excepthook

# psycopg's Connection.read_only is a property setter (impl/postgres/readonly.py).
_.read_only

# PEP 562 module hook of the public facade (model/__init__.py).
_.__dir__

# model/inv_*.py: registered by the @invariant decorator, called through the registry.
_.inv2
_.inv3
_.inv4
_.inv5
_.inv7

# model/tables_records.py rows of records.md §2.2–§2.3 that no check reads: kept so the table mirrors the
# spec's table whole (a reviewer compares them row by row); nothing else restates them.
_.DOMAIN_DEFINITION
_.MAX_CANCELLATION_PAGES_PER_CYCLE
_.CANCELLATION_CYCLE_DEFAULT_PAGE_SIZE
_.CANCELLATION_CYCLE_DEFAULT_MAX_PAGES
_.PG_TRANSACTION_TRIES

# conformance/stateful/machine.py: Hypothesis rules and invariants (@rule, @invariant), which
# RuleBasedStateMachine calls by itself.
_.first_workflow
_.query_pages
_.stale_fence
_.worker_stops
_.finish_under_intent
_.refused_under_intent
_.drive_more
_.drive_on
_.system_round
_.worker_session
_.heartbeat
_.advance_to_next_timer
_.invariants_hold

# conformance/checkers/model_import.py: a ModuleSpec attribute that the import system reads.
_.submodule_search_locations
# qlwf/gate/selftest.py: the exec-sqlite self-test fault's driver, run by name
_.serve_sqlite_driver_reporting_inserts_only
