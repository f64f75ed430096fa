"""Task attempt admission from ql3's own input (task-attempts.md §3A).

ql3 does not hand its admission builder a binding: it hands it the Task reconciliation receipt of
the plan's generation and the Task's execution revision, and derives the seven binding values from
them. `build_ql3_task_attempt_admission` runs §3A's checks A1-A18 in ql3's order (the table
`tables.QL3_ADMISSION_CHECKS`), each failure Invalid with ql3's reason text as its message, then
builds the §3 outputs from the derived binding. The command admit_task_attempt and the traces keep
the abstract binding of §3 (D-1); `derive_binding` is the one place that says how evidence becomes
a binding.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from . import tables as T
from .attempts import admission_outputs, admission_run_problem, admission_step_problem
from .errors import EvidenceProblem, Invalid
from .execution_revision import normalize_execution_revision
from .reconciliation import normalize_reconciliation_receipt
from .records import Record, normalize_plan, normalize_step_run
from .values import INT31_MAX, is_identifier, is_int_in, is_object, is_timestamp

QL3_ADMISSION_INPUT_KEYS = ("plan", "run", "stepRun", "taskReconciliation", "execution", "attemptNumber",
                            "admittedAtMs")
_CHECKS = {c.id: c for c in T.QL3_ADMISSION_CHECKS}
# A7: no upper bound on R here (ql3 checks the digits only); the §3 binding form keeps TASK_REVISION.
_LOCAL_TASK_REVISION_RE = re.compile(r"qltd:v1:[1-9][0-9]{0,9}:[0-9a-f]{64}", re.ASCII)
_DIGEST_SUFFIX = 64


def _fail(check: str, cause: BaseException | None = None) -> NoReturn:
    err = Invalid(T.FAMILIES["task_admission"].invalid or "", "input_invalid", _CHECKS[check].reason_text)
    raise err from cause


def _require(ok: bool, check: str) -> None:
    if not ok:
        _fail(check)


def is_ql3_admission_input(inp: Any) -> bool:
    """Which form an admit-attempt input is: §3 when it has `binding` and none of the evidence keys;
    anything else (the §3A keys, both forms' keys, neither, not an object) is read as §3A, whose
    first checks say what is wrong with it."""
    return not (is_object(inp) and "binding" in inp and "taskReconciliation" not in inp and "execution" not in inp)


def reconciled_item(receipt: Record, runtime_task_id: str) -> Record | None:
    return next((i for i in receipt["items"] if i["taskId"] == runtime_task_id), None)


def derive_binding(step: Record, receipt: Record, execution: Record) -> Record:
    """The seven binding values §3A derives from normalized evidence, in the binding's key order."""
    return {
        "resourceTaskId": step["taskId"],
        "taskReconciliationReceiptDigest": receipt["receiptDigest"],
        "taskId": execution["taskId"],
        "taskRevision": execution["taskRevision"],
        "taskDefinitionDigest": execution["taskRevision"][-_DIGEST_SUFFIX:],
        "executorType": execution["executorType"],
        "executionDigest": execution["contentDigest"],
    }


def _evidence(inp: Record) -> tuple[Record, Record, Record]:
    """A3: plan, stepRun and taskReconciliation normalize."""
    try:
        plan = normalize_plan(inp["plan"])
        step_run = normalize_step_run(inp["stepRun"])
        receipt = normalize_reconciliation_receipt(inp["taskReconciliation"])
    except (Invalid, EvidenceProblem) as e:
        _fail("A3", e)
    return plan, step_run, receipt


def _execution(x: Any) -> Record:
    """A4-A9: the execution revision, normalized, with its identity checked."""
    _require(is_object(x) and x.get("executorType") in T.EXECUTOR_TYPES and type(x["executorType"]) is str, "A4")
    try:
        execution = normalize_execution_revision(x)
    except EvidenceProblem as e:
        _fail("A5", e)
    if execution["executorType"] == "local_process":
        _require(is_identifier(execution["taskRevision"]), "A6")
        _require(_LOCAL_TASK_REVISION_RE.fullmatch(execution["taskRevision"]) is not None, "A7")
    _require(is_identifier(execution["projectId"]), "A8")
    _require(is_identifier(execution["taskId"]), "A9")
    return execution


def check_ql3_admission(inp: Any) -> tuple[Record, Record, Record, Record]:
    """Checks A1-A18 in order; (plan, run, stepRun, binding) of an input that passes them all."""
    _require(is_object(inp), "A1")
    _require(inp.keys() == set(QL3_ADMISSION_INPUT_KEYS), "A2")
    plan, step_run, receipt = _evidence(inp)
    execution = _execution(inp["execution"])
    _require(is_int_in(inp["attemptNumber"], 1, T.MAX_RUN_ATTEMPTS), "A10")
    at = inp["admittedAtMs"]
    _require(is_timestamp(at), "A11")
    run = inp["run"]
    _require(admission_run_problem(run, plan) is None, "A12")
    problem, step = admission_step_problem(step_run, plan)
    _require(problem is None, "A13")
    assert step is not None
    t = plan["target"]
    _require(all(receipt[k] == t[k] for k in ("projectId", "packageName", "generation", "generationDigest",
                                              "materializedRevisionDigest", "lockDigest")), "A14")
    runtime_task_id = f"pkg:{t['packageName']}:{step['taskId']}"
    _require(is_identifier(runtime_task_id), "A15")
    item = reconciled_item(receipt, runtime_task_id)
    _require(item is not None and item["disposition"] in T.EXECUTABLE_DISPOSITIONS
             and execution["projectId"] == t["projectId"] and execution["taskId"] == runtime_task_id
             and execution["taskRevision"] == f"qltd:v1:{item['revision']}:{item['contentDigest']}", "A16")
    _require(at >= plan["plannedAtMs"] and at >= receipt["committedAtMs"] and at >= step_run["updatedAtMs"], "A17")
    _require(run["version"] < INT31_MAX and run["eventSequence"] < INT31_MAX, "A18")
    return plan, run, step_run, derive_binding(step, receipt, execution)


def build_ql3_task_attempt_admission(inp: Any) -> Record:
    """task-attempts.md §3A: the §3 outputs {receipt, attempt, event, run} from ql3's admission input."""
    plan, run, step_run, binding = check_ql3_admission(inp)
    return admission_outputs(plan, run, step_run, binding, inp["attemptNumber"], inp["admittedAtMs"])
