"""Z3 proofs of the qlwf invariants, decision tables, LIVE-1 and page bounds (see runner.py).

encoding     the symbolic state of one workflow of N steps and Init (admit_workflow)
rules        Transition record, StepRun mutation, counters, ghosts, rule hooks
worker_path  worker-command and recovery disjuncts
transitions  frontier, admission, cancellation, time, and the relation
invariants   INV-n and strengthening lemmas;  moves: two-state table conformance
properties   inductiveness;  tables_check: decision tables;  ranking: LIVE-1;  pages: page bounds
bmc          bounded model checking and replayable traces;  decode: readable states
driver       seeded random model driver;  crosscheck: encoding ↔ model cross-check
mutants      mutated tables / disjuncts;  runner: the proof runner used by `qlwf prove` and the tests

Layer: proofs. It may import `qlwf.model` only (the tables and pure functions it encodes).
"""
