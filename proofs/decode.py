"""Decode Z3 models into readable, model-like states and replayable traces (JSON-ready)."""

from __future__ import annotations

import json
from typing import Any

import z3

from .encoding import BOOL, INT, RUN_KINDS, STEP_KINDS, Encoding, Sys

RUN_NAMES = {
    "rs": "status", "ver": "version", "seq": "eventSequence", "nev": "events", "reason": "cancelReason",
    "rerr": "errorCode", "rsum": "errorSummary", "rpath": "terminalPath", "natt": "attempts",
    "ncancel": "cancelRequestedEvents", "nterm": "terminalEvents", "nother": "otherAttemptEvents",
    "g_after_term": "ghost.eventAfterTerminal", "g_work_after_intent": "ghost.newWorkAfterIntent",
    "g_tr_intent": "ghost.timeoutRequestUnderIntent",
}
STEP_NAMES = {
    "st": "status", "sv": "version", "ac": "attemptCount", "rdy": "readyAtMsSet", "sst": "startedAtMsSet",
    "rc": "resultCode", "ssum": "errorSummary", "spath": "lastMutationBy", "nse": "stepEvents",
    "nat": "attemptsAdmitted",
    "g_prior_bad": "ghost.olderAttemptNotUnstartedLost", "g_nstart": "ghost.attemptsThatStarted",
}
ATTEMPT_NAMES = {
    "at": "status", "rv": "epochVersion", "cb": "callbackSequence", "ast": "startedAtMsSet", "adl": "deadlineSet",
    "adp": "deadlinePassed", "ntr": "timeoutRequests", "aerr": "errorCode", "asum": "errorSummary",
    "apath": "terminatedBy", "akeys": "leaseKeys", "algen": "leaseGenerationMirror", "alver": "leaseVersionMirror",
}
LEASE_NAMES = {"ls": "status", "lrx": "releasedByRecovery", "lgen": "generation", "lver": "version"}


def value(enc: Encoding, model: z3.ModelRef, expr: z3.ExprRef, kind: str) -> Any:
    v = model.eval(expr, model_completion=True)
    if kind == INT:
        return v.as_long() if z3.is_int_value(v) else str(v)
    if kind == BOOL:
        return z3.is_true(v)
    domain = enc.kind_domain(kind)
    assert domain is not None
    out = domain.decode(v)
    return enc.t.text_label(out) if kind == "text" else out


def dag(enc: Encoding, model: z3.ModelRef) -> list[list[int]]:
    """needs of each step index (j < i)."""
    return [[j for j in range(i) if z3.is_true(model.eval(enc.need[i][j], model_completion=True))]
            for i in range(enc.n)]


def state(enc: Encoding, model: z3.ModelRef, x: Sys) -> dict[str, Any]:
    run = {RUN_NAMES[f]: value(enc, model, getattr(x.run, f), k) for f, k in RUN_KINDS.items()}
    run["cancelReason"] = None if run["cancelReason"] == "none" else run["cancelReason"]
    steps = []
    needs = dag(enc, model)
    for i, s in enumerate(x.steps):
        raw = {f: value(enc, model, getattr(s, f), k) for f, k in STEP_KINDS.items()}
        step: dict[str, Any] = {"index": i, "needs": needs[i]}
        step |= {STEP_NAMES[f]: raw[f] for f in STEP_NAMES}
        if raw["at"] != "none":
            attempt = {ATTEMPT_NAMES[f]: raw[f] for f in ATTEMPT_NAMES}
            attempt["lease"] = None if raw["ls"] == "absent" else {LEASE_NAMES[f]: raw[f] for f in LEASE_NAMES}
            step["attempt"] = attempt
        else:
            step["attempt"] = None
        steps.append(step)
    return {"run": run, "steps": steps}


def args(enc: Encoding, model: z3.ModelRef, arg_exprs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, expr in arg_exprs.items():
        v = model.eval(expr, model_completion=True)
        if z3.is_int_value(v):
            out[name] = v.as_long()
        elif z3.is_true(v) or z3.is_false(v):
            out[name] = z3.is_true(v)
        else:
            for dname in vars(enc.d):
                domain = getattr(enc.d, dname)
                if domain.sort == v.sort():
                    out[name] = domain.decode(v)
                    break
    return out


def diff(pre: dict[str, Any], post: dict[str, Any]) -> dict[str, Any]:
    """Only what changed (nested attempt / lease fields by path), for compact reports."""
    out: dict[str, Any] = {}
    _diff("run", pre["run"], post["run"], out)
    for a, b in zip(pre["steps"], post["steps"], strict=True):
        _diff(f"steps[{b['index']}]", a, b, out)
    return out


def _diff(path: str, a: Any, b: Any, out: dict[str, Any]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in b:
            _diff(f"{path}.{k}", a.get(k), b[k], out)
    elif a != b:
        out[path] = [a, b]


def constraints(enc: Encoding, x: Sys, decoded: dict[str, Any]) -> z3.BoolRef:
    """Inverse of `state`: pin a symbolic state to a decoded one (used to replay traces)."""
    inv_run = {v: k for k, v in RUN_NAMES.items()}
    cs = []
    for name, v in decoded["run"].items():
        f = inv_run[name]
        cs.append(_pin(enc, getattr(x.run, f), RUN_KINDS[f], "none" if f == "reason" and v is None else v))
    for s, d in zip(x.steps, decoded["steps"], strict=True):
        for f, name in STEP_NAMES.items():
            cs.append(_pin(enc, getattr(s, f), STEP_KINDS[f], d[name]))
        attempt = d["attempt"]
        if attempt is None:
            cs.append(enc.slot_is_empty(s))
            continue
        for f, name in ATTEMPT_NAMES.items():
            cs.append(_pin(enc, getattr(s, f), STEP_KINDS[f], attempt[name]))
        lease = attempt["lease"]
        if lease is None:
            cs += [s.ls == enc.d.lease_state("absent"), z3.Not(s.lrx), s.lgen == 0, s.lver == 0]
        else:
            for f, name in LEASE_NAMES.items():
                cs.append(_pin(enc, getattr(s, f), STEP_KINDS[f], lease[name]))
    return z3.And(cs)


def _pin(enc: Encoding, expr: z3.ExprRef, kind: str, v: Any) -> z3.BoolRef:
    if kind == INT:
        return expr == z3.IntVal(v)
    if kind == BOOL:
        return expr == z3.BoolVal(v)
    domain = enc.kind_domain(kind)
    assert domain is not None
    if kind == "text" and v is not None and v.startswith("text("):
        v = enc.t.CODE_TEXTS[v[5:-1]]
    return expr == domain(v)


def describe(counterexample: dict[str, Any]) -> list[str]:
    """A compact, human-readable rendering: the failing state, then one line per trace step with what
    it changed (the replayable BMC trace from Init last)."""
    lines = [str(counterexample.get("kind", "counterexample"))]
    for key in ("violated", "failures", "rank", "dag"):
        if key in counterexample:
            lines.append(f"  {key}: {counterexample[key]}")
    if "state" in counterexample:
        lines.append("  state: " + _short(counterexample["state"], 2000))
    for label in ("trace", "replay"):
        block = counterexample.get(label)
        steps = block.get("trace", []) if isinstance(block, dict) else block
        if not steps:
            continue
        if isinstance(block, dict):
            lines.append(f"  replayable trace from Init (needs per step index: {block.get('dag')}):")
        for step in steps:
            lines.append(f"  {step['step']}. {step['command']}({step['args']})")
            for path, (old, new) in diff(step["pre"], step["post"]).items():
                lines.append(f"       {path}: {_short(old)} → {_short(new)}")
    return lines


def _short(v: Any, limit: int = 160) -> str:
    text = json.dumps(v, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
