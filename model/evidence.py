"""Builders of realistic ql3 admission evidence from a plan (task-attempts.md §3A): public API.

ql3 admits a Task attempt from two stored records: the Task reconciliation receipt of the plan's
package generation and the execution revision of the Task. These builders make both from a plan,
with correct digests, so that a test, an example or a driver of a content-addressed store can
produce an admission input that ql3 would accept, and vary it one field at a time:

* `build_task_reconciliation(plan, ...)`: an item for every Task of the plan (dispositions and
  revisions chosen per Task) plus unrelated items covering every disposition, in the ql3 collation;
* `build_local_execution_revision(plan, receipt, task_id, ...)`: a `local_process` revision;
* `build_cluster_execution_revision(plan, receipt, task_id, ...)`: a `remote_worker` revision with
  environment (public and secret entries) and placement;
* `build_ql3_admission_input(...)`: the §3A oracle input around them;
* `evidence_binding(plan, receipt, execution, task_id)`: the binding admission derives from them;
* `trace_evidence_problem(plan, step_key, binding, evidence)`: whether a trace step's binding is the
  one §3A derives from the evidence the step carries (`{"taskReconciliation", "execution"}`);
* `step_evidence_binding(plan, step_key, evidence)`: that derived binding itself;
* `foreign_binding_refusal(plan, step_key, binding, evidence)`: what a store that derives the binding
  answers a request whose binding is not the derived one (a trace's foreign-binding probe).

Every builder returns records that the §3A normalizers accept unchanged; keyword arguments override
the realistic defaults. Builders are pure: the same arguments give the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from . import tables as T
from .attempts_ql3 import derive_binding, reconciled_item
from .errors import EvidenceProblem, Invalid, QlwfError
from .execution_parts import encode_secret_ref
from .execution_revision import normalize_execution_revision, seal_cluster_revision, seal_local_revision
from .reconciliation import normalize_reconciliation_receipt, seal_reconciliation_receipt
from .records import Record

__all__ = [
    "build_cluster_execution_revision",
    "build_local_execution_revision",
    "build_ql3_admission_input",
    "build_task_reconciliation",
    "default_unrelated_items",
    "evidence_binding",
    "foreign_binding_refusal",
    "runtime_task_id",
    "step_evidence_binding",
    "trace_evidence_problem",
]


def runtime_task_id(plan: Record, task_id: str) -> str:
    """`pkg:<packageName>:<taskId>`: the runtime Task a plan step's resource Task becomes."""
    return f"pkg:{plan['target']['packageName']}:{task_id}"


def _plan_task(plan: Record, task_id: str) -> Record:
    step: Record | None = next((s for s in plan["steps"] if s["taskId"] == task_id), None)
    if step is None:
        raise ValueError(f"the plan has no step with taskId {task_id!r}")
    return step


def default_unrelated_items(plan: Record) -> list[Record]:
    """Items for Tasks outside the plan, one per disposition, with names that exercise the ql3
    collation (case, `_` before `-`, digits before letters) and one Task of another package."""
    pkg = plan["target"]["packageName"]

    def digest(name: str) -> str:
        return hashlib.sha256(f"qlwf evidence builder\x00{name}".encode()).hexdigest()

    rows = [(f"pkg:{pkg}:Archive-Old", 7, "already_disabled"), (f"pkg:{pkg}:archive_new", 2, "created"),
            (f"pkg:{pkg}:retired-2024", 4, "disabled"), (f"pkg:{pkg}:z-index", 1, "retained"),
            ("pkg:other-pkg:sync", 12, "updated")]
    return [{"taskId": t, "revision": r, "disposition": d, "contentDigest": digest(t)} for t, r, d in rows]


def build_task_reconciliation(
    plan: Record, *, committed_at_ms: int | None = None, revisions: Mapping[str, int] | None = None,
    dispositions: Mapping[str, str] | None = None, content_digests: Mapping[str, str] | None = None,
    unrelated: Sequence[Record] | None = None, previous_lock_digest: str | None = None,
) -> Record:
    """The Task reconciliation receipt of the plan's generation.

    Every Task of the plan gets an item (revision 1, `created`, and the step's taskDefinitionDigest
    as content digest unless `revisions`, `dispositions` or `content_digests` say otherwise, keyed by
    the plan's taskId); `unrelated` items (default: `default_unrelated_items`) are added; the receipt
    is committed at `committed_at_ms` (default: the plan's plannedAtMs)."""
    revisions, dispositions, content_digests = revisions or {}, dispositions or {}, content_digests or {}
    t = plan["target"]
    items: dict[str, Record] = {}
    for step in plan["steps"]:
        task = step["taskId"]
        items[task] = {"taskId": runtime_task_id(plan, task), "revision": revisions.get(task, 1),
                       "disposition": dispositions.get(task, "created"),
                       "contentDigest": content_digests.get(task, step["taskDefinitionDigest"])}
    extra = default_unrelated_items(plan) if unrelated is None else list(unrelated)
    return seal_reconciliation_receipt({
        "schema": T.SCHEMA_TASK_RECONCILIATION, "projectId": t["projectId"], "packageName": t["packageName"],
        "generation": t["generation"], "generationDigest": t["generationDigest"],
        "materializedRevisionDigest": t["materializedRevisionDigest"], "lockDigest": t["lockDigest"],
        "previousLockDigest": previous_lock_digest,
        "committedAtMs": plan["plannedAtMs"] if committed_at_ms is None else committed_at_ms,
        "items": [*items.values(), *extra],
    })


def _item_of(plan: Record, receipt: Record, task_id: str) -> Record:
    _plan_task(plan, task_id)
    item = reconciled_item(receipt, runtime_task_id(plan, task_id))
    if item is None:
        raise ValueError(f"the receipt has no item for {runtime_task_id(plan, task_id)!r}")
    return item


def _default_command(task_id: str) -> Record:
    return {"kind": "argv", "file": "/usr/bin/node", "args": [f"tasks/{task_id}.js", "--json"]}


def _settings(working_directory: str | None, timeout_ms: int | None) -> Record:
    out: Record = {}
    if working_directory is not None:
        out["workingDirectory"] = working_directory
    if timeout_ms is not None:
        out["timeoutMs"] = timeout_ms
    return out


def build_local_execution_revision(
    plan: Record, receipt: Record, task_id: str, *, created_at_ms: int | None = None,
    command: Record | None = None, working_directory: str | None = "/srv/ql3/packages/work",
    timeout_ms: int | None = 600000, context_digest: str | None = None,
) -> Record:
    """The `local_process` execution revision of the plan Task `task_id` at its receipt item's
    revision (created when the receipt was committed unless `created_at_ms` says otherwise)."""
    item = _item_of(plan, receipt, task_id)
    context = context_digest or hashlib.sha256(f"{item['taskId']}\x00{item['revision']}".encode()).hexdigest()
    return seal_local_revision({
        "projectId": plan["target"]["projectId"], "taskId": item["taskId"],
        "taskRevision": f"qltd:v1:{item['revision']}:{item['contentDigest']}", "executorType": "local_process",
        "command": command or _default_command(task_id), **_settings(working_directory, timeout_ms),
        "contextRef": f"localctx:sha256:{context}",
        "createdAtMs": receipt["committedAtMs"] if created_at_ms is None else created_at_ms,
    })


def _default_environment(project_id: str) -> list[Record]:
    # Deliberately unsorted: the normalized revision (and its digest) holds them in the ql3 collation.
    return [{"name": "NODE_ENV", "kind": "public", "value": "production"},
            {"name": "api_token", "kind": "secret", "secretRef": encode_secret_ref(project_id, "api-token", 3)},
            {"name": "API_URL", "kind": "public", "value": "https://api.example.invalid/v1"},
            {"name": "_TRACE", "kind": "public", "value": ""}]


def _default_placement() -> Record:
    return {"required": {"architectures": ["x86_64", "arm64"], "operatingSystems": ["linux"],
                         "runtimes": [{"name": "python", "versionRange": "^3.11"},
                                      {"name": "node", "versionRange": ">=20.0.0 <23"}],
                         "labels": {"zone": "eu-1", "10": "rack", "2": "row", "Tier": "batch"},
                         "minMemoryBytes": 268435456},
            "preferred": [{"labels": {"disk": "ssd"}, "weight": 60}, {"labels": {"zone": "eu-2"}, "weight": 10}]}


def build_cluster_execution_revision(
    plan: Record, receipt: Record, task_id: str, *, created_at_ms: int | None = None,
    command: Record | None = None, environment: list[Record] | None = None, placement: Record | None = None,
    working_directory: str | None = None, timeout_ms: int | None = 900000,
) -> Record:
    """The `remote_worker` execution revision of the plan Task `task_id` at its receipt item's
    revision, with a realistic environment (public and secret entries) and placement by default."""
    item = _item_of(plan, receipt, task_id)
    project = plan["target"]["projectId"]
    return seal_cluster_revision({
        "projectId": project, "taskId": item["taskId"],
        "taskRevision": f"qltd:v1:{item['revision']}:{item['contentDigest']}",
        "sourceRevision": item["revision"], "sourceContentDigest": item["contentDigest"],
        "executorType": "remote_worker", "planSchema": T.SCHEMA_COMMAND_EXECUTION_PLAN,
        "command": command or _default_command(task_id),
        "environment": _default_environment(project) if environment is None else environment,
        **_settings(working_directory, timeout_ms),
        "placement": _default_placement() if placement is None else placement,
        "createdAtMs": receipt["committedAtMs"] if created_at_ms is None else created_at_ms,
    })


def build_ql3_admission_input(plan: Record, run: Record, step_run: Record, receipt: Record, execution: Record,
                              *, attempt_number: int = 1, admitted_at_ms: int) -> dict[str, Any]:
    """The §3A oracle input {plan, run, stepRun, taskReconciliation, execution, attemptNumber, admittedAtMs}."""
    return {"plan": plan, "run": run, "stepRun": step_run, "taskReconciliation": receipt, "execution": execution,
            "attemptNumber": attempt_number, "admittedAtMs": admitted_at_ms}


def evidence_binding(plan: Record, receipt: Record, execution: Record, task_id: str) -> Record:
    """The §3 binding that admission derives from this evidence for the plan Task `task_id`."""
    return derive_binding(_plan_task(plan, task_id), receipt, execution)


def step_evidence_binding(plan: Record, step_key: str, evidence: Any) -> Record:
    """The binding §3A derives for the plan step `step_key` from a trace step's `evidence`
    ({"taskReconciliation": receipt, "execution": revision}); ValueError saying why it derives none.

    Both records are normalized as ql3 reads them (digests recomputed), then the binding is derived
    from the step's own plan step — so evidence of another Task derives a binding that disagrees with
    the step, as ql3 would."""
    if not isinstance(evidence, dict) or set(evidence) != {"taskReconciliation", "execution"}:
        raise ValueError("evidence must be {taskReconciliation, execution}")
    step = next((s for s in plan["steps"] if s["stepKey"] == step_key), None)
    if step is None:
        raise ValueError(f"the plan has no step {step_key!r}")
    execution = evidence["execution"]
    if not isinstance(execution, dict) or execution.get("executorType") not in T.EXECUTOR_TYPES:
        raise ValueError("evidence.execution must be an execution revision of a known executorType")
    try:
        receipt = normalize_reconciliation_receipt(evidence["taskReconciliation"])
        execution = normalize_execution_revision(execution)
    except (EvidenceProblem, QlwfError, KeyError, TypeError) as e:
        raise ValueError(f"evidence does not normalize: {e!r}") from e
    return derive_binding(step, receipt, execution)


def _binding_difference(binding: Any, derived: Record) -> str | None:
    if binding == derived:
        return None
    differing = sorted(k for k in derived if not isinstance(binding, dict) or binding.get(k) != derived[k])
    return f"binding differs from the one derived from the evidence in {differing}"


def trace_evidence_problem(plan: Record, step_key: str, binding: Any, evidence: Any) -> str | None:
    """Why a trace step's `binding` is not the one §3A derives for the plan step `step_key` from the
    `evidence` it carries, or None when it is (`step_evidence_binding`)."""
    try:
        derived = step_evidence_binding(plan, step_key, evidence)
    except ValueError as e:
        return str(e)
    return _binding_difference(binding, derived)


def foreign_binding_refusal(plan: Record, step_key: str, binding: Any, evidence: Any) -> Invalid | None:
    """What a store that derives a task attempt's binding from ql3 evidence (§3A) answers a request for
    the plan step `step_key` whose `binding` is not the one `evidence` derives: it never takes a binding,
    so it cannot admit that one, and refuses as §3A refuses an admission input (Invalid
    `…_TASK_ATTEMPT_ADMISSION_INVALID` `input_invalid`), writing nothing. None when the binding is the
    derived one; ValueError when the evidence derives none (a probe needs real evidence)."""
    problem = _binding_difference(binding, step_evidence_binding(plan, step_key, evidence))
    if problem is None:
        return None
    return Invalid(T.FAMILIES["task_admission"].invalid or "", "input_invalid", problem)
