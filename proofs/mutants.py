"""Mutants: the encoding built from mutated rule tables or mutated transition disjuncts.

Each mutant names the properties that must refute it. A table mutant replaces one table of
`Tables.model()`; a disjunct mutant is a `Semantics` subclass overriding one rule hook. The runner
builds the whole proof suite on the mutant and the tests assert that the named property comes out
`violated` with a decoded counterexample (and, for state properties, a replayable BMC trace).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import z3

from .encoding import B, Sys
from .tables_view import Tables
from .transitions import Semantics


@dataclass(frozen=True)
class Mutant:
    """`refuted_by`: properties of which at least one must come out violated; `witness`: the property
    whose violation a BMC trace from Init must reach (None for table defects, refuted by their rows)."""

    name: str
    description: str
    refuted_by: tuple[str, ...]
    witness: str | None
    semantics: type[Semantics] = Semantics
    tables: Callable[[Tables], Tables] | None = None

    def build_tables(self) -> Tables:
        base = Tables.model()
        return self.tables(base) if self.tables else base


# ---- disjunct mutants -------------------------------------------------------------------------
class ReadyWhileNeedRunning(Semantics):
    """A pending step is readied when each need is succeeded OR still running."""

    def ready_rule(self, x: Sys, i: int) -> B:
        d = self.d
        return z3.And([z3.Implies(self.enc.need[i][j], d.step_status.isin(x.steps[j].st, ("succeeded", "running")))
                       for j in range(i)])


class SkipOneLevel(Semantics):
    """CANNOT_SUCCEED looks at direct needs only: a skipped chain advances one level per pass."""

    def cannot_succeed(self, x: Sys) -> list[B]:
        e, t = self.enc, self.t
        out = []
        for i, s in enumerate(x.steps):
            direct = z3.Or([z3.And(e.need[i][j], e.step_in(x.steps[j], t.BLOCKING_STEP)) for j in range(i)]
                           or [z3.BoolVal(False)])
            out.append(z3.Or(e.step_in(s, t.BLOCKING_STEP), z3.And(e.step_in(s, ["pending"]), direct)))
        return out


class RecoveryRefusesIntent(Semantics):
    """recover_attempt refuses Runs with cancel intent (the rejected alternative of D-2)."""

    def recover_allowed(self, x: Sys) -> B:
        return z3.Not(self.enc.intent(x.run))


class AdmissionIgnoresIntent(Semantics):
    """admit_task_attempt forgets check 7 (cancel intent)."""

    def admission_allowed(self, x: Sys) -> B:
        return self.enc.running(x.run)


# ---- table mutants ------------------------------------------------------------------------------
def _settle_leased_claims(t: Tables) -> Tables:
    table = dict(t.CANCEL_ATTEMPT_TABLE)
    table[("claimed", "leased")] = "settle"
    return replace(t, CANCEL_ATTEMPT_TABLE=table)


def _drop_starting_row(t: Tables) -> Tables:
    table = {k: v for k, v in t.CANCEL_ATTEMPT_TABLE.items() if k != ("starting", None)}
    return replace(t, CANCEL_ATTEMPT_TABLE=table)


def _pending_times_out(t: Tables) -> Tables:
    table: dict[Any, Any] = dict(t.CANCEL_STEP_TABLE)
    table[("pending", True)] = t.CANCEL_STEP_TABLE[("ready", True)]
    return replace(t, CANCEL_STEP_TABLE=table)


def _catch_all_first(t: Tables) -> Tables:
    rules = list(t.COMPLETION_RULES)
    last = next(r for r in rules if r.rule == "complete.otherwise")
    rules.remove(last)
    first = next(i for i, r in enumerate(rules) if r.command == "complete_attempt")
    rules.insert(first, last)
    return replace(t, COMPLETION_RULES=tuple(rules))


def _fail_start_without_code(t: Tables) -> Tables:
    codes = dict(t.WORKER_PATH_CODES)
    codes[("fail_start", "failed")] = codes[("fail_start", "failed")]._replace(step_result_code=None)
    return replace(t, WORKER_PATH_CODES=codes)


MUTANTS: tuple[Mutant, ...] = (
    # The frontier readies the dependent while its need runs: INV-28 (candidate exactness) breaks at the
    # first step that makes such a state, and BMC reaches the INV-16 violation itself.
    Mutant("ready-while-need-running", "a pending step readied while a need is still running",
           ("INV-28", "INV-16"), "INV-16", semantics=ReadyWhileNeedRunning),
    Mutant("converge-leased-claim", "convergence settles a claimed attempt whose lease is leased and terminalizes "
           "its step (CANCEL_ATTEMPT_TABLE[claimed, leased] = settle)", ("INV-23", "INV-24", "TABLE-cancel-attempt"),
           "INV-23", tables=_settle_leased_claims),
    Mutant("recovery-refuses-intent", "recovery refusing Runs with cancel intent", ("LIVE-1-rank", "LIVE-1-bound"),
           "LIVE-1-rank", semantics=RecoveryRefusesIntent),
    Mutant("skip-one-level", "a skipped chain propagated only one level per frontier pass",
           ("LIVE-1-quiesce", "INV-28"), "LIVE-1-quiesce", semantics=SkipOneLevel),
    Mutant("admission-ignores-intent", "task attempt admission after cancel intent", ("INV-15",), "INV-15",
           semantics=AdmissionIgnoresIntent),
    Mutant("cancel-table-missing-row", "CANCEL_ATTEMPT_TABLE without the (starting, no lease) row",
           ("TABLE-cancel-attempt",), None, tables=_drop_starting_row),
    Mutant("pending-times-out", "convergence times out a pending step under reason timeout",
           ("TABLE-cancel-step", "LIVE-1-rank"), "LIVE-1-rank", tables=_pending_times_out),
    Mutant("completion-catch-all-first", "the completion catch-all row moved before the intent rows",
           ("TABLE-completion",), None, tables=_catch_all_first),
    Mutant("fail-start-without-code", "fail_start → failed writes no StepRun resultCode", ("TABLE-path-codes",),
           None, tables=_fail_start_without_code),
)

BY_NAME = {m.name: m for m in MUTANTS}
