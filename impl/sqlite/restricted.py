"""The SQLite store behaving like ql3's Edge adapter (`python -m qlwf.impl.sqlite.driver --profile edge`).

A reference for partial drivers, so CI exercises them without ql3: the store implements the Edge
surface only (docs/ql3-adapters.md §1.1, §4, §5; the facts are impl/ql3_surfaces.py, which the
harness's profiles read too), namely

* the commands Edge has entry points for; any other is refused (`failure`), as is a page cursor, a
  cancel reason other than `user` and recovery evidence other than `not_running`;
* `local_process` attempts only (Edge's admission table allows no other executor type);
* the binding of a task attempt re-derived from the ql3 evidence of the apply request
  (`qlwf.model.evidence.evidence_binding`, a pure function of records) and refused when the request
  gives another binding, or no evidence at all (Edge derives it from stored rows and takes none);
* the convergence page's five counters and task admission's `{status, receipt}` only;
* errors with class and code, no reason (the driver's declared errorDetail, impl/driver_protocol.py).

Two planted faults, for the harness's own tests: `head-of-line` fails the whole convergence page when
one of its workflows fails, as Edge's page does (D-6); `accept-placeholder` takes any binding without
looking at the evidence.
"""

from __future__ import annotations

from typing import Any, Final

from qlwf.impl.port import CommandPort, Record, Snapshot
from qlwf.impl.ql3_surfaces import EDGE_COMMANDS, EDGE_SURFACE, PAGE_COUNTERS
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors
from qlwf.model.evidence import evidence_binding

PLANTS: Final = ("head-of-line", "accept-placeholder")
# the enums the edge store narrows: a value outside them is malformed, refused by the store's own checks
_ENUMS: Final = {"evidence": frozenset(T.RECOVERY_EVIDENCE), "reason": frozenset(T.CANCEL_REASONS)}


class Undeclared(Exception):
    """A request outside the declared surface: answered with `failure`, as Edge has no such entry point."""


class EdgePort(CommandPort):
    """The Edge surface over a full command port (the in-memory SQLite store)."""

    def __init__(self, inner: SqliteAdapter, plants: frozenset[str] = frozenset()) -> None:
        self.clock = inner.clock
        unknown = plants - set(PLANTS)
        if unknown:
            raise ValueError(f"unknown plants {sorted(unknown)}; known: {list(PLANTS)}")
        self.inner = inner
        self.plants = plants
        self._evidence: Any = None

    def seed_evidence(self, evidence: Record | None) -> None:
        self._evidence = evidence

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        evidence, self._evidence = self._evidence, None  # for this command only
        if name not in EDGE_COMMANDS:
            raise Undeclared(f"the edge store has no entry point for {name}")
        if isinstance(args, dict) and "after" in args and name in EDGE_SURFACE["omittedArguments"]:
            raise Undeclared(f"{name} takes {{limit}} only on the edge store: no cursor")
        for key, values in EDGE_SURFACE["argumentValues"].get(name, {}).items():
            if isinstance(args, dict) and args.get(key) in _ENUMS[key] - set(values):
                raise Undeclared(f"the edge store has no {name} with {key} {args[key]}")
        if name == "admit_task_attempt":
            self._admission(args, evidence)
        result = self.inner.execute(name, args, now)
        if name == "converge_cancellation_page":
            if "head-of-line" in self.plants and any(o["status"] == "failed" for o in result["outcomes"]):
                raise CommandErrors(name).unavailable("page_failed", "a workflow of the page failed")
            return {k: result[k] for k in PAGE_COUNTERS}
        if name == "admit_task_attempt":
            return {"status": result["status"], "receipt": result["receipt"]}
        return result

    def _admission(self, args: Any, evidence: Any) -> None:
        """Edge stores local_process attempts only, and derives the binding from the evidence."""
        if not isinstance(args, dict) or not isinstance(args.get("binding"), dict):
            return  # malformed: the store's own argument check answers
        fail = CommandErrors("admit_task_attempt")
        executor = args["binding"].get("executorType")
        if executor in T.EXECUTOR_TYPES and executor != "local_process":
            raise fail.conflict("executor_unsupported", f"the edge store holds local_process attempts, not {executor}")
        if "accept-placeholder" in self.plants:
            return
        if not (isinstance(evidence, dict) and isinstance(evidence.get("taskReconciliation"), dict)
                and isinstance(evidence.get("execution"), dict)):
            raise fail.invalid("evidence_missing", "the edge store derives the binding from ql3 evidence")
        plan, task_id = self._plan_task(args.get("runId"), args.get("stepRunId"))
        if plan is None or task_id is None:
            return  # no such Run or step: the store's own checks answer
        try:
            derived = evidence_binding(plan, evidence["taskReconciliation"], evidence["execution"], task_id)
        except (ValueError, KeyError, TypeError) as e:
            raise fail.invalid("evidence_invalid", f"the evidence does not normalize: {e}") from None
        if derived != args["binding"]:
            raise fail.invalid("binding_not_derived", "the binding is not the one the evidence derives")

    def _plan_task(self, run_id: Any, step_run_id: Any) -> tuple[Record | None, str | None]:
        """The admitted plan of `run_id` and the taskId of its step `step_run_id`, if both exist."""
        admissions = self.inner.snapshot_kinds(frozenset({"admissions"}))["admissions"]
        plan = next((a["plan"] for a in admissions if a["plan"]["runId"] == run_id), None)
        if plan is None:
            return None, None
        step = next((s for s in plan["steps"] if s["stepRunId"] == step_run_id), None)
        return plan, None if step is None else step["taskId"]

    def snapshot(self) -> Snapshot:
        return self.inner.snapshot()

    # the store beneath's FaultInjection (drift traces) and ChangeTracking (the driver's `changes`)
    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        self.inner.corrupt(kind, key, patch)

    def written_kinds(self) -> frozenset[str]:
        return self.inner.written_kinds()

    def snapshot_kinds(self, kinds: frozenset[str]) -> Snapshot:
        return self.inner.snapshot_kinds(kinds)

    def close(self) -> None:
        self.inner.close()
